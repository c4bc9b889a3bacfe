"""Sub-agents as values (pure): child session ids, the task a parent gives a child, the
report a child sends back, and the parent's record of each child.

A sub-agent is a session like any other, whose id names its parent: the children of
``cli:main`` are ``agent:cli:main/1``, ``agent:cli:main/2``...; a child's own children
add a number (``agent:cli:main/1/1``). So the parent, the depth and every descendant of a
session are read off ids, with no lookup.

Exactly once, across crashes, rests on two identities derived from durable records:
the child's first input is admitted under :func:`spawn_identity` (from the parent's
spawn record, so re-running the spawn cannot start a second child), and each of the
child's answers reaches the parent under :func:`report_identity` (from the child's
recorded turn, so re-delivering it after a crash admits it once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from netclaw.errors import InvalidInput

AGENT_CHANNEL = "agent"
_PREFIX = f"{AGENT_CHANNEL}:"
SPAWN_TOOL = "spawn_agent"
MAX_TASK_CHARS = 50_000
MAX_REPORT_CHARS = 100_000  # what of a child's answer the parent's model reads
PREVIEW_CHARS = 160  # a task or result as listings and chat status lines show it
GONE_TURN = 2**31 - 1  # the turn of a deleted child's last report: after it, nothing is news
ModelRole = Literal["main", "compaction"]
ReportStatus = Literal["completed", "failed", "timed_out", "interrupted", "cancelled"]
ChildStatus = Literal["running", "completed", "failed", "timed_out", "interrupted", "cancelled"]
_STATUSES = ("completed", "failed", "timed_out", "interrupted", "cancelled")


# -- ids -------------------------------------------------------------------------------------------


def child_id(parent: str, n: int) -> str:
    """The id of ``parent``'s ``n``-th child."""
    return f"{parent}/{n}" if is_agent(parent) else f"{_PREFIX}{parent}/{n}"


def is_agent(session_id: str) -> bool:
    """Is this a sub-agent's session (one with a parent)?"""
    return session_id.startswith(_PREFIX) and "/" in session_id


def parent_of(session_id: str) -> str | None:
    """``agent:cli:x/1`` → ``cli:x``; ``agent:cli:x/1/2`` → ``agent:cli:x/1``; None for a
    session that is nobody's child."""
    if not is_agent(session_id):
        return None
    head = session_id.rsplit("/", 1)[0]
    return head if "/" in head else head[len(_PREFIX) :]


def depth_of(session_id: str) -> int:
    """0 for a session people started, 1 for its children, 2 for theirs..."""
    return session_id.count("/") if is_agent(session_id) else 0


def descendants_prefix(session_id: str) -> str:
    """Every descendant's id starts with this (and no other session's does)."""
    return child_id(session_id, 1)[:-1]


def is_descendant(candidate: str, ancestor: str) -> bool:
    return candidate.startswith(descendants_prefix(ancestor))


def root_of(session_id: str) -> str:
    """The session people started that ``session_id`` works for (itself if none)."""
    while (parent := parent_of(session_id)) is not None:
        session_id = parent
    return session_id


def spawn_identity(parent: str, n: int) -> str:
    """The replay identity of a child's first input (its task)."""
    return f"spawn:{parent}:{n}"


def report_identity(child: str, turn: int) -> str:
    """The replay identity of a child's answer as its parent's input."""
    return f"subagent:{child}:{turn}"


# -- what the model asks for ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """The ``spawn_agent`` arguments, checked."""

    task: str
    tools: tuple[str, ...] | None = None  # names or `*` globs among the parent's tools; None: all
    model: ModelRole | None = None  # a model of the config's `models`; None: the main one
    budget_tokens: int | None = None
    wait: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> SpawnRequest:
        """InvalidInput naming the argument that is wrong."""
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise InvalidInput("task", "'task' is required: what the sub-agent should do, in words")
        if len(task) > MAX_TASK_CHARS:
            raise InvalidInput("task", f"'task' is longer than {MAX_TASK_CHARS} characters")
        tools = args.get("tools")
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
        ):
            raise InvalidInput("tools", "'tools' must be a list of tool names (or `*` globs)")
        model = args.get("model")
        if model is not None and model not in ("main", "compaction"):
            raise InvalidInput("model", f"'model' must be 'main' or 'compaction' (got {model!r})")
        budget = args.get("budget_tokens")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
            raise InvalidInput("budget_tokens", "'budget_tokens' must be a positive whole number")
        wait = args.get("wait", False)
        if not isinstance(wait, bool):
            raise InvalidInput("wait", "'wait' must be true or false")
        return cls(task.strip(), None if tools is None else tuple(tools), model, budget, wait)


# -- between parent and child -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildTask:
    """What a parent gives its ``n``-th child with the child's first input: the tools it
    may use (names, a subset of the parent's), the model, its token budget, and the
    parent's audience and memory scope, which the child serves under."""

    parent: str
    n: int
    tools: tuple[str, ...]
    model: ModelRole = "main"
    budget_tokens: int | None = None
    audience: str = "personal"
    scope: str | None = None

    @property
    def child(self) -> str:
        return child_id(self.parent, self.n)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "n": self.n,
            "tools": list(self.tools),
            "model": self.model,
            "budget_tokens": self.budget_tokens,
            "audience": self.audience,
            "scope": self.scope,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChildTask:
        model = d.get("model", "main")
        return cls(
            parent=str(d["parent"]),
            n=int(d["n"]),
            tools=tuple(str(t) for t in d["tools"]),
            model="compaction" if model == "compaction" else "main",
            budget_tokens=None if d.get("budget_tokens") is None else int(d["budget_tokens"]),
            audience=str(d.get("audience", "personal")),
            scope=None if d.get("scope") is None else str(d["scope"]),
        )


@dataclass(frozen=True, slots=True)
class ChildReport:
    """One recorded turn of a child, owed to its parent until the parent admitted it.
    ``of_task``: the turn answered the task the parent gave (not a later message someone
    sent the child); ``tokens`` and ``cost``: what the turn spent, charged to the parent."""

    parent: str
    n: int
    turn: int
    status: ReportStatus
    text: str | None
    error: str | None = None
    tokens: int = 0
    of_task: bool = True
    cost: float = 0.0

    @property
    def child(self) -> str:
        return child_id(self.parent, self.n)

    @property
    def identity(self) -> str:
        return report_identity(self.child, self.turn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "n": self.n,
            "turn": self.turn,
            "status": self.status,
            "text": self.text,
            "error": self.error,
            "tokens": self.tokens,
            "of_task": self.of_task,
            "cost": self.cost,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChildReport:
        status = d["status"]
        if status not in _STATUSES:
            raise ValueError(f"unknown report status {status!r}")
        return cls(
            parent=str(d["parent"]),
            n=int(d["n"]),
            turn=int(d["turn"]),
            status=status,
            text=None if d.get("text") is None else str(d["text"]),
            error=None if d.get("error") is None else str(d["error"]),
            tokens=int(d.get("tokens", 0)),
            of_task=bool(d.get("of_task", True)),
            cost=float(d.get("cost", 0.0)),
        )


def gone_report(child: str, by: str) -> ChildReport | None:
    """What a parent is told when its child's session was deleted (None: not a child): a
    cancellation, after which its records say the child is over."""
    parent = parent_of(child)
    if parent is None:
        return None
    n = int(child.rsplit("/", 1)[1])
    return ChildReport(
        parent, n, GONE_TURN, "cancelled", None, f"its session was deleted by {by}", of_task=False
    )


def report_text(report: ChildReport, label: Callable[[str, str], str]) -> str:
    """What the parent's model reads when a child's answer arrives (never taken for the
    user's words). The answer is the child's model's words after whatever it read: it comes
    last, wrapped by ``label`` (``netclaw.security.trust.label``: this module sits below it)."""
    what = "the task you gave it" if report.of_task else "a later message"
    head = f"[netclaw: report from your sub-agent {report.child} (its turn {report.turn}, on {what}); "
    if report.status == "completed":
        answer = report.text or "(no text)"
        cut = ""
        if len(answer) > MAX_REPORT_CHARS:
            answer, cut = answer[:MAX_REPORT_CHARS], f" (its first {MAX_REPORT_CHARS:,} characters)"
        return f"{head}its answer follows{cut}, not a message from the user]\n{label(report.child, answer)}"
    why = report.error or report.status
    return f"{head}it did not finish: {report.status}: {why}]"


# -- the parent's record of a child -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """A child as its parent's state keeps it. ``wait``: the turn that spawned it waits
    for its answer (which then becomes that turn's tool result, not new input), until
    ``detached`` (the wait ran out: the answer arrives as input after all)."""

    task: ChildTask
    call_id: str
    turn: int  # the parent's turn that spawned it
    text: str  # the task, as given (its first input)
    wait: bool = False
    detached: bool = False
    status: ChildStatus = "running"
    reported_through: int = 0  # the child's turns reported so far
    spawned_at: float = 0.0
    finished_at: float | None = None
    result: str | None = None  # the latest report's answer (or error), for listings

    @property
    def child(self) -> str:
        return self.task.child

    @property
    def waited(self) -> bool:
        return self.wait and not self.detached

    @property
    def running(self) -> bool:
        return self.status == "running"

    def reported(self, report: ChildReport, ts: float) -> ChildRecord:
        return replace(
            self,
            status=report.status,
            reported_through=max(self.reported_through, report.turn),
            finished_at=ts,
            result=report.text if report.status == "completed" else report.error or report.status,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.to_dict(),
            "call_id": self.call_id,
            "turn": self.turn,
            "text": self.text,
            "wait": self.wait,
            "detached": self.detached,
            "status": self.status,
            "reported_through": self.reported_through,
            "spawned_at": self.spawned_at,
            "finished_at": self.finished_at,
            "result": self.result,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChildRecord:
        status = d.get("status", "running")
        return cls(
            task=ChildTask.from_dict(d["task"]),
            call_id=str(d["call_id"]),
            turn=int(d["turn"]),
            text=str(d["text"]),
            wait=bool(d.get("wait", False)),
            detached=bool(d.get("detached", False)),
            status=status if status in (*_STATUSES, "running") else "failed",
            reported_through=int(d.get("reported_through", 0)),
            spawned_at=float(d.get("spawned_at", 0.0)),
            finished_at=None if d.get("finished_at") is None else float(d["finished_at"]),
            result=None if d.get("result") is None else str(d["result"]),
        )

    def as_json(self, phase: str | None = None) -> dict[str, Any]:
        """As the API lists it (``phase``: the child's, when it is resident)."""
        return {
            "id": self.child,
            "n": self.task.n,
            "status": self.status,
            "task": self.text,
            "turn": self.turn,
            "wait": self.waited,
            "tools": list(self.task.tools),
            "model": self.task.model,
            "budget_tokens": self.task.budget_tokens,
            "reported_turns": self.reported_through,
            "spawned_at": self.spawned_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "phase": phase or "passivated",
        }


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe(records: Iterable[ChildRecord], phases: Mapping[str, str] | None = None) -> str:
    """The children as ``/agents`` and ``list_agents`` tell them, newest last."""
    lines = []
    for r in records:
        state = r.status + (" (waited for)" if r.running and r.waited else "")
        if phases is not None and r.running and r.child in phases:
            state += f", {phases[r.child]}"
        line = f"{r.child}: {state} — task: {preview(r.text, 80)}"
        if not r.running and r.result:
            line += f" — {preview(r.result, 120)}"
        lines.append(line)
    return "\n".join(lines) if lines else "No sub-agents in this conversation."
