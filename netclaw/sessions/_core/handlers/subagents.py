"""A session's sub-agents, as the session itself handles them (pure): recording a spawn
(who may, how many, which tools, what budget), a child's report arriving (new input, or
only a record), a parent that stops waiting, and the cancel that cascades to children.

The order that makes a spawn exactly once: the round that spawns is recorded before it
runs (``RoundStarted``), the child is recorded here before its first input is sent
(``ChildSpawned``, found again by its call id), and that input carries an identity made
from the record (:func:`netclaw.lineage.spawn_identity`). A child's answer comes back
under :func:`netclaw.lineage.report_identity` and is recorded once (``ChildReported``,
with ``reported_through`` as a second guard for answers that start no turn).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Literal

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import InvalidInput, SubagentRefused
from netclaw.lineage import (
    SPAWN_TOOL,
    ChildReport,
    ChildTask,
    SpawnRequest,
    child_id,
    depth_of,
    is_agent,
    preview,
)
from netclaw.llm import ToolSchema
from netclaw.messages import ChatMessage
from netclaw.security.policy import memory_scope_of, tool_matches
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.commands import (
    Admission,
    DetachChild,
    RecordSpawn,
    SendUserMessage,
    SpawnAnswer,
)
from netclaw.sessions._core.effects import CancelSessions, Refuse
from netclaw.sessions._core.journal.events import (
    ChildDetached,
    ChildReported,
    ChildSpawned,
    SessionEvent,
    TaskGiven,
)
from netclaw.sessions._core.journal.state import SessionState, utc_day

log = logging.getLogger(__name__)

Verdict = Literal["unknown", "duplicate", "record", "input"]


def handle(core: Core, command: RecordSpawn | DetachChild) -> None:
    state = core.state
    match command:
        case RecordSpawn():
            _record_spawn(core, command)
        case DetachChild(n=n, reply=reply):
            record = state.children.get(n)
            if record is None:
                core.emit(Refuse(reply, SubagentRefused(f"{core.session_id} has no sub-agent {n}")))
            elif not record.running or not record.waited:
                core.answer(reply, False)  # it reported already (or nobody waited): nothing to detach
            else:
                core.persist(ChildDetached(n))
                core.answer(reply, True)


def _record_spawn(core: Core, command: RecordSpawn) -> None:
    found = next((r for r in core.state.children.values() if r.call_id == command.call_id), None)
    if found is not None:  # recorded with its round, or the round runs again after a crash
        core.answer(command.reply, SpawnAnswer(found.task, found.text, new=False))
        return
    try:
        _check_round(core.state, command)
        spawned = plan_spawn(core, command.call_id, command.turn, command.request)
    except SubagentRefused as exc:
        log.info("%s: spawn refused: %s", core.session_id, exc)
        core.emit(Refuse(command.reply, exc))
        return
    core.persist(spawned)
    announce(core, (spawned,))
    core.answer(command.reply, SpawnAnswer(spawned.task, spawned.text, new=True))


def round_spawns(core: Core, turn: int, assistant: ChatMessage) -> list[ChildSpawned]:
    """The children a round's ``spawn_agent`` calls start, to record with the round in one
    write (before any of them hears of it). A call that may not spawn (bad arguments, a
    limit) is left out: when it runs, the tool says why."""
    planned: list[ChildSpawned] = []
    for call in assistant.tool_calls:
        if call.name != SPAWN_TOOL:
            continue
        try:
            args = json.loads(call.arguments or "{}")
            request = SpawnRequest.from_args(args if isinstance(args, dict) else {})
            planned.append(plan_spawn(core, call.id, turn, request, planned))
        except (ValueError, InvalidInput, SubagentRefused):
            continue
    return planned


def plan_spawn(
    core: Core, call_id: str, turn: int, request: SpawnRequest, earlier: Sequence[ChildSpawned] = ()
) -> ChildSpawned:
    """The record of a new child (``earlier``: the ones planned with it in the same round),
    or SubagentRefused saying why not."""
    state, context, settings = core.state, core.context, core.settings
    if not context.may_spawn:
        raise SubagentRefused(_not_allowed(core.session_id, context.audience, settings))
    running = sum(1 for r in state.children.values() if r.running) + len(earlier)
    limit = settings.session.max_subagents
    if running >= limit:
        raise SubagentRefused(
            f"{running} sub-agent(s) already running, the most session.max_subagents allows "
            f"({limit}); wait for one to report, or cancel one with cancel_agent"
        )
    reserved = sum(e.task.budget_tokens or 0 for e in earlier)
    budget = child_budget(state, settings, request.budget_tokens, core.now(), reserved)
    if budget is not None and budget <= 0:
        raise SubagentRefused(
            "this conversation has no tokens left today under session.max_tokens_per_day "
            "(its running sub-agents' budgets included), so no sub-agent can start"
        )
    n = state.children_spawned + len(earlier) + 1
    may_spawn = depth_of(child_id(core.session_id, n)) < _max_depth(settings)
    task = ChildTask(
        core.session_id,
        n,
        _child_tools(context.tools(), request.tools, may_spawn=may_spawn),
        request.model or "main",
        budget,
        context.audience,
        memory_scope_of(core.session_id, state.place),
    )
    return ChildSpawned(task, call_id, turn, request.task, request.wait)


def announce(core: Core, spawned: Sequence[ChildSpawned]) -> None:
    """Recorded: say so (log, and every subscriber)."""
    for event in spawned:
        task = event.task
        log.info(
            "%s: spawned %s (wait: %s, tools: %s)",
            core.session_id,
            task.child,
            event.wait,
            ", ".join(task.tools),
        )
        core.publish(
            out.SubagentStarted(
                session_id=core.session_id, child_id=task.child, task=preview(event.text), wait=event.wait
            )
        )


def _check_round(state: SessionState, command: RecordSpawn) -> None:
    """A spawn comes from the recorded round of the running turn, or not at all (a late
    call of a round that was cancelled meanwhile spawns nothing)."""
    active, pending = state.active, state.pending_round
    in_round = (
        active is not None
        and active.turn == command.turn
        and pending is not None
        and pending.turn == command.turn
        and any(c.id == command.call_id for c in pending.assistant.tool_calls)
    )
    if not in_round:
        raise SubagentRefused(f"turn {command.turn} is no longer running, so it spawns nothing")


def _not_allowed(session_id: str, audience: str, settings: Settings) -> str:
    if depth_of(session_id) >= _max_depth(settings):
        return (
            f"sub-agents may be nested {_max_depth(settings)} deep (session.max_subagent_depth); "
            "do this work yourself"
        )
    return f"{audience} sessions may not spawn sub-agents (audiences.{audience}.subagents)"


def _max_depth(settings: Settings) -> int:
    return settings.session.max_subagent_depth


def _child_tools(
    offered: Sequence[ToolSchema], requested: tuple[str, ...] | None, *, may_spawn: bool
) -> tuple[str, ...]:
    """The child's tools: those of the parent's that ``requested`` names (all when None),
    without ``spawn_agent`` at the depth limit. A name that matches none of the parent's
    tools is refused, naming it: a child never gets more than its parent."""
    names = sorted(t.name for t in offered)
    if requested is None:
        chosen = names
    else:
        unknown = [p for p in requested if not any(tool_matches(n, [p]) for n in names)]
        if unknown:
            raise SubagentRefused(
                f"not among your tools: {', '.join(unknown)} (yours: {', '.join(names) or 'none'})"
            )
        chosen = [n for n in names if tool_matches(n, requested)]
    return tuple(n for n in chosen if may_spawn or n != SPAWN_TOOL)


def child_budget(
    state: SessionState, settings: Settings, requested: int | None, now: float, reserved: int = 0
) -> int | None:
    """The tokens a new child may spend (None: no limit): what the model asked for, or
    ``session.subagent_budget_tokens`` — never more than this session has left today under
    ``session.max_tokens_per_day`` once its running children's budgets (and ``reserved``:
    those of children starting with it) are set aside. What
    a child spends is charged to its parent when its report arrives (``ChildReported``,
    folded by ``SessionState._charged``), so the parent's cap holds for the family."""
    budget = requested or settings.session.subagent_budget_tokens
    cap = settings.session.max_tokens_per_day
    if cap is None:
        return budget
    reserved += sum(r.task.budget_tokens or 0 for r in state.children.values() if r.running)
    left = cap - state.tokens_spent_on(utc_day(now)) - reserved
    return left if budget is None else min(budget, left)


# -- input that concerns sub-agents -------------------------------------------------------------


def admission(core: Core, send: SendUserMessage) -> tuple[SessionEvent, ...] | None:
    """The events to record with this input's admission (a child's task, a report), or None
    when it was answered here: refused, a duplicate, or a report that starts no turn."""
    state, sub = core.state, send.subagent
    if isinstance(sub, ChildReport):
        match report_verdict(state, core.session_id, sub):
            case "unknown":
                refused = InvalidInput("subagent", f"{sub.child} is not a sub-agent of {core.session_id}")
                core.emit(Refuse(send.ack, refused))
                return None
            case "duplicate":
                core.answer(send.ack, Admission(core.session_id, "", duplicate=True))
                return None
            case "record":
                core.persist(ChildReported(sub))
                core.publish(finished(core.session_id, sub))
                core.answer(send.ack, Admission(core.session_id, "", duplicate=False))
                return None
            case "input":
                return (ChildReported(sub),)
    if isinstance(sub, ChildTask):
        if sub.child != core.session_id:
            core.emit(Refuse(send.ack, InvalidInput("subagent", f"that task is for {sub.child}")))
            return None
        return (TaskGiven(sub),) if state.task is None else ()
    if is_agent(core.session_id) and state.task is None:
        refused = InvalidInput(
            "session_id", f"{core.session_id} is a sub-agent's session: only its parent starts it"
        )
        core.emit(Refuse(send.ack, refused))
        return None
    return ()


def admitted(core: Core, send: SendUserMessage) -> None:
    """After the admission was recorded: a report is shown, a task takes effect."""
    sub = send.subagent
    if isinstance(sub, ChildReport):
        core.publish(finished(core.session_id, sub))
    elif isinstance(sub, ChildTask) and core.state.task == sub:
        core.context.task_given(sub, core.state.place)


def report_verdict(state: SessionState, session_id: str, report: ChildReport) -> Verdict:
    """What a child's report is to its parent: not its child's, already admitted, a record
    only (the turn that spawned it waits for this answer as its tool result, or the child
    was cancelled), or new input that starts a turn."""
    record = state.children.get(report.n)
    if report.parent != session_id or record is None:
        return "unknown"
    if report.turn <= record.reported_through:
        return "duplicate"
    if report.status == "cancelled" or (report.of_task and record.waited):
        return "record"
    return "input"


def finished(session_id: str, report: ChildReport) -> out.SubagentFinished:
    summary = report.text if report.status == "completed" else report.error or report.status
    return out.SubagentFinished(
        session_id=session_id,
        child_id=report.child,
        turn=report.turn,
        status=report.status,
        summary=preview(summary),
    )


def cancel_children(core: Core, by: str, *, waited_in: int | None = None) -> None:
    """Cancel the running children (only those turn ``waited_in`` waits for, if given):
    their provider streams close and their tools stop; their reports come back cancelled."""
    ids = tuple(
        r.child
        for r in core.state.children.values()
        if r.running and (waited_in is None or (r.waited and r.turn == waited_in))
    )
    if ids:
        log.info("%s: cancelling sub-agent(s) %s", core.session_id, ", ".join(ids))
        core.emit(CancelSessions(ids, f"{by} (through {core.session_id})"))
