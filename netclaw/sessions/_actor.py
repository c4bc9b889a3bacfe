"""The session actor: one pykka thread per resident session.

It owns the session's state and phase, processes one turn at a time, and does
no I/O itself: provider and tool work runs on the I/O loop and comes back as
messages carrying an op id (anything else is stale and dropped). The one
blocking call it makes is persist (:mod:`._recorder`) — wait for the journal's
durable ack before applying events — so what it acknowledges is never lost.

What to do about the prompt's size is decided by the pure context ladder
(:mod:`._ladder`); compaction is planned here, run on the loop and recorded here
(:mod:`._compaction`); idle and passivation timing is :mod:`._idle`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pykka

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import (
    ContextOverflow,
    IdempotencyKeyReused,
    NetclawError,
    OutcomeUnknown,
    ProviderError,
    SessionUnavailable,
)
from netclaw.history import TrimResult
from netclaw.persistence import NewMemory
from netclaw.policy import allowed_tools, audience_of, recall_allowed
from netclaw.providers import Completion, ProviderRequest, ToolSchema
from netclaw.runtime import Cancellable, Reply
from netclaw.sessions import _commands as cmd
from netclaw.sessions import _ladder as ladder
from netclaw.sessions import _turn as turn
from netclaw.sessions._clock import SessionClock
from netclaw.sessions._compaction import (
    CompactionOutcome,
    CompactionRun,
    compaction_output,
    compaction_record,
    describe_compaction,
    plan_compaction,
)
from netclaw.sessions._deps import SessionDeps
from netclaw.sessions._events import MemoriesExtracted, SessionEvent, SessionReset, TurnStarted, TurnStatus
from netclaw.sessions._extraction import ExtractionPlan, plan_extraction
from netclaw.sessions._loop_ops import (
    Recall,
    start_compaction,
    start_extraction,
    start_provider_call,
    start_tool_batch,
)
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._prompt import PromptBuilder
from netclaw.sessions._recorder import Recorder
from netclaw.sessions._recovery import recover_state
from netclaw.sessions._state import SessionState
from netclaw.sessions._status import status_report
from netclaw.sessions._subscribers import Subscriber, SubscriberSet, Waiters
from netclaw.sessions._turn import TurnRun
from netclaw.tools import ToolContext, ToolResult

log = logging.getLogger(__name__)

RECOVERY_TIMEOUT_S = 60.0
TOOL_TIMEOUT_S = 120.0


@dataclass(slots=True)
class Extraction:
    op_id: int
    plan: ExtractionPlan
    future: Cancellable


class SessionActor(pykka.ThreadingActor):
    def __init__(
        self, session_id: str, deps: SessionDeps, resumed_at: float | None = None, *, held: bool = False
    ) -> None:
        super().__init__()
        self.resumed_at = resumed_at  # warmed after a graceful restart: tell the model once
        self.held = held  # warmed at start-up: recovered, but going on only when released
        self.session_id = session_id
        self.deps = deps
        self.settings: Settings = deps.live.current
        self.state = SessionState(session_id)
        self.phases = PhaseMachine()
        self.subscribers = SubscriberSet()
        self.recorder = Recorder(deps.io, deps.journal)
        self.clock = SessionClock(deps.io, self.actor_ref)
        self.ladder = ladder.Ladder()
        self.prompts: PromptBuilder | None = None  # built on the actor's thread (on_start)
        self.audience = audience_of(session_id, self.settings)
        self.allowed_tools = allowed_tools(self.audience, self.settings)  # None: every tool
        self.run: TurnRun | None = None
        self.compacting: CompactionRun | None = None
        self.extraction: Extraction | None = None  # memories being extracted at passivation
        self.grace_over = False
        self.waiters = Waiters()
        self.received = 0  # routed commands received (compared with the manager's count)
        self.broken: str | None = None
        self._op_counter = 0

    # -- pykka hooks --------------------------------------------------------------------------

    def on_start(self) -> None:
        # on_start failures call neither on_failure nor on_stop in pykka: catch them here and
        # stay alive in a "broken" mode that fails whatever was routed to us, until retired.
        try:
            self.prompts = PromptBuilder(self.settings.agent.system_prompt, self.settings.trim_budget_tokens)
            self._recover()
        except Exception as exc:  # noqa: BLE001 - any failure leaves us broken, visibly
            self._break(f"recovery failed: {exc}", exc)

    def on_receive(self, message: object) -> None:
        if isinstance(message, cmd.Routed):
            self.received += 1
        if self.broken is not None:
            self._refuse(message)
            return
        try:
            self._dispatch(message)
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a BaseException stops ALL actors
            # Keep pykka out of it (it would stop us with commands still queued, leaving their
            # callers hanging). Fail what waits on us; the manager retires us and recovers a
            # fresh actor from the journal.
            self._break(f"{type(exc).__name__}: {exc}", exc)

    def on_stop(self) -> None:
        self.subscribers.close_all()
        self.clock.cancel()
        self._abandon_compaction()
        if self.extraction is not None:
            self.extraction.future.cancel()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        self.waiters.fail_all(SessionUnavailable(f"session {self.session_id} stopped"))

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch(self, message: object) -> None:  # noqa: C901 - one case per message type
        passivating = self.phases.phase is Phase.PASSIVATING
        if passivating and isinstance(message, cmd.Routed) and not isinstance(message, cmd.PassivateNow):
            self._set_phase(Phase.READY)  # anything routed to us aborts passivation
        match message:
            case cmd.SendUserMessage():
                self._admit(message)
            case cmd.Subscribe(sub_id=sub_id, filter=mask, sink=sink):
                self.subscribers.add(Subscriber(sub_id, mask, sink))
                joined = out.Joined(
                    session_id=self.session_id,
                    title=self.state.title,
                    turns=self.state.turns,
                    phase=self.phases.phase.value,
                )
                self.subscribers.send_to(sub_id, joined)
            case cmd.Unsubscribe(sub_id=sub_id):
                self.subscribers.remove(sub_id)
                self._arm_idle()
            case cmd.Cancel(reply=reply, by=by):
                reply.resolve(self._cancel(by))
            case cmd.Reset(by=by, reply=reply):
                self._reset(by)
                reply.resolve(None)
            case cmd.CompactNow(reply=reply):
                self._compact_now(reply)
            case cmd.ReportStatus(reply=reply):
                assert self.prompts is not None
                reply.resolve(
                    status_report(self.state, self.phases.phase, self.prompts, self._tools(), self.settings)
                )
            case cmd.Announce(text=text, kind=kind):
                self._publish(out.Notice(session_id=self.session_id, text=text, kind=kind))
            case cmd.Release():
                if self.held:
                    self._go_on()
            case cmd.PassivateNow():
                if self._idle():
                    self._begin_passivation(grace=0.0)
            case cmd.ProviderDeltas(op_id=op_id, deltas=deltas):
                if self._current(op_id):
                    assert self.run is not None
                    for delta in turn.text_deltas(self.session_id, self.run.turn, deltas):
                        self.subscribers.publish(delta)
            case cmd.ProviderDone(op_id=op_id, completion=completion):
                if self._current(op_id):
                    self._on_completion(completion)
            case cmd.ToolsDone(op_id=op_id, results=results):
                if self._current(op_id):
                    self._on_tool_results(results)
            case cmd.CompactionDone(op_id=op_id, outcome=outcome):
                if self.compacting is not None and self.compacting.op_id == op_id:
                    self._finish_compaction(self.compacting, outcome)
            case cmd.ExtractionDone(op_id=op_id, observations=observations):
                if self.extraction is not None and self.extraction.op_id == op_id:
                    self._record_extraction(self.extraction.plan, observations)
            case cmd.OpFailed(op_id=op_id, error=error):
                self._on_op_failed(op_id, error)
            case cmd.TurnTimeout(turn=timed_out):
                if self.run is not None and self.run.turn == timed_out:
                    limit = self.settings.session.turn_timeout_s
                    self._fail_turn(
                        "turn_timeout", f"the turn took longer than {limit:g}s and was stopped", "timed_out"
                    )
            case cmd.IdleTick(epoch=epoch):
                if self.clock.current(epoch) and self._idle():
                    self._begin_passivation(grace=self.settings.session.passivation_grace_s)
            case cmd.GraceElapsed(epoch=epoch):
                if self.clock.current(epoch) and self.phases.phase is Phase.PASSIVATING:
                    self.grace_over = True
                    self._passivation_step()
            case cmd.ConfirmStop(epoch=epoch):
                if self.clock.current(epoch) and self.phases.phase is Phase.PASSIVATING:
                    self.stop()
            case cmd.Shutdown():
                self.stop()
            case _:
                log.warning("%s: ignoring unknown message %r", self.session_id, message)

    def _current(self, op_id: int) -> bool:
        if self.run is not None and self.run.op_id == op_id:
            return True
        log.debug("%s: dropping stale result of op %d", self.session_id, op_id)
        return False

    # -- recovery and settings ----------------------------------------------------------------

    def _recover(self) -> None:
        started = time.perf_counter()
        # I/O on the loop; decoding and the fold here, on our own thread.
        state = recover_state(self.deps.io, self.deps.journal, self.session_id, RECOVERY_TIMEOUT_S)
        self.state = state
        self.recorder.snapshot_seq = state.seq
        self.ladder = ladder.Ladder(last_input_tokens=state.last_input_tokens)
        self._set_phase(Phase.READY)
        elapsed_ms = (time.perf_counter() - started) * 1000
        log.debug("%s: recovered at seq %d in %.1f ms", self.session_id, state.seq, elapsed_ms)
        if not self.held:
            self._go_on()

    def _go_on(self) -> None:
        """After recovery: resume an interrupted turn, finish a compaction, or take the next
        queued message."""
        self.held = False
        state = self.state
        if state.active is not None:
            log.info("%s: resuming turn %d interrupted by a restart", self.session_id, state.active.turn)
            self._begin_turn()
        elif not self._compact_if_due(resume_turn=False):  # e.g. a crash mid-compaction
            self._start_next_turn()

    def _refresh_settings(self) -> None:
        """Pick up a config reload at a turn boundary (SIGHUP applies to running sessions)."""
        current = self.deps.live.current
        if current is self.settings:
            return
        self.settings = current
        self.audience = audience_of(self.session_id, current)
        self.allowed_tools = allowed_tools(self.audience, current)
        assert self.prompts is not None
        self.prompts.system_prompt = current.agent.system_prompt
        self.prompts.budget = current.trim_budget_tokens

    def _budget(self) -> ladder.Budget:
        assert self.prompts is not None
        return ladder.budget_of(self.settings, self.prompts.calibration.ratio)

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, send: cmd.SendUserMessage) -> None:
        now = time.time()
        known = self.state.seen(send.identity, now) if send.identity else None
        if known is not None:
            first = self.state.find_message(known)
            if first is not None and first.content != send.text:
                send.ack.fail(IdempotencyKeyReused(f"{send.identity} was first used for a different message"))
                return
            send.ack.resolve(cmd.Admission(self.session_id, known, duplicate=True))
            if send.done is not None:
                self.waiters.add(self.state, known, send.done)
            return
        start = (
            self.phases.phase is Phase.READY
            and self.state.active is None
            and not self.state.inbox
            and not self.held
        )
        message, events = turn.admitted(
            self.state, text=send.text, ts=send.ts, identity=send.identity, user=send.user, start=start
        )
        try:
            self._persist(*events)
        except OutcomeUnknown as exc:
            send.ack.fail(OutcomeUnknown(str(exc), identity=send.identity))
            raise
        except Exception as exc:
            send.ack.fail(exc)  # not durable, so not acknowledged
            raise
        send.ack.resolve(cmd.Admission(self.session_id, message.id, duplicate=False))
        if send.done is not None:
            self.waiters.add(self.state, message.id, send.done)
        if start:
            self._begin_turn()

    def _persist(self, *events: SessionEvent) -> None:
        self.state = self.recorder.persist(self.state, *events)

    def _record(self, step: turn.Step) -> None:
        """Persist a step's events, then tell subscribers what happened."""
        self._persist(*step.events)
        self._publish(*step.outputs)

    def _publish(self, *outputs: out.Output) -> None:
        for output in outputs:
            self.subscribers.publish(output)

    # -- the turn -----------------------------------------------------------------------------

    def _start_next_turn(self) -> None:
        if self.phases.phase is Phase.READY and self.state.active is None and self.state.inbox:
            self._persist(TurnStarted(self.state.turns + 1, self.state.inbox[0].id))
            self._begin_turn()
        else:
            self._arm_idle()

    def _begin_turn(self) -> None:
        active = self.state.active
        assert active is not None
        self._refresh_settings()
        self.clock.start_turn(active.turn, self.settings.session.turn_timeout_s)
        self._set_phase(Phase.PROCESSING)
        self.run = TurnRun(turn=active.turn, message_id=active.message_id, iteration=active.steps)
        self.ladder = self.ladder.new_turn()
        self._call_provider()

    def _next_op(self) -> int:
        """A new op id for the turn: results of any earlier op are stale from now on."""
        assert self.run is not None
        self.run.op_id = self._new_op()
        return self.run.op_id

    def _call_provider(self) -> None:
        """Build the prompt, let the ladder decide (compact first?), record a trim, send."""
        run, prompts = self.run, self.prompts
        assert run is not None and prompts is not None
        tools = self._tools_for(run)
        prompt = prompts.build(self.state, tools)
        decision, self.ladder = ladder.before_call(
            self.ladder,
            seq=self.state.seq,
            untrimmed_estimate=prompt.trim.tokens_before if prompt.trim is not None else prompt.estimate,
            trim=prompt.trim,
            turns=self.state.turns,
            budget=self._budget(),
        )
        if isinstance(decision, ladder.Compact):
            self._begin_compaction(decision, resume_turn=True)
            return
        if decision.trim is not None:
            self._record_trim(decision.trim, "budget")
        model = self.settings.models.main
        run.estimate = prompt.estimate
        messages = prompt.messages
        if self.resumed_at is not None:  # transient: in this request only, never journaled
            messages = (messages[0], turn.continuity_notice(self.resumed_at, time.time()), *messages[1:])
            self.resumed_at = None
            self.deps.io.call(self.deps.manager.continuity_delivered, self.session_id, self.actor_ref)
        request = ProviderRequest(
            model=model.model, messages=messages, tools=tools, max_output_tokens=model.max_output_tokens
        )
        run.future = start_provider_call(
            self.deps.io, self.actor_ref, self._next_op(), self.deps.provider, request, self._recall_for(run)
        )

    def _recall_for(self, run: TurnRun) -> Recall | None:
        """Memories relevant to the turn's message, for the first call of a turn only."""
        memory = self.deps.memory
        if memory is None or run.iteration > 0 or not recall_allowed(self.audience, self.settings):
            return None
        message = self.state.find_message(run.message_id)
        return Recall(memory, message.content, self.audience) if message is not None else None

    def _tools_for(self, run: TurnRun) -> list[ToolSchema]:
        # Past the iteration limit the model gets no tools, so it must answer.
        if run.iteration >= self.settings.session.max_tool_iterations:
            return []
        return self._tools()

    def _tools(self) -> list[ToolSchema]:
        return self.deps.tools.schemas(self.allowed_tools)

    def _record_trim(self, trim: TrimResult, reason: str) -> None:
        """Never silent: journal it, tell every subscriber, log one line."""
        event, output = turn.trim_step(self.session_id, trim, reason)
        self._persist(event)
        log.info("%s: history_trimmed %s", self.session_id, json.dumps(event.to_payload(), sort_keys=True))
        self._publish(output)

    def _on_completion(self, completion: Completion) -> None:
        run = self.run
        assert run is not None and self.prompts is not None
        window = self.settings.models.main.context_window
        self._publish(*turn.answer_outputs(self.session_id, run.turn, completion, window))
        if completion.usage is not None:
            self.prompts.observe_usage(run.estimate, completion.usage.input_tokens)
            self.ladder = replace(self.ladder, last_input_tokens=completion.usage.input_tokens)
        if not completion.tool_calls or run.iteration >= self.settings.session.max_tool_iterations:
            self._record(turn.completed_turn(self.session_id, self.state, run, completion))
            self._end_turn(run, "completed")
            return
        assistant = turn.assistant_message(completion, with_tool_calls=True)
        self._publish(*turn.tool_call_outputs(self.session_id, run.turn, assistant))
        run.pending_calls = assistant
        run.future = start_tool_batch(
            self.deps.io,
            self.actor_ref,
            self._next_op(),
            self.deps.tools,
            assistant.tool_calls,
            timeout_s=min(TOOL_TIMEOUT_S, self.settings.session.turn_timeout_s),
            allowed=self.allowed_tools,
            context=ToolContext(self.session_id, self.audience, run.turn),
        )

    def _on_tool_results(self, results: Sequence[ToolResult]) -> None:
        run = self.run
        assert run is not None
        self._record(turn.tool_step(self.session_id, run, results))
        run.pending_calls = None
        run.iteration += 1
        if not self._compact_if_due(resume_turn=True):
            self._call_provider()

    def _on_op_failed(self, op_id: int, error: BaseException) -> None:
        if self.extraction is not None and self.extraction.op_id == op_id:
            # Logged and let go: passivation goes on without the observations.
            log.warning("%s: memory extraction at passivation failed: %r", self.session_id, error)
            self.extraction = None
            self._passivation_step()
        elif self.compacting is not None and self.compacting.op_id == op_id:
            log.error("%s: compaction failed: %r", self.session_id, error)
            self._finish_compaction(self.compacting, None, note=f"compaction failed: {error}")
        elif not self._current(op_id):
            return
        elif isinstance(error, ContextOverflow):
            self._on_overflow(error)
        elif isinstance(error, ProviderError):
            self._fail_turn(error.code, str(error), "failed")
        else:
            log.error("%s: turn work failed: %r", self.session_id, error)
            self._fail_turn("internal", f"the turn failed unexpectedly: {type(error).__name__}", "failed")

    def _on_overflow(self, error: ContextOverflow) -> None:
        decision, self.ladder = ladder.on_overflow(self.ladder, turns=self.state.turns, error=str(error))
        match decision:
            case ladder.Fail(code=code, message=message):
                self._fail_turn(code, message, "failed")
            case ladder.Compact():
                log.warning(
                    "%s: provider reported context overflow; compacting and retrying", self.session_id
                )
                self._begin_compaction(decision, resume_turn=True)
            case ladder.Trim():
                self._overflow_trim()

    def _overflow_trim(self) -> None:
        """The trim rung: shrink to ~2/3 of the refused prompt and retry, or give up."""
        run, prompts = self.run, self.prompts
        assert run is not None and prompts is not None
        window = self.settings.models.main.context_window
        prompts.observe_usage(run.estimate, max(window, run.estimate + 1))
        trim = prompts.shrink_after_overflow(self.state, self._tools_for(run), run.estimate)
        decision = ladder.overflow_trim(trim, estimate=run.estimate, budget=self._budget())
        if isinstance(decision, ladder.Fail):
            self._fail_turn(decision.code, decision.message, "failed")
            return
        assert decision.trim is not None
        log.warning("%s: provider reported context overflow; trimming and retrying", self.session_id)
        self._record_trim(decision.trim, "overflow")
        self._call_provider()

    def _fail_turn(self, code: str, message: str, status: TurnStatus, *, go_on: bool = True) -> None:
        run = self.run
        assert run is not None
        if run.future is not None:
            run.future.cancel()
        run.op_id = -1  # whatever the cancelled op still reports is stale
        self._abandon_compaction()
        self._record(turn.failed_turn(self.session_id, run, code, message, status))
        run.pending_calls = None
        log.warning("%s: turn %d %s: %s", self.session_id, run.turn, status, message)
        self._end_turn(run, status, go_on=go_on)

    def _end_turn(self, run: TurnRun, status: TurnStatus, *, go_on: bool = True) -> None:
        self._publish(turn.turn_completed(self.session_id, run, status))
        self.waiters.resolve(self.state, run.message_id)
        self.run = None
        self.clock.end_turn()
        # Once the reply is out: serialising a long session is not free, and nobody waits for it.
        if self.recorder.snapshot_due(self.state, self.settings.session.snapshot_interval):
            self.recorder.snapshot(self.state, wait=False)
        self._set_phase(Phase.READY)
        if go_on and not self._compact_if_due(resume_turn=False):
            self._start_next_turn()

    # -- control --------------------------------------------------------------------------------

    def _cancel(self, by: str, *, go_on: bool = True) -> int | None:
        """Stop the running turn: the provider stream is closed, running tools are cancelled
        and get a result, the turn is recorded as cancelled; queued messages go on."""
        run = self.run
        if run is None:
            return None
        self._fail_turn("cancelled", f"the turn was cancelled by {by}", "cancelled", go_on=go_on)
        return run.turn

    def _reset(self, by: str) -> None:
        """The model-visible context starts empty (a running turn is cancelled first, and its
        leftovers stay out of the new context); queued messages go on afterwards."""
        self._cancel(by, go_on=False)
        if self.compacting is not None:  # a compaction between turns: its result is moot
            self._abandon_compaction()
            self._set_phase(Phase.READY)
        self._persist(SessionReset(by))
        self.ladder = ladder.Ladder()
        self._publish(out.SessionReset(session_id=self.session_id, by=by))
        self._start_next_turn()

    def _compact_now(self, reply: Reply[str]) -> None:
        if self.phases.phase is not Phase.READY or self.run is not None:
            reply.resolve(f"not now: the session is {self.phases.phase.value}; try again when it is done")
            return
        self._begin_compaction(ladder.Compact(forced=True, summarise=True), resume_turn=False, reply=reply)

    # -- compaction ---------------------------------------------------------------------------

    def _compact_if_due(self, *, resume_turn: bool) -> bool:
        """After a call (or at recovery): compact when the provider's count crossed the threshold."""
        if self.prompts is None:
            return False
        decision = ladder.compaction_due(self.ladder, turns=self.state.turns, budget=self._budget())
        if isinstance(decision, ladder.Compact):
            self._begin_compaction(decision, resume_turn=resume_turn)
            return True
        return False

    def _begin_compaction(
        self, decision: ladder.Compact, *, resume_turn: bool, reply: Reply[str] | None = None
    ) -> None:
        """Tier 1 here; tiers 2 and 3 (LLM calls) on the loop if still over the threshold.
        Messages arriving meanwhile are acknowledged and buffered (phase Compacting)."""
        assert self.prompts is not None
        self._set_phase(Phase.COMPACTING)
        threshold = self._budget().threshold_tokens
        start = plan_compaction(
            self.state,
            self.prompts,
            self._tools(),
            self.settings,
            threshold_tokens=threshold,
            audience=self.audience,
            forced=decision.forced,
            summarise=decision.summarise,
        )
        compacting = CompactionRun(self._new_op(), start, resume_turn, decision.forced, reply=reply)
        self.compacting = compacting
        if start.plan is None and not start.cleared and (not decision.forced or reply is not None):
            # Nothing to clear and nothing old enough to summarise: record nothing, say
            # nothing (it would repeat after every turn), and carry on.
            log.debug("%s: compaction due but nothing to compact (%s)", self.session_id, start.note)
            if reply is not None:
                reply.resolve(f"Nothing to compact yet ({start.note or 'the conversation is short'}).")
            self._resume_after_compaction(compacting, summary_failed=False, freed_nothing=False)
            return
        if start.plan is None:
            self._finish_compaction(compacting, None)
            return
        provider = self.deps.compaction_provider or self.deps.provider
        compacting.future = start_compaction(
            self.deps.io, self.actor_ref, compacting.op_id, start.plan, provider, self.deps.memory
        )

    def _finish_compaction(
        self, compacting: CompactionRun, outcome: CompactionOutcome | None, note: str | None = None
    ) -> None:
        assert self.prompts is not None
        self.compacting = None
        start = compacting.start if note is None else replace(compacting.start, note=note)
        event = compaction_record(self.state, start, outcome, self.prompts, self._tools())
        self._persist(event)
        if compacting.reply is not None:
            compacting.reply.resolve(describe_compaction(event))
        self.recorder.snapshot(self.state, wait=False)
        summary = {k: v for k, v in event.to_payload().items() if k not in ("summary", "cleared")}
        log.info("%s: compaction %s", self.session_id, json.dumps(summary, sort_keys=True))
        self._publish(compaction_output(self.session_id, event))
        self._resume_after_compaction(
            compacting,
            summary_failed=start.plan is not None and event.summary is None,
            freed_nothing=not event.cleared and event.summary is None,
        )

    def _resume_after_compaction(
        self, compacting: CompactionRun, *, summary_failed: bool, freed_nothing: bool
    ) -> None:
        self.compacting = None
        decision, self.ladder = ladder.after_compaction(
            self.ladder,
            seq=self.state.seq,
            turns=self.state.turns,
            forced=compacting.forced,
            summary_failed=summary_failed,
            freed_nothing=freed_nothing,
        )
        if compacting.resume_turn and self.run is not None:
            self._set_phase(Phase.PROCESSING)
            if isinstance(decision, ladder.Trim):
                self._overflow_trim()
            else:
                self._call_provider()
        else:
            self._set_phase(Phase.READY)
            self._start_next_turn()

    def _abandon_compaction(self) -> None:
        if self.compacting is not None:
            if self.compacting.future is not None:
                self.compacting.future.cancel()
            if self.compacting.reply is not None:
                self.compacting.reply.resolve("The compaction was abandoned.")
            self.compacting = None

    def _new_op(self) -> int:
        self._op_counter += 1
        return self._op_counter

    # -- idle and passivation -----------------------------------------------------------------

    def _idle(self) -> bool:
        return (
            self.phases.phase is Phase.READY
            and self.run is None
            and not self.state.inbox
            and len(self.subscribers) == 0
        )

    def _arm_idle(self) -> None:
        self.clock.arm(self._idle(), self.settings.session.idle_timeout_s)

    def _begin_passivation(self, grace: float) -> None:
        """Idle and unwatched: extract memories during the grace period (when there is
        something new and a store), snapshot, stop. Anything routed here aborts it."""
        self._set_phase(Phase.PASSIVATING)
        plan = None
        if self.deps.memory is not None:
            model = self.settings.compaction_model
            plan = plan_extraction(self.state, audience=self.audience, model=model, grace_s=grace)
        if plan is not None:
            provider = self.deps.compaction_provider or self.deps.provider
            op_id = self._new_op()
            self.extraction = Extraction(
                op_id, plan, start_extraction(self.deps.io, self.actor_ref, op_id, plan, provider)
            )
        self.grace_over = not self.clock.begin_grace(grace)
        self._passivation_step()

    def _passivation_step(self) -> None:
        """Finish once the grace period is over and no extraction is still running."""
        if self.phases.phase is Phase.PASSIVATING and self.grace_over and self.extraction is None:
            self._finish_passivation()

    def _record_extraction(self, plan: ExtractionPlan, observations: Sequence[tuple[str, str]]) -> None:
        """Still passivating: save the observations, then mark the turns as done."""
        self.extraction = None
        assert self.deps.memory is not None
        items = [NewMemory(text, kind) for text, kind in observations]
        try:
            saved = self.deps.io.run(
                self.deps.memory.add(
                    items, session_id=self.session_id, audience=plan.audience, turn=plan.through_turn
                ),
                plan.budget_s,
            )
            self._persist(MemoriesExtracted(plan.through_turn, len(saved)))
            log.info("%s: %d memorie(s) saved at passivation", self.session_id, len(saved))
        except (NetclawError, TimeoutError) as exc:
            log.warning("%s: saving memories at passivation failed: %s", self.session_id, exc)
        self._passivation_step()

    def _finish_passivation(self) -> None:
        if self.recorder.snapshot_seq != self.state.seq:
            self.recorder.snapshot(self.state, wait=True)
        manager = self.deps.manager
        self.deps.io.call(
            manager.stop_requested, self.session_id, self.actor_ref, self.received, self.clock.epoch
        )

    # -- phases -------------------------------------------------------------------------------

    def _set_phase(self, new: Phase) -> None:
        old = self.phases.phase
        try:
            self.phases.transition_to(new)
        except NetclawError:
            log.exception("%s: refused phase change", self.session_id)
            raise
        if new is Phase.READY and old is Phase.PASSIVATING:
            self.clock.abort()  # invalidates the grace timer and any stop confirmation
            if self.extraction is not None:  # its result is stale now: nothing gets written
                self.extraction.future.cancel()
                self.extraction = None
            self._arm_idle()
        self.subscribers.publish(out.Phase(session_id=self.session_id, from_=old.value, to=new.value))
        self.deps.io.call(self.deps.manager.phase_changed, self.session_id, self.actor_ref, new)

    # -- failure ------------------------------------------------------------------------------

    def _break(self, reason: str, exc: BaseException) -> None:
        log.error("%s: session actor failed: %s", self.session_id, reason, exc_info=exc)
        self.broken = reason
        self.clock.cancel()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        self.run = None
        self.waiters.fail_all(SessionUnavailable(f"session {self.session_id} failed: {reason}"))
        self.subscribers.publish(out.Error(session_id=self.session_id, code="session_failed", message=reason))
        self.subscribers.close_all()
        self.deps.io.call(self.deps.manager.actor_failed, self.session_id, self.actor_ref, reason)

    def _refuse(self, message: object) -> None:
        """Broken: whatever reaches us before we are retired gets an answer, never silence."""
        if isinstance(message, cmd.Shutdown | cmd.ConfirmStop):
            self.stop()
            return
        reason = f"session {self.session_id} is unavailable: {self.broken}"
        cmd.refuse(
            message,
            SessionUnavailable(reason),
            out.Error(session_id=self.session_id, code="session_failed", message=reason),
        )
