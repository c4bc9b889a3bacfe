"""A turn in progress: the model call (after the context ladder's decision), tool rounds,
calls waiting for a person's decision, the overflow ladder, and the end of the turn —
completed, failed, timed out or cancelled.

The steps themselves are pure (:mod:`netclaw.sessions._core.turn` records and outputs, :mod:`netclaw.sessions._core.context.ladder`
decisions, :mod:`netclaw.sessions._core.approvals`); this is their order. Work on the I/O loop carries this
turn's current op id; a result for any other op is stale and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from netclaw.errors import ContextOverflow, ProviderError
from netclaw.lineage import SPAWN_TOOL
from netclaw.llm import Completion, ToolSchema
from netclaw.messages import ChatMessage, ToolCall, Transcript
from netclaw.security.roles import turn_needs_approval
from netclaw.sessions._core import turn as turn
from netclaw.sessions._core.activities.calling import (
    attach_tail,
    fall_back,
    model_call,
    recall_for,
    record_trim,
    spend_stopped,
    stop_detail,
    tools_call,
)
from netclaw.sessions._core.activity import Activity, Core
from netclaw.sessions._core.approvals import (
    calls_to_ask,
    closed_outputs,
    new_requests,
    refusals,
    request_outputs,
)
from netclaw.sessions._core.commands import Cancel, Command, CompactNow, Decide, Reset
from netclaw.sessions._core.context import ladder as ladder
from netclaw.sessions._core.effects import CancelOp, Measure, Recall, ReplyOwed, Transcribe
from netclaw.sessions._core.handlers import voice as voice
from netclaw.sessions._core.handlers.decisions import settle
from netclaw.sessions._core.handlers.subagents import announce, cancel_children, round_spawns
from netclaw.sessions._core.journal.events import ApprovalRequested, RoundStarted, TurnStatus
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import (
    ApprovalsDue,
    OpFailed,
    ProviderDeltas,
    ProviderDone,
    Recalled,
    ToolEvent,
    ToolsDone,
    Transcribed,
    TurnTimeout,
)
from netclaw.sessions._core.turn import TurnRun
from netclaw.spend import SpendStop
from netclaw.toolspec import ToolResult

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Turn:
    phase: ClassVar[Phase] = Phase.PROCESSING
    run: TurnRun
    in_flight: bool = field(default=False)  # an op of run.op_id runs on the loop
    # What entering it does: start the turn, or — back from a compaction in its middle —
    # call the model again ("trim": after the overflow trim first).
    entry: Literal["start", "call", "trim"] = "start"

    @property
    def turn(self) -> int:
        return self.run.turn

    def entered(self, core: Core) -> Activity:
        match self.entry:
            case "start":
                core.context.new_turn()
                return self.start(core)
            case "call":
                return self._call(core)
            case "trim":
                return self._overflow_trim(core)

    def resumed(self, *, trim: bool) -> Activity:
        self.entry = "trim" if trim else "call"
        return self

    def interrupted(self, core: Core) -> Activity:
        return self

    def stopping(self, core: Core) -> None:
        pass  # its op is cancelled by the shell; its waiting callers are the session's

    def handle(self, core: Core, command: Command) -> Activity:  # noqa: C901 - one case per command
        run = self.run
        match command:
            case Transcribed(op_id=op_id, transcripts=heard):
                if self._current(core, op_id):
                    self.in_flight = False
                    self._heard(core, heard)
                    return self._begin(core)
            case Recalled(op_id=op_id, memories=memories):
                if self._current(core, op_id):
                    self.in_flight = False
                    attach_tail(core, run, memories)
                    return self._call(core)
            case ProviderDeltas(op_id=op_id, deltas=deltas):
                if self._current(core, op_id):
                    core.publish(*turn.text_deltas(core.session_id, run.turn, deltas))
            case ProviderDone(op_id=op_id, completion=completion, deltas=deltas):
                if self._current(core, op_id):
                    self.in_flight = False
                    core.publish(*turn.text_deltas(core.session_id, run.turn, deltas))
                    return self._answered(core, completion)
            case ToolsDone(op_id=op_id, results=results):
                if self._current(core, op_id):
                    self.in_flight = False
                    return self._tools_ran(core, results)
            case OpFailed(op_id=op_id, error=error):
                if self._current(core, op_id):
                    self.in_flight = False
                    return self._call_failed(core, error)
            case ToolEvent(turn=event_turn) if event_turn == run.turn:
                self._tool_event(core, command)
            case TurnTimeout(turn=timed_out) if timed_out == run.turn:
                limit = core.settings.session.turn_timeout_s
                return self.fail(
                    core, "turn_timeout", f"the turn took longer than {limit:g}s and was stopped", "timed_out"
                )
            case ApprovalsDue(turn=due) if due == run.turn:
                return self._approvals_due(core)
            case Decide():  # a decision was recorded (by the session): run the round once none is open
                return self.decided(core)
            case Cancel(reply=reply, by=by):
                after = self.fail(core, "cancelled", f"the turn was cancelled by {by}", "cancelled")
                core.answer(reply, run.turn)
                return after
            case Reset(by=by):  # the session, idle again, takes the reset
                return self.fail(
                    core, "cancelled", f"the turn was cancelled by {by}", "cancelled", then=command
                )
            case CompactNow(reply=reply):
                core.answer(reply, "not now: the session is processing; try again when it is done")
            case _:
                pass  # ticks and results that belong to no turn: stale
        return self

    # -- starting, and calling the model ------------------------------------------------------

    def start(self, core: Core) -> Activity:
        """The message's voice notes heard (once: a transcript recorded is never asked for
        again, also after a restart), the turn's tail (memories first, when there are any
        to look up), then the call — or wait for the decisions a recovered round still
        needs."""
        pending = core.state.pending_round
        if pending is not None and pending.turn == self.run.turn:
            return self._await_decisions(core)  # recovered while a tool round waited for people
        stop = spend_stopped(core, self.run)
        if stop is not None:  # before the tail: a turn that calls nobody records none
            return self._spend_stop(core, stop)
        unheard = turn.unheard(core.state, self.run.message_id)
        if unheard:
            core.emit(Transcribe(self._next_op(core), self.run.message_id, unheard))
            return self
        return self._begin(core)

    def _heard(self, core: Core, heard: tuple[tuple[int, Transcript], ...]) -> None:
        """Record what was heard (failures too, with their reasons) before the model reads it."""
        run = self.run
        files = turn.unheard(core.state, run.message_id)
        asked = {i for i, _ in files}
        if not any(i in asked for i, _ in heard):
            return
        step, charges = turn.heard_step(
            core.session_id,
            run.message_id,
            [(i, t) for i, t in heard if i in asked],
            files,
            core.settings.speech,
            core.now(),
            core.known_secrets(),
            show=core.settings.audience(core.context.audience).show_transcripts,
        )
        core.record(step)
        for effect in charges:
            core.emit(effect)

    def _begin(self, core: Core) -> Activity:
        """The turn's tail (memories first, when there are any to look up), then the call."""
        query = recall_for(core, self.run)
        if query is not None:
            core.emit(Recall(self._next_op(core), query))
            return self
        attach_tail(core, self.run, None)
        return self._call(core)

    def _call(self, core: Core) -> Activity:
        """Build the prompt, let the ladder decide (compact first?), record a trim, send."""
        run = self.run
        stop = spend_stopped(core, run)
        if stop is not None:
            return self._spend_stop(core, stop)
        tools = self._tools(core)
        prompt = core.context.prompts.build(core.state, tools)
        decision = core.context.before_call(prompt, core.state)
        if isinstance(decision, ladder.Compact):
            return core.compaction(decision, resume=self)
        if decision.trim is not None:
            record_trim(core, decision.trim, "budget")
        run.estimate = prompt.estimate
        core.emit(model_call(core, run, self._next_op(core), prompt, tools))
        return self

    def _spend_stop(self, core: Core, stop: SpendStop) -> Activity:
        return self.fail(
            core, "spend_limit", stop.message, "failed", as_notice=True, detail=stop_detail(stop)
        )

    def _tools(self, core: Core) -> list[ToolSchema]:
        # Past the iteration limit the model gets no tools, so it must answer.
        if self.run.iteration >= core.settings.session.max_tool_iterations:
            return []
        return core.context.tools()

    def _next_op(self, core: Core) -> int:
        """A new op id for the turn: results of any earlier op are stale from now on."""
        self.run.op_id = core.new_op()
        self.in_flight = True
        return self.run.op_id

    def _current(self, core: Core, op_id: int) -> bool:
        if self.run.op_id == op_id:
            return True
        log.debug("%s: dropping stale result of op %d", core.session_id, op_id)
        return False

    # -- what came back -----------------------------------------------------------------------

    def _answered(self, core: Core, completion: Completion) -> Activity:
        run, settings, model = self.run, core.settings, core.context.model
        completion, found = turn.without_secrets(completion, core.known_secrets())  # before anything reads it
        if found:
            log.info("%s: redacted %s from the model's answer", core.session_id, ", ".join(found))
        core.publish(*turn.answer_outputs(core.session_id, run.turn, completion, model))
        if completion.usage is not None:
            core.context.observe(run.estimate, completion)
            for effect in turn.count_tokens(run, completion.usage, model, core.now()):
                core.emit(effect)
        if not completion.tool_calls or run.iteration >= settings.session.max_tool_iterations:
            core.record(
                turn.completed_turn(core.session_id, core.state, run, completion, core.new_id, core.now())
            )
            voice.speak_reply(core, run.turn, completion.text)  # spoken too, where people want it
            return self._end(core, "completed")
        assistant = turn.assistant_message(
            completion, with_tool_calls=True, message_id=core.new_id("a"), ts=core.now()
        )
        core.publish(*turn.tool_call_outputs(core.session_id, run.turn, assistant))
        if self._gate_round(core, assistant):  # some call waits for a person's decision
            return self
        if any(c.name == SPAWN_TOOL for c in assistant.tool_calls):  # found again, never asked anew
            spawns = round_spawns(core, run.turn, assistant)  # recorded with it, in one write
            core.persist(RoundStarted(run.turn, assistant), *spawns)
            announce(core, spawns)
        run.pending_calls = assistant
        self._run_tools(core, assistant.tool_calls, {})
        return self

    def _tool_event(self, core: Core, event: ToolEvent) -> None:
        """A running tool's news: tokens it spent on our model, an output, a person asked or
        answered (while one is asked the turn's timeout is off: the question's own expiry
        bounds the wait, as with approvals)."""
        run = self.run
        if event.usage is not None:  # sampling: the turn's spend, priced and charged like its own calls
            for effect in turn.count_tokens(run, event.usage, core.context.model, core.now()):
                core.emit(effect)
        if event.waiting:
            run.waiting_on_people = max(0, run.waiting_on_people + event.waiting)
            if run.waiting_on_people:
                core.timers.end_turn()
            else:
                core.timers.start_turn(run.turn, core.settings.session.turn_timeout_s)
        if event.output is not None:
            core.publish(event.output)

    def _tools_ran(self, core: Core, results: Sequence[ToolResult]) -> Activity:
        run = self.run
        core.record(turn.tool_step(core.session_id, run, results, core.new_id, core.now()))
        run.pending_calls = None
        run.iteration += 1
        return core.compaction_due(self) or self._call(core)

    def _call_failed(self, core: Core, error: BaseException) -> Activity:
        if isinstance(error, ContextOverflow):
            return self._overflowed(core, error)
        if isinstance(error, ProviderError):
            if fall_back(core, self.run, error):
                return self._call(core)
            return self.fail(core, error.code, str(error), "failed")
        log.error("%s: turn work failed: %r", core.session_id, error)
        return self.fail(core, "internal", f"the turn failed unexpectedly: {type(error).__name__}", "failed")

    def _overflowed(self, core: Core, error: ContextOverflow) -> Activity:
        decision = core.context.on_overflow(core.state, str(error))
        match decision:
            case ladder.Fail(code=code, message=message):
                return self.fail(core, code, message, "failed")
            case ladder.Compact():
                log.warning(
                    "%s: provider reported context overflow; compacting and retrying", core.session_id
                )
                return core.compaction(decision, resume=self)
            case ladder.Trim():
                return self._overflow_trim(core)

    def _overflow_trim(self, core: Core) -> Activity:
        """The trim rung: shrink to ~2/3 of the refused prompt and retry, or give up."""
        run, prompts = self.run, core.context.prompts
        window = core.context.model.context_window
        prompts.observe_usage(run.estimate, max(window, run.estimate + 1))
        trim = prompts.shrink_after_overflow(core.state, self._tools(core), run.estimate)
        decision = ladder.overflow_trim(trim, estimate=run.estimate, budget=core.context.budget())
        if isinstance(decision, ladder.Fail):
            return self.fail(core, decision.code, decision.message, "failed")
        assert decision.trim is not None  # a Send from overflow_trim always carries its trim
        log.warning("%s: provider reported context overflow; trimming and retrying", core.session_id)
        record_trim(core, decision.trim, "overflow")
        return self._call(core)

    # -- tool rounds and the people who approve them --------------------------------------------

    def _run_tools(self, core: Core, calls: tuple[ToolCall, ...], refused: Mapping[str, str]) -> None:
        core.emit(tools_call(core, self.run, self._next_op(core), calls, refused))

    def _gate_round(self, core: Core, assistant: ChatMessage) -> bool:
        """Journal and announce a round that needs approvals; False when none does. A call of
        a tool that is not offered is never put to a person: it fails as unknown."""
        state, run, context, settings = core.state, self.run, core.context, core.settings
        calls = calls_to_ask(
            state,
            run.message_id,
            assistant.tool_calls,
            {t.name: t.parameters for t in self._tools(core)},
            lambda name, untrusted: turn_needs_approval(
                name,
                context.audience,
                settings,
                context.role,
                state.granted_tools,
                untrusted,
                context.hints(name),
            ),
        )
        if not calls:
            return False
        requests = new_requests(calls, core.now(), core.settings.tools.approval_timeout_s, core.random_hex)
        core.persist(ApprovalRequested(run.turn, assistant, requests))
        log.info(
            "%s: turn %d waits for approval of %s",
            core.session_id,
            run.turn,
            ", ".join(f"{r.tool} ({r.id})" for r in requests),
        )
        self._await_decisions(core)
        return True

    def _await_decisions(self, core: Core) -> Activity:
        """Announce what is open and wait for it (or run the round when nothing is)."""
        pending, run = core.state.pending_round, self.run
        assert pending is not None  # the caller found (or just recorded) the round
        run.pending_calls = pending.assistant
        run.op_id, self.in_flight = core.new_op(), False  # nothing in flight: late results are stale
        if not pending.open:
            return self.decided(core)
        core.emit(Measure("approvals_pending", len(pending.open)))
        core.publish(*request_outputs(core.session_id, pending))
        due = min(r.expires_at for r in pending.open)
        core.timers.await_approvals(run.turn, due - core.now())
        return self

    def decided(self, core: Core) -> Activity:
        """Every request of the round is decided: run it (denied and expired calls get why)."""
        pending, run = core.state.pending_round, self.run
        if pending is None or pending.open or pending.turn != run.turn:
            return self
        core.timers.start_turn(run.turn, core.settings.session.turn_timeout_s)
        run.pending_calls = pending.assistant
        self._run_tools(core, pending.assistant.tool_calls, refusals(pending))
        return self

    def _approvals_due(self, core: Core) -> Activity:
        pending = core.state.pending_round
        if pending is None or pending.turn != self.run.turn:
            return self
        now = core.now()
        for request in pending.open:
            if request.expires_at <= now + 0.001:
                settle(core, request, "expired", "timeout")
        pending = core.state.pending_round
        if pending is not None and not pending.open:
            return self.decided(core)
        if pending is not None:
            core.timers.await_approvals(pending.turn, min(r.expires_at for r in pending.open) - now)
        return self

    def _close_open_approvals(self, core: Core) -> None:
        """The turn ends while people are still asked (cancel, reset, timeout): tell them."""
        pending = core.state.pending_round
        if pending is None:
            return
        core.timers.end_approvals()
        if pending.open:
            core.emit(Measure("approvals_pending", -len(pending.open)))
        core.publish(*closed_outputs(core.session_id, pending.open))

    # -- the end of the turn --------------------------------------------------------------------

    def fail(
        self,
        core: Core,
        code: str,
        message: str,
        status: TurnStatus,
        *,
        then: Reset | None = None,
        as_notice: bool = False,
        detail: dict[str, str] | None = None,
    ) -> Activity:
        """End the turn without an answer. Every tool call in flight still gets a result.
        ``as_notice``: people see a ``notice`` (a limit doing its job), not an ``error``;
        ``then``: the reset that ended it, which the idle session takes afterwards."""
        run = self.run
        if self.in_flight:
            core.emit(CancelOp(run.op_id))
            self.in_flight = False
        run.op_id = -1  # whatever the cancelled op still reports is stale
        if status != "cancelled":  # (a cancel stopped every sub-agent already)
            cancel_children(core, f"turn {run.turn} {status}", waited_in=run.turn)
        self._close_open_approvals(core)
        core.record(
            turn.failed_turn(
                core.session_id,
                run,
                code,
                message,
                status,
                as_notice=as_notice,
                detail=detail,
                new_id=core.new_id,
                now=core.now(),
            )
        )
        run.pending_calls = None
        log.warning("%s: turn %d %s: %s", core.session_id, run.turn, status, message)
        return self._end(core, status, then=then)

    def _end(self, core: Core, status: TurnStatus, *, then: Reset | None = None) -> Activity:
        run = self.run
        core.publish(turn.turn_completed(core.session_id, run, status))
        seconds = core.monotonic() - run.started
        core.emit(Measure("turns", 1, status))
        core.emit(Measure("turn_seconds", seconds))
        turn.log_end(core.session_id, run, status, seconds)
        state = core.state  # the channel's outbox posts it if nobody watched; a report goes to the parent
        if run.turn in state.undelivered or run.turn in state.reports_owed:
            core.emit(ReplyOwed())
        core.resolve_waiters(run.message_id)
        core.timers.end_turn()
        return core.turn_ended(then=then)
