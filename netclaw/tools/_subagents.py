"""The sub-agent tools: the model hands a task to a child session (``spawn_agent``), sees
its children (``list_agents``) and stops one (``cancel_agent``).

The work is the gateway's and the sessions' — recording the spawn in the parent, sending
the child its task, waiting for its answer — and the tools sit below both, so they reach it
through :class:`SubagentPort`, which the daemon wires in (``netclaw.workers.subagents.Subagents``).
A handler runs on the I/O loop like every tool: awaiting a child never blocks an actor, and
cancelling the parent's tool round (``/stop``, a turn timeout) cancels the wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from netclaw.errors import InvalidInput, NetclawError, SubagentRefused, ToolError
from netclaw.lineage import SPAWN_TOOL, ChildRecord, ChildReport, SpawnRequest, child_id, describe
from netclaw.tools._registry import Tool, ToolContext, ToolReply


class SubagentPort(Protocol):
    async def spawn(self, ctx: ToolContext, request: SpawnRequest) -> tuple[str, ChildReport | None]:
        """Start (or, for a call run again after a crash, find) the child: its id, and its
        report when ``request.wait`` and it answered in time (None: it works on)."""
        ...

    async def children(self, session_id: str) -> tuple[list[ChildRecord], Mapping[str, str]]:
        """The session's children, and the phase of those resident now."""
        ...

    async def cancel(self, session_id: str, child: str) -> bool:
        """Cancel ``child``'s running turn; False when it is not one of the session's children."""
        ...


def subagent_tools(port: SubagentPort) -> list[Tool]:
    async def spawn(args: Mapping[str, Any], ctx: ToolContext) -> str | ToolReply:
        try:
            request = SpawnRequest.from_args(args)
            child, report = await port.spawn(ctx, request)
        except InvalidInput as exc:
            raise ToolError(f"{exc} (argument: {exc.field})") from exc
        except SubagentRefused as exc:
            raise ToolError(f"no sub-agent started: {exc}") from exc
        except NetclawError as exc:
            raise ToolError(f"the sub-agent could not be started: {exc}") from exc
        if report is None and request.wait:
            return (
                f"{child} is still working after the wait ran out; its answer will arrive as a "
                "message. list_agents shows it, cancel_agent stops it."
            )
        if report is None:
            return (
                f"started {child}: it works on the task in the background and its answer will "
                "arrive as a message. list_agents shows it, cancel_agent stops it."
            )
        # The child's answer is its model's words after whatever it read: labelled (netclaw/security/trust.py).
        if report.status == "completed":
            return ToolReply(
                f"{child} finished the task. Its answer:\n{report.text or '(no text)'}", untrusted=True
            )
        return ToolReply(
            f"{child} did not finish: {report.status}: {report.error or 'no reason given'}", untrusted=True
        )

    async def listing(args: Mapping[str, Any], ctx: ToolContext) -> str:
        records, phases = await port.children(ctx.session_id)
        return describe(records, phases)

    async def cancel(args: Mapping[str, Any], ctx: ToolContext) -> str:
        child = _child_named(args.get("id"), ctx.session_id)
        records, _ = await port.children(ctx.session_id)
        mine = {child_id(r.task.parent, r.task.n): r for r in records}
        record = mine.get(child)
        direct = child.rpartition("/")[0] == child_id(ctx.session_id, 0).rpartition("/")[0]
        if record is None and direct:  # a child it never spawned
            raise ToolError(f"{child} is not one of your sub-agents; list_agents shows them")
        if record is not None and record.status != "running":
            return f"{child} is not running (it {record.status.replace('_', ' ')}); nothing to cancel"
        try:
            cancelled = await port.cancel(ctx.session_id, child)
        except NetclawError as exc:
            raise ToolError(f"could not cancel {child}: {exc}") from exc
        if not cancelled:
            raise ToolError(f"{child} is not one of your sub-agents; list_agents shows them")
        return f"cancelled {child}'s running work; list_agents shows its state"

    return [
        Tool(
            SPAWN_TOOL,
            "Hand a task to a sub-agent: a separate conversation that works on it on its own, "
            "with your tools (or the ones you name), and reports its answer back to you as a "
            "message. With wait: true this call waits for the answer instead (for a while). "
            "Use it for work that can go on in parallel or in the background.",
            {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "what to do, with everything it needs to know"},
                    "tools": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "the tools it may use (names of yours, or `*` globs); default all of yours",
                    },
                    "model": {"type": "string", "enum": ["main", "compaction"]},
                    "budget_tokens": {"type": "integer", "minimum": 1},
                    "wait": {"type": "boolean", "description": "wait for its answer (default false)"},
                },
                "required": ["task"],
                "additionalProperties": False,
            },
            spawn,
        ),
        Tool(
            "list_agents",
            "Your sub-agents: each one's id, status, task and latest result.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            listing,
            untrusted=True,  # it shows each child's latest answer
        ),
        Tool(
            "cancel_agent",
            "Stop one of your sub-agents (by id or number, from list_agents).",
            {
                "type": "object",
                "properties": {"id": {"type": ["string", "integer"]}},
                "required": ["id"],
                "additionalProperties": False,
            },
            cancel,
        ),
    ]


def _child_named(target: object, session_id: str) -> str:
    """The sub-agent id ``cancel_agent``'s ``id`` names: an id, or a child's number."""
    if isinstance(target, int) and not isinstance(target, bool):
        target = str(target)
    if not isinstance(target, str) or not target.strip():
        raise ToolError("'id' is required: the sub-agent's id (or number) from list_agents")
    target = target.strip()
    return child_id(session_id, int(target)) if target.isascii() and target.isdigit() else target
