"""The session actor: one pykka thread per resident session.

It owns the session's state and phase, processes one turn at a time, and does
no I/O itself: provider and tool work runs on the I/O loop and comes back as
messages carrying an op id (anything else is stale and dropped). The one
blocking call it makes is persist — wait for the journal's durable ack before
applying events — so what it acknowledges is never lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pykka

from netclaw.config import Settings
from netclaw.errors import ContextOverflow, ProviderError, SessionUnavailable
from netclaw.history import TrimResult
from netclaw.messages import ChatMessage, new_id
from netclaw.persistence import Journal, MemoryStore, NewEvent, SessionRow
from netclaw.policy import allowed_tools, audience_of, recall_allowed
from netclaw.providers import Completion, Provider, ProviderRequest, ToolSchema
from netclaw.runtime import IoLoop, Reply, Timer
from netclaw.sessions._commands import (
    Admission,
    CompactionDone,
    ConfirmStop,
    GraceElapsed,
    IdleTick,
    OpFailed,
    PassivateNow,
    ProviderDeltas,
    ProviderDone,
    Routed,
    SendUserMessage,
    Shutdown,
    Subscribe,
    ToolsDone,
    TurnTimeout,
    Unsubscribe,
)
from netclaw.sessions._compaction import (
    CompactionOutcome,
    CompactionStart,
    compaction_event,
    plan_compaction,
    run_compaction,
)
from netclaw.sessions._events import (
    HistoryTrimmed,
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
    TurnStatus,
    encode,
)
from netclaw.sessions._loop_ops import DeltaRelay, Recall
from netclaw.sessions._outputs import Output
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._prompt import Prompt, PromptBuilder
from netclaw.sessions._recovery import load_state
from netclaw.sessions._state import SessionState, TurnOutcome
from netclaw.sessions._subscribers import Subscriber, SubscriberSet
from netclaw.sessions._turn import (
    TurnRun,
    assistant_message,
    build_context,
    interrupted_results,
    make_title,
    tool_message,
)
from netclaw.tools import ToolContext, ToolRegistry

log = logging.getLogger(__name__)

PERSIST_TIMEOUT_S = 30.0
RECOVERY_TIMEOUT_S = 60.0
TOOL_TIMEOUT_S = 120.0
MAX_OVERFLOW_PASSES = 3
SUMMARY_RETRY_TURNS = 3


class ManagerPort(Protocol):
    """What a session tells its manager. Called on the I/O loop (via ``IoLoop.call``)."""

    def phase_changed(self, session_id: str, ref: Any, phase: Phase) -> None: ...

    def stop_requested(self, session_id: str, ref: Any, received: int, epoch: int) -> None: ...

    def actor_failed(self, session_id: str, ref: Any, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SessionDeps:
    io: IoLoop
    journal: Journal
    provider: Provider
    tools: ToolRegistry
    settings: Settings
    manager: ManagerPort
    memory: MemoryStore | None = None
    compaction_provider: Provider | None = None  # models.compaction's; None: the main provider


class SessionActor(pykka.ThreadingActor):
    def __init__(self, session_id: str, deps: SessionDeps) -> None:
        super().__init__()
        self.session_id = session_id
        self.deps = deps
        self.cfg = deps.settings.session
        self.state = SessionState(session_id)
        self.phases = PhaseMachine()
        self.subscribers = SubscriberSet()
        self.prompts = PromptBuilder(deps.settings.agent.system_prompt, deps.settings.trim_budget_tokens)
        self.audience = audience_of(session_id, deps.settings)
        self.allowed_tools = allowed_tools(self.audience, deps.settings)  # None: every tool
        self.run: TurnRun | None = None
        self.compacting: _Compacting | None = None
        self.last_input_tokens: int | None = None  # the provider's latest count of our prompt
        self.waiters: dict[str, list[Reply[TurnOutcome]]] = {}
        self.received = 0  # routed commands received (compared with the manager's count)
        self.broken: str | None = None
        self._op_counter = 0
        self._epoch = 0  # idle/passivation generation; bumps invalidate old timers
        self._idle_timer: Timer | None = None
        self._turn_timer: Timer | None = None
        self._snapshot_seq = 0
        self._compaction_checked_at = -1  # state.seq of the last pre-call threshold check
        self._summary_retry_at = 0  # after a failed summary, the LLM tiers wait until this turn

    # -- pykka hooks --------------------------------------------------------------------------

    def on_start(self) -> None:
        # on_start failures call neither on_failure nor on_stop in pykka: catch them here and
        # stay alive in a "broken" mode that fails whatever was routed to us, until retired.
        try:
            self._recover()
        except Exception as exc:
            self._break(f"recovery failed: {exc}", exc)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Routed):
            self.received += 1
        if self.broken is not None:
            self._refuse(message)
            return None
        try:
            self._dispatch(message)
        except (Exception, asyncio.CancelledError) as exc:  # a BaseException would stop ALL actors
            # Keep pykka out of it (it would stop us with commands still queued, leaving their
            # callers hanging). Fail what waits on us; the manager retires us and the next
            # command recovers a fresh actor from the journal.
            self._break(f"{type(exc).__name__}: {exc}", exc)
        return None

    def on_stop(self) -> None:
        self.subscribers.close_all()
        self._cancel_timers()
        self._abandon_compaction()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        reason = SessionUnavailable(f"session {self.session_id} stopped")
        for replies in self.waiters.values():
            for reply in replies:
                reply.fail(reason)
        self.waiters.clear()

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch(self, message: Any) -> None:
        passivating = self.phases.phase is Phase.PASSIVATING
        if passivating and isinstance(message, Routed) and not isinstance(message, PassivateNow):
            self._set_phase(Phase.READY)  # anything routed to us aborts passivation
        match message:
            case SendUserMessage():
                self._admit(message)
            case Subscribe(sub_id=sub_id, filter=mask, sink=sink):
                self.subscribers.add(Subscriber(sub_id, mask, sink))
                self.subscribers.send_to(
                    sub_id,
                    self._output(
                        "joined",
                        title=self.state.title,
                        turns=self.state.turns,
                        phase=self.phases.phase.value,
                    ),
                )
            case Unsubscribe(sub_id=sub_id):
                self.subscribers.remove(sub_id)
                self._arm_idle()
            case PassivateNow():
                if self._idle():
                    self._begin_passivation(grace=0.0)
            case ProviderDeltas(op_id=op_id, deltas=deltas):
                if self._current(op_id):
                    for delta in deltas:
                        self._on_delta(delta.kind, delta.text)
            case ProviderDone(op_id=op_id, completion=completion):
                if self._current(op_id):
                    self._on_completion(completion)
            case ToolsDone(op_id=op_id, results=results):
                if self._current(op_id):
                    self._on_tool_results(results)
            case CompactionDone(op_id=op_id, outcome=outcome):
                if self.compacting is not None and self.compacting.op_id == op_id:
                    self._finish_compaction(self.compacting, outcome)
            case OpFailed(op_id=op_id, error=error):
                if self.compacting is not None and self.compacting.op_id == op_id:
                    log.error("%s: compaction failed: %r", self.session_id, error)
                    self._finish_compaction(self.compacting, None, note=f"compaction failed: {error}")
                elif self._current(op_id):
                    self._on_op_failed(error)
            case TurnTimeout(turn=turn):
                if self.run is not None and self.run.turn == turn:
                    limit = self.cfg.turn_timeout_s
                    self._fail_turn(
                        "turn_timeout",
                        f"the turn took longer than {limit:g}s and was stopped",
                        "timed_out",
                    )
            case IdleTick(epoch=epoch):
                if epoch == self._epoch and self._idle():
                    self._begin_passivation(grace=self.cfg.passivation_grace_s)
            case GraceElapsed(epoch=epoch):
                if epoch == self._epoch and self.phases.phase is Phase.PASSIVATING:
                    self._finish_passivation()
            case ConfirmStop(epoch=epoch):
                if epoch == self._epoch and self.phases.phase is Phase.PASSIVATING:
                    self.stop()
            case Shutdown():
                self.stop()
            case _:
                log.warning("%s: ignoring unknown message %r", self.session_id, message)

    def _current(self, op_id: int) -> bool:
        if self.run is not None and self.run.op_id == op_id:
            return True
        log.debug("%s: dropping stale result of op %d", self.session_id, op_id)
        return False

    # -- recovery -----------------------------------------------------------------------------

    def _recover(self) -> None:
        started = time.perf_counter()
        state = self.deps.io.run(load_state(self.deps.journal, self.session_id), RECOVERY_TIMEOUT_S)
        self.state = state
        self._snapshot_seq = state.seq
        self.last_input_tokens = state.last_input_tokens
        self._set_phase(Phase.READY)
        log.debug(
            "%s: recovered at seq %d in %.1f ms",
            self.session_id,
            state.seq,
            (time.perf_counter() - started) * 1000,
        )
        if state.active is not None:
            log.info("%s: resuming turn %d interrupted by a restart", self.session_id, state.active.turn)
            self._begin_turn()
        elif self._compaction_due():  # it was over the threshold when it stopped (a crash mid-compaction)
            self._begin_compaction(resume_turn=False)
        else:
            self._start_next_turn()

    # -- persistence --------------------------------------------------------------------------

    def _persist(self, *events: SessionEvent) -> None:
        """Append durably, then apply. Raises (and applies nothing) if the write fails."""
        now = time.time()
        state = self.state
        for event in events:
            state = state.apply(event, state.seq + 1, now)
        row = SessionRow(
            id=state.session_id,
            channel=state.channel,
            title=state.title,
            turns=state.turns,
            last_activity=now,
            pending=state.pending_inputs,
        )
        encoded = [NewEvent(*encode(e)) for e in events]
        self.deps.io.run(
            self.deps.journal.append(self.session_id, self.state.seq, encoded, row),
            PERSIST_TIMEOUT_S,
        )
        self.state = state

    def _snapshot_if_due(self) -> None:
        # Called once a turn's reply is out: serialising a long session is not free,
        # and nobody should wait for it.
        if self.state.seq - self._snapshot_seq >= self.cfg.snapshot_interval:
            self._snapshot(wait=False)

    def _snapshot(self, *, wait: bool) -> None:
        seq, data = self.state.seq, self.state.to_json()
        future = self.deps.io.submit(self.deps.journal.save_snapshot(self.session_id, seq, data))
        self._snapshot_seq = seq
        if wait:
            future.result(PERSIST_TIMEOUT_S)
        else:
            future.add_done_callback(self._log_snapshot_failure)

    def _log_snapshot_failure(self, future: Any) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("%s: snapshot failed: %s", self.session_id, future.exception())

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, cmd: SendUserMessage) -> None:
        now = time.time()
        known = self.state.seen(cmd.identity, now) if cmd.identity else None
        if known is not None:
            cmd.ack.resolve(Admission(self.session_id, known, duplicate=True))
            if cmd.done is not None:
                self._wait_for_outcome(known, cmd.done)
            return
        message_id = new_id("u")
        message = ChatMessage(
            id=message_id,
            role="user",
            content=cmd.text,
            ts=cmd.ts,
            identity=cmd.identity or f"{message_id}@{cmd.ts:.6f}",  # id + timestamp
            user=cmd.user,
        )
        events: list[SessionEvent] = [InputAdmitted(message)]
        start_now = self.phases.phase is Phase.READY and self.state.active is None and not self.state.inbox
        if start_now:  # one write for "admitted" and "started" when nothing is queued
            events.append(TurnStarted(self.state.turns + 1, message.id))
        try:
            self._persist(*events)
        except Exception as exc:
            cmd.ack.fail(exc)  # not durable, so not acknowledged
            raise
        cmd.ack.resolve(Admission(self.session_id, message.id, duplicate=False))
        if cmd.done is not None:
            self.waiters.setdefault(message.id, []).append(cmd.done)
        if start_now:
            self._begin_turn()

    def _wait_for_outcome(self, message_id: str, reply: Reply[TurnOutcome]) -> None:
        outcome = self.state.outcomes.get(message_id)
        if outcome is not None:
            reply.resolve(outcome)
        else:
            self.waiters.setdefault(message_id, []).append(reply)

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
        self._cancel_idle()
        self._set_phase(Phase.PROCESSING)
        self.run = TurnRun(turn=active.turn, message_id=active.message_id, iteration=active.steps)
        self._turn_timer = Timer(
            self.deps.io, self.cfg.turn_timeout_s, self.actor_ref, TurnTimeout(active.turn)
        )
        self._call_provider()

    def _next_op(self) -> int:
        self._op_counter += 1
        if self.run is not None:
            self.run.op_id = self._op_counter
        return self._op_counter

    def _call_provider(self) -> None:
        run = self.run
        assert run is not None
        tools = self._tools_for(run)
        prompt = self.prompts.build(self.state, tools)
        if self._prompt_needs_compaction(prompt):
            # Compact before trimming: what a trim drops is neither summarised nor flushed
            # to memory. Afterwards we come back here and trim only if still over budget.
            self._begin_compaction(resume_turn=True)
            return
        op_id = self._next_op()
        model = self.deps.settings.models.main
        if prompt.trim is not None:
            self._record_trim(prompt.trim, "budget")
        run.estimate = prompt.estimate
        request = ProviderRequest(
            model=model.model,
            messages=prompt.messages,
            tools=tools,
            max_output_tokens=model.max_output_tokens,
        )
        relay = DeltaRelay(self.actor_ref, op_id, self._recall_for(run))
        run.future = self.deps.io.submit_and_tell(
            relay.stream(self.deps.provider, request),
            self.actor_ref,
            lambda completion: ProviderDone(op_id, completion),
            lambda error: OpFailed(op_id, error),
        )

    def _recall_for(self, run: TurnRun) -> Recall | None:
        """Memories relevant to the turn's message, for the first call of a turn only."""
        memory = self.deps.memory
        if memory is None or run.iteration > 0 or not recall_allowed(self.audience, self.deps.settings):
            return None
        message = self.state.find_message(run.message_id)
        return Recall(memory, message.content, self.audience) if message is not None else None

    def _tools_for(self, run: TurnRun) -> list[ToolSchema]:
        # Past the iteration limit the model gets no tools, so it must answer.
        if run.iteration >= self.cfg.max_tool_iterations:
            return []
        return self.deps.tools.schemas(self.allowed_tools)

    def _record_trim(self, trim: TrimResult, reason: str) -> None:
        """Never silent: journal it, tell every subscriber, log one line."""
        assert trim.first_kept_id is not None
        event = HistoryTrimmed(
            first_kept_id=trim.first_kept_id,
            dropped_messages=trim.dropped_messages,
            dropped_turns=trim.dropped_turns,
            kept_turns=trim.kept_turns,
            tokens_before=trim.tokens_before,
            tokens_after=trim.tokens_after,
            budget=trim.budget,
            reason=reason,
        )
        self._persist(event)
        payload = event.to_payload()
        log.info("%s: history_trimmed %s", self.session_id, json.dumps(payload, sort_keys=True))
        self.subscribers.publish(self._output("history_trimmed", **payload))

    def _on_delta(self, kind: str, text: str) -> None:
        assert self.run is not None
        if kind == "text" and text:
            self.subscribers.publish(self._output("text_delta", turn=self.run.turn, delta=text))

    def _on_completion(self, completion: Completion) -> None:
        run = self.run
        assert run is not None
        if completion.usage is not None:
            self.last_input_tokens = completion.usage.input_tokens
            self.prompts.observe_usage(run.estimate, completion.usage.input_tokens)
            self.subscribers.publish(
                self._output(
                    "usage",
                    turn=run.turn,
                    input_tokens=completion.usage.input_tokens,
                    output_tokens=completion.usage.output_tokens,
                    context_window=self.deps.settings.models.main.context_window,
                )
            )
        if completion.thinking:
            self.subscribers.publish(self._output("thinking", turn=run.turn, text=completion.thinking))
        wants_tools = bool(completion.tool_calls) and run.iteration < self.cfg.max_tool_iterations
        if not wants_tools:
            self._complete_turn(completion)
            return
        assistant = assistant_message(completion, with_tool_calls=True)
        for call in assistant.tool_calls:
            self.subscribers.publish(
                self._output("tool_call", turn=run.turn, id=call.id, name=call.name, arguments=call.arguments)
            )
        run.pending_calls = assistant
        op_id = self._next_op()
        run.future = self.deps.io.submit_and_tell(
            self.deps.tools.run_batch(
                assistant.tool_calls,
                min(TOOL_TIMEOUT_S, self.cfg.turn_timeout_s),
                allowed=self.allowed_tools,
                context=ToolContext(self.session_id, self.audience),
            ),
            self.actor_ref,
            lambda results: ToolsDone(op_id, results),
            lambda error: OpFailed(op_id, error),
        )

    def _on_tool_results(self, results: Any) -> None:
        run = self.run
        assert run is not None and run.pending_calls is not None
        messages = [tool_message(r.call, r.content, r.is_error) for r in results]
        self._persist(StepRecorded(run.turn, (run.pending_calls, *messages)))
        run.pending_calls = None
        for result, message in zip(results, messages, strict=True):
            self.subscribers.publish(
                self._output(
                    "tool_result",
                    turn=run.turn,
                    id=result.call.id,
                    name=result.call.name,
                    content=message.content,
                    is_error=message.is_error,
                )
            )
        run.iteration += 1
        if self._compaction_due():
            self._begin_compaction(resume_turn=True)
        else:
            self._call_provider()

    def _on_op_failed(self, error: BaseException) -> None:
        if isinstance(error, ContextOverflow):
            self._recover_from_overflow(error)
        elif isinstance(error, ProviderError):
            self._fail_turn(error.code, str(error), "failed")
        else:
            log.error("%s: turn work failed: %r", self.session_id, error)
            self._fail_turn("internal", f"the turn failed unexpectedly: {type(error).__name__}", "failed")

    def _recover_from_overflow(self, error: ContextOverflow) -> None:
        """The overflow ladder: compact (once per turn), else trim to ~2/3, then retry;
        give up when only the newest turn is left. Never more than MAX_OVERFLOW_PASSES."""
        run = self.run
        assert run is not None
        run.overflow_passes += 1
        if run.overflow_passes > MAX_OVERFLOW_PASSES:
            self._fail_turn(
                "context_overflow",
                f"the prompt still exceeds the model's context window after {MAX_OVERFLOW_PASSES} "
                f"recovery passes: {error}",
                "failed",
            )
            return
        if not run.compacted:  # rung 1: compact (once per turn), then retry
            run.compacted = True
            log.warning("%s: provider reported context overflow; compacting and retrying", self.session_id)
            self._begin_compaction(resume_turn=True, forced=True)
            return
        self._overflow_trim()

    def _overflow_trim(self) -> None:
        """Rung 2: trim whole turns to ~2/3 of the refused prompt and retry; rung 3: give up
        when only the newest turn is left."""
        run = self.run
        assert run is not None
        window = self.deps.settings.models.main.context_window
        self.prompts.observe_usage(run.estimate, max(window, run.estimate + 1))
        trim = self.prompts.shrink_after_overflow(self.state, self._tools_for(run), run.estimate)
        if trim is None:
            self._fail_turn(
                "context_overflow",
                "the newest turn alone does not fit the model's context window "
                f"({window} tokens; this prompt was estimated at {run.estimate}); "
                "shorten the message or use a model with a larger window",
                "failed",
            )
            return
        log.warning("%s: provider reported context overflow; trimming and retrying", self.session_id)
        self._record_trim(trim, "overflow")
        self._call_provider()

    def _complete_turn(self, completion: Completion) -> None:
        run = self.run
        assert run is not None
        reply = assistant_message(completion, with_tool_calls=False)
        usage = None
        if completion.usage is not None:
            usage = {
                "input_tokens": completion.usage.input_tokens,
                "output_tokens": completion.usage.output_tokens,
            }
        events: list[SessionEvent] = [
            TurnRecorded(run.turn, run.message_id, "completed", (reply,), usage=usage)
        ]
        new_title = None
        if self.state.title is None:
            first = self.state.find_message(run.message_id)
            new_title = make_title(first.content if first else reply.content)
            events.append(SessionTitleSet(new_title))
        self._persist(*events)
        self.subscribers.publish(self._output("text", turn=run.turn, message_id=reply.id, text=reply.content))
        if new_title is not None:
            self.subscribers.publish(self._output("title", title=new_title))
        self._end_turn(run)

    def _fail_turn(self, code: str, message: str, status: TurnStatus) -> None:
        run = self.run
        assert run is not None
        if run.future is not None:
            run.future.cancel()
        run.op_id = -1  # whatever the cancelled op still reports is stale
        self._abandon_compaction()
        if run.pending_calls is not None:  # every call still gets its result
            calls = run.pending_calls
            self._persist(StepRecorded(run.turn, (calls, *interrupted_results(calls.tool_calls))))
            run.pending_calls = None
        error = {"code": code, "message": message}
        self._persist(TurnRecorded(run.turn, run.message_id, status, error=error))
        log.warning("%s: turn %d %s: %s", self.session_id, run.turn, status, message)
        self.subscribers.publish(self._output("error", turn=run.turn, code=code, message=message))
        self._end_turn(run)

    def _end_turn(self, run: TurnRun) -> None:
        self.subscribers.publish(self._output("turn_completed", turn=run.turn))
        outcome = self.state.outcomes.get(run.message_id)
        for reply in self.waiters.pop(run.message_id, []):
            if outcome is not None:
                reply.resolve(outcome)
        self.run = None
        if self._turn_timer is not None:
            self._turn_timer.cancel()
            self._turn_timer = None
        self._snapshot_if_due()
        self._set_phase(Phase.READY)
        if self._compaction_due():
            self._begin_compaction(resume_turn=False)
        else:
            self._start_next_turn()

    # -- compaction ---------------------------------------------------------------------------

    def _threshold_tokens(self) -> int:
        return int(self.cfg.compaction_threshold * self.deps.settings.models.main.context_window)

    def _compaction_due(self) -> bool:
        """After a call: did the provider count our prompt past the threshold?"""
        tokens = self.last_input_tokens
        return tokens is not None and tokens >= self._threshold_tokens()

    def _prompt_needs_compaction(self, prompt: Prompt) -> bool:
        """Before a call: would the prompt (untrimmed; our estimate, scaled by how much this
        provider counts above it) cross the threshold? Once per history state, so a
        compaction that could not shrink enough is not retried in a loop."""
        if self.state.seq == self._compaction_checked_at:
            return False
        self._compaction_checked_at = self.state.seq
        untrimmed = prompt.trim.tokens_before if prompt.trim is not None else prompt.estimate
        return untrimmed / self.prompts.calibration.ratio >= self._threshold_tokens()

    def _begin_compaction(self, *, resume_turn: bool, forced: bool = False) -> None:
        """Tier 1 here; tiers 2 and 3 (LLM calls) on the loop if still over the threshold.
        Messages arriving meanwhile are acknowledged and buffered (phase Compacting)."""
        self._set_phase(Phase.COMPACTING)
        settings = self.deps.settings
        start = plan_compaction(
            self.state,
            self.prompts,
            self.deps.tools.schemas(self.allowed_tools),
            keep_recent=self.cfg.keep_recent_tool_results,
            threshold_tokens=self._threshold_tokens(),
            audience=self.audience,
            model=settings.compaction_model,
            budget_s=self.cfg.compaction_timeout_s,
            forced=forced,
            summarise=forced or self.state.turns >= self._summary_retry_at,
        )
        compacting = _Compacting(op_id=self._new_op_id(), start=start, resume_turn=resume_turn, forced=forced)
        self.compacting = compacting
        if start.plan is None and not start.cleared and not forced:
            # Nothing to clear and nothing old enough to summarise: record nothing, say
            # nothing (it would repeat after every turn), and carry on.
            log.debug("%s: compaction due but nothing to compact (%s)", self.session_id, start.note)
            self.last_input_tokens = None
            self._resume_after_compaction(compacting)
            return
        if start.plan is None:
            self._finish_compaction(compacting, None)
            return
        provider = self.deps.compaction_provider or self.deps.provider
        op_id = compacting.op_id
        compacting.future = self.deps.io.submit_and_tell(
            run_compaction(start.plan, provider, self.deps.memory),
            self.actor_ref,
            lambda outcome: CompactionDone(op_id, outcome),
            lambda error: OpFailed(op_id, error),
        )

    def _finish_compaction(
        self, compacting: _Compacting, outcome: CompactionOutcome | None, note: str | None = None
    ) -> None:
        self.compacting = None
        start = compacting.start
        if note is not None:
            start = replace(start, note=note)
        tools = self.deps.tools.schemas(self.allowed_tools)
        # What the projection will look like once the event is applied.
        preview = self.state.apply(compaction_event(start, outcome, 0, 0), self.state.seq + 1, time.time())
        event = compaction_event(
            start,
            outcome,
            len(build_context(preview, self.prompts.system_prompt)),
            self.prompts.estimate(preview, tools),
        )
        self._persist(event)
        self._snapshot(wait=False)
        self.last_input_tokens = None  # the provider's count described the old prompt
        log.info(
            "%s: compaction %s",
            self.session_id,
            json.dumps(
                {k: v for k, v in event.to_payload().items() if k != "summary" and k != "cleared"},
                sort_keys=True,
            ),
        )
        self.subscribers.publish(
            self._output(
                "compaction",
                messages_before=event.messages_before,
                messages_after=event.messages_after,
                tool_results_cleared=len(event.cleared),
                summarized=event.summary is not None,
                memories_saved=event.memories_saved,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                tiers=list(event.tiers),
                note=event.note,
            )
        )
        if start.plan is not None and event.summary is None:
            # A summary that failed (provider, quality guard, time budget) is not retried on
            # every message: tier 1 and the trim backstop carry on meanwhile.
            self._summary_retry_at = self.state.turns + SUMMARY_RETRY_TURNS
        freed_nothing = not event.cleared and event.summary is None
        self._resume_after_compaction(compacting, freed_nothing)

    def _resume_after_compaction(self, compacting: _Compacting, freed_nothing: bool = False) -> None:
        self.compacting = None
        self._compaction_checked_at = self.state.seq  # this history state was just compacted
        if compacting.resume_turn and self.run is not None:
            self._set_phase(Phase.PROCESSING)
            if compacting.forced and freed_nothing:
                self._overflow_trim()  # the same prompt would overflow again
            else:
                self._call_provider()
        else:
            self._set_phase(Phase.READY)
            self._start_next_turn()

    def _abandon_compaction(self) -> None:
        if self.compacting is not None:
            if self.compacting.future is not None:
                self.compacting.future.cancel()
            self.compacting = None

    def _new_op_id(self) -> int:
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
        self._cancel_idle()
        self._epoch += 1
        if self._idle():
            self._idle_timer = Timer(
                self.deps.io, self.cfg.idle_timeout_s, self.actor_ref, IdleTick(self._epoch)
            )

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _begin_passivation(self, grace: float) -> None:
        self._set_phase(Phase.PASSIVATING)
        self._epoch += 1
        if grace > 0:
            self._idle_timer = Timer(self.deps.io, grace, self.actor_ref, GraceElapsed(self._epoch))
        else:
            self._finish_passivation()

    def _finish_passivation(self) -> None:
        if self._snapshot_seq != self.state.seq:
            self._snapshot(wait=True)
        self.deps.io.call(
            self.deps.manager.stop_requested,
            self.session_id,
            self.actor_ref,
            self.received,
            self._epoch,
        )

    def _cancel_timers(self) -> None:
        self._cancel_idle()
        if self._turn_timer is not None:
            self._turn_timer.cancel()
            self._turn_timer = None

    # -- phases and outputs -------------------------------------------------------------------

    def _set_phase(self, new: Phase) -> None:
        old = self.phases.phase
        try:
            self.phases.transition_to(new)
        except Exception:
            log.exception("%s: refused phase change", self.session_id)
            raise
        if new is Phase.READY and old is Phase.PASSIVATING:
            self._epoch += 1  # invalidates the grace timer and any stop confirmation
            self._arm_idle()
        self.subscribers.publish(self._output("phase", **{"from": old.value, "to": new.value}))
        self.deps.io.call(self.deps.manager.phase_changed, self.session_id, self.actor_ref, new)

    def _output(self, event: str, **data: Any) -> Output:
        return Output(event, {"session_id": self.session_id, **data})

    # -- failure ------------------------------------------------------------------------------

    def _break(self, reason: str, exc: BaseException) -> None:
        log.error("%s: session actor failed: %s", self.session_id, reason, exc_info=exc)
        self.broken = reason
        self._cancel_timers()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        self.run = None
        error = SessionUnavailable(f"session {self.session_id} failed: {reason}")
        for replies in self.waiters.values():
            for reply in replies:
                reply.fail(error)
        self.waiters.clear()
        self.subscribers.publish(self._output("error", code="session_failed", message=reason))
        self.subscribers.close_all()
        self.deps.io.call(self.deps.manager.actor_failed, self.session_id, self.actor_ref, reason)

    def _refuse(self, message: Any) -> None:
        if isinstance(message, Shutdown | ConfirmStop):
            self.stop()
            return
        error = SessionUnavailable(f"session {self.session_id} is unavailable: {self.broken}")
        for reply in _replies_in(message):
            reply.fail(error)


@dataclass(slots=True)
class _Compacting:
    op_id: int
    start: CompactionStart
    resume_turn: bool  # a tool loop (or an overflow retry) continues afterwards
    forced: bool = False  # the overflow ladder's rung 1, not the threshold
    future: Any = None


def _replies_in(message: Any) -> list[Reply[Any]]:
    found: list[Reply[Any]] = []
    for name in ("ack", "done"):
        reply = getattr(message, name, None)
        if isinstance(reply, Reply):
            found.append(reply)
    return found
