"""The turn, as the actor carries it out: the provider call (after the context ladder's
decision), tool rounds, the overflow ladder, and the end of a turn — completed, failed,
timed out or cancelled. The steps themselves are pure (:mod:`._turn`, :mod:`._ladder`);
this is their order."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from netclaw.errors import ContextOverflow
from netclaw.history import TrimResult
from netclaw.policy import channel_of, recall_allowed, recall_scope
from netclaw.providers import Completion, Delta, ProviderRequest, ToolSchema
from netclaw.sessions import _ladder as ladder
from netclaw.sessions import _turn as turn
from netclaw.sessions._core import SessionCore
from netclaw.sessions._events import TurnStarted, TurnStatus
from netclaw.sessions._loop_ops import (
    Recall,
    start_provider_call,
    start_tool_batch,
)
from netclaw.sessions._phases import Phase
from netclaw.sessions._state import utc_day
from netclaw.sessions._turn import TurnRun
from netclaw.tools import ToolResult

log = logging.getLogger(__name__)


class TurnFlow(SessionCore):
    def _start_next_turn(self) -> None:
        if self.leaving:  # handed off: the next turn runs on the session's next node
            self._leave()
            return
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
        self.run = TurnRun(
            turn=active.turn,
            message_id=active.message_id,
            iteration=active.steps,
            started=time.monotonic(),
            model=self.settings.models.main.model,
        )
        self.ladder = self.ladder.new_turn()
        pending = self.state.pending_round
        if pending is not None and pending.turn == active.turn:
            self._await_decisions()  # recovered while a tool round waited for people
            return
        self._call_provider()

    def _call_provider(self) -> None:
        """Build the prompt, let the ladder decide (compact first?), record a trim, send."""
        run, prompts = self.run, self.prompts
        assert run is not None and prompts is not None
        if self._over_budget(run):
            return
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
            model=model.model,
            messages=messages,
            tools=tools,
            max_output_tokens=model.max_output_tokens,
            vision=model.vision,
        )
        run.future = start_provider_call(
            self.deps.io, self.actor_ref, self._next_op(), self.deps.provider, request, self._recall_for(run)
        )

    def _over_budget(self, run: TurnRun) -> bool:
        """The daily spend guard: past ``session.max_tokens_per_day`` the turn ends with a
        notice instead of another model call."""
        limit = self.settings.session.max_tokens_per_day
        if limit is None:
            return False
        now = time.time()
        spent = self.state.tokens_spent_on(utc_day(now)) + run.input_tokens + run.output_tokens
        if spent < limit:
            return False
        self._fail_turn("spend_limit", turn.spend_limit_message(spent, limit, now), "failed", as_notice=True)
        return True

    def _recall_for(self, run: TurnRun) -> Recall | None:
        """Memories relevant to the turn's message, for the first call of a turn only."""
        memory = self.deps.memory
        if memory is None or run.iteration > 0 or not recall_allowed(self.audience, self.settings):
            return None
        if channel_of(self.session_id) == "webhook":
            return None  # a payload from outside never pulls memories into the context
        message = self.state.find_message(run.message_id)
        if message is None:
            return None
        scope = recall_scope(self.session_id, self.audience, self.settings, self.state.place)
        return Recall(memory, message.content, self.audience, scope)

    def _tools_for(self, run: TurnRun) -> list[ToolSchema]:
        # Past the iteration limit the model gets no tools, so it must answer.
        if run.iteration >= self.settings.session.max_tool_iterations:
            return []
        return self._tools()

    def _record_trim(self, trim: TrimResult, reason: str) -> None:
        """Never silent: journal it, tell every subscriber, log one line."""
        event, output = turn.trim_step(self.session_id, trim, reason)
        self._persist(event)
        if self.deps.metrics is not None:
            self.deps.metrics.trims.inc()
        log.info("%s: history_trimmed %s", self.session_id, json.dumps(event.to_payload(), sort_keys=True))
        self._publish(output)

    def _show_deltas(self, deltas: Sequence[Delta]) -> None:
        run = self.run
        assert run is not None
        for delta in turn.text_deltas(self.session_id, run.turn, deltas):
            self.subscribers.publish(delta)

    def _on_completion(self, completion: Completion) -> None:
        run = self.run
        assert run is not None and self.prompts is not None
        window = self.settings.models.main.context_window
        self._publish(*turn.answer_outputs(self.session_id, run.turn, completion, window))
        if completion.usage is not None:
            self.prompts.observe_usage(run.estimate, completion.usage.input_tokens)
            self._count_tokens(completion)
            self.ladder = replace(self.ladder, last_input_tokens=completion.usage.input_tokens)
        if not completion.tool_calls or run.iteration >= self.settings.session.max_tool_iterations:
            self._record(turn.completed_turn(self.session_id, self.state, run, completion))
            self._end_turn(run, "completed")
            return
        assistant = turn.assistant_message(completion, with_tool_calls=True)
        self._publish(*turn.tool_call_outputs(self.session_id, run.turn, assistant))
        if self._gate_round(assistant):  # some call waits for a person's decision
            return
        run.pending_calls = assistant
        run.future = start_tool_batch(
            self.deps.io,
            self.actor_ref,
            self._next_op(),
            self.deps.tools,
            assistant.tool_calls,
            timeout_s=min(self.settings.tools.call_timeout_s, self.settings.session.turn_timeout_s),
            allowed=self.allowed_tools,
            context=self._tool_context(run.turn),
        )

    def _on_tool_results(self, results: Sequence[ToolResult]) -> None:
        run = self.run
        assert run is not None
        self._record(turn.tool_step(self.session_id, run, results))
        run.pending_calls = None
        run.iteration += 1
        if not self._compact_if_due(resume_turn=True):
            self._call_provider()

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

    def _fail_turn(
        self, code: str, message: str, status: TurnStatus, *, go_on: bool = True, as_notice: bool = False
    ) -> None:
        run = self.run
        assert run is not None
        if run.future is not None:
            run.future.cancel()
        run.op_id = -1  # whatever the cancelled op still reports is stale
        self._abandon_compaction()
        self._close_open_approvals()
        self._record(turn.failed_turn(self.session_id, run, code, message, status, as_notice=as_notice))
        run.pending_calls = None
        log.warning("%s: turn %d %s: %s", self.session_id, run.turn, status, message)
        self._end_turn(run, status, go_on=go_on)

    def _count_tokens(self, completion: Completion) -> None:
        metrics, usage = self.deps.metrics, completion.usage
        if usage is None:
            return
        if self.run is not None:
            self.run.input_tokens += usage.input_tokens or 0
            self.run.output_tokens += usage.output_tokens or 0
            self.run.cache_read_tokens += usage.cache_read_tokens or 0
        if metrics is None:
            return
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            if count:
                metrics.tokens.labels(kind).inc(count)

    def _end_turn(self, run: TurnRun, status: TurnStatus, *, go_on: bool = True) -> None:
        self._publish(turn.turn_completed(self.session_id, run, status))
        seconds = time.monotonic() - run.started
        if self.deps.metrics is not None:
            self.deps.metrics.turns.labels(status).inc()
            self.deps.metrics.turn_seconds.observe(seconds)
        log.info(
            "%s: turn %d %s in %.2fs (tokens in %d, out %d)",
            self.session_id,
            run.turn,
            status,
            seconds,
            run.input_tokens,
            run.output_tokens,
            extra={
                "session": self.session_id,
                "turn": run.turn,
                "event": "turn_completed",
                "outcome": status,
                "duration_s": round(seconds, 3),
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
            },
        )
        if run.turn in self.state.undelivered:  # the channel's outbox posts it if nobody watched
            self.deps.io.call(self.deps.manager.reply_owed, self.session_id)
        self.waiters.resolve(self.state, run.message_id)
        self.run = None
        self.clock.end_turn()
        # Once the reply is out: serialising a long session is not free, and nobody waits for it.
        if self.recorder.snapshot_due(self.state, self.settings.session.snapshot_interval):
            self.recorder.snapshot(self.state, wait=False)
        self._set_phase(Phase.READY)
        # Handed off: no compaction here either (the next node compacts when it is due).
        if go_on and (self.leaving or not self._compact_if_due(resume_turn=False)):
            self._start_next_turn()

    def _cancel(self, by: str, *, go_on: bool = True) -> int | None:
        """Stop the running turn: the provider stream is closed, running tools are cancelled
        and get a result, the turn is recorded as cancelled; queued messages go on."""
        run = self.run
        if run is None:
            return None
        self._fail_turn("cancelled", f"the turn was cancelled by {by}", "cancelled", go_on=go_on)
        return run.turn
