"""Compacting: tier 1 planned when it is built (:meth:`Compacting.planned`), tiers 2 and 3
(LLM calls) on the loop once it is entered, the outcome recorded, then the suspended turn
(or the next one) goes on as the context ladder says — returned, for the session to enter.
Messages arriving meanwhile are admitted and queued by the session."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import ClassVar

from netclaw.process.runtime import Reply
from netclaw.sessions._core.activity import Activity, Core, Suspended
from netclaw.sessions._core.commands import Cancel, Command, CompactNow, Reset
from netclaw.sessions._core.compaction import (
    CompactionOutcome,
    CompactionStart,
    compaction_output,
    compaction_record,
    describe_compaction,
    failing_notice,
    plan_compaction,
)
from netclaw.sessions._core.context import ladder as ladder
from netclaw.sessions._core.effects import CancelOp, CompactionHealth, Measure, RunCompaction
from netclaw.sessions._core.journal.events import SessionCompacted
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import CompactionDone, OpFailed, TurnTimeout
from netclaw.sessions._core.turn import charges

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Compacting:
    phase: ClassVar[Phase] = Phase.COMPACTING
    op_id: int
    start: CompactionStart  # what tier 1 decided, and the LLM tiers' plan if they must run
    resume: Suspended | None  # the turn that goes on afterwards (a tool loop, an overflow retry)
    forced: bool = False  # the overflow ladder's rung 1 or /compact, not the threshold
    reply: Reply[str] | None = None  # /compact: told what happened
    in_flight: bool = False

    def handle(self, core: Core, command: Command) -> Activity:
        match command:
            case CompactionDone(op_id=op_id, outcome=outcome) if op_id == self.op_id:
                self.in_flight = False
                return self.finish(core, outcome)
            case OpFailed(op_id=op_id, error=error) if op_id == self.op_id:
                self.in_flight = False
                log.error("%s: compaction failed: %r", core.session_id, error)
                return self.finish(core, None, note=f"compaction failed: {error}")
            case Cancel(reply=reply, by=by):
                if self.resume is None:  # between turns: nothing to cancel
                    core.answer(reply, None)
                    return self
                self.abandon(core)
                after = self.resume.fail(core, "cancelled", f"the turn was cancelled by {by}", "cancelled")
                core.answer(reply, self.resume.turn)
                return after
            case Reset(by=by):  # the session, idle again, takes the reset
                self.abandon(core)
                if self.resume is not None:
                    return self.resume.fail(
                        core, "cancelled", f"the turn was cancelled by {by}", "cancelled", then=command
                    )
                return core.back_to_idle(then=command)
            case TurnTimeout(turn=timed_out) if self.resume is not None and self.resume.turn == timed_out:
                self.abandon(core)
                limit = core.settings.session.turn_timeout_s
                return self.resume.fail(
                    core, "turn_timeout", f"the turn took longer than {limit:g}s and was stopped", "timed_out"
                )
            case CompactNow(reply=reply):
                core.answer(reply, "not now: the session is compacting; try again when it is done")
            case _:
                pass  # results of other ops: stale
        return self

    @classmethod
    def planned(
        cls, core: Core, decision: ladder.Compact, *, resume: Suspended | None, reply: Reply[str] | None
    ) -> Compacting:
        """Tier 1 decided now (which tool results to clear), and the LLM tiers' plan if the
        threshold is still crossed after it."""
        context = core.context
        start = plan_compaction(
            core.state,
            context.prompts,
            context.tools(),
            context.settings,
            threshold_tokens=context.budget().threshold_tokens,
            audience=context.audience,
            forced=decision.forced,
            summarise=decision.summarise,
        )
        return cls(core.new_op(), start, resume, decision.forced, reply)

    def entered(self, core: Core) -> Activity:
        """Finish at once when tier 1 is all there is, else run the LLM tiers."""
        start = self.start
        if start.plan is None and not start.cleared and (not self.forced or self.reply is not None):
            # Nothing to clear and nothing old enough to summarise: record nothing, say
            # nothing (it would repeat after every turn), and carry on.
            log.debug("%s: compaction due but nothing to compact (%s)", core.session_id, start.note)
            if self.reply is not None:
                core.answer(
                    self.reply, f"Nothing to compact yet ({start.note or 'the conversation is short'})."
                )
            return self._go_on(core, event=None)
        if start.plan is None:
            return self.finish(core, None)
        self.in_flight = True
        core.emit(RunCompaction(self.op_id, start.plan))
        return self

    def finish(self, core: Core, outcome: CompactionOutcome | None, note: str | None = None) -> Activity:
        start = self.start if note is None else replace(self.start, note=note)
        event = compaction_record(
            core.state, start, outcome, core.context.prompts, core.context.tools(), core.now()
        )
        core.persist(event)
        if outcome is not None and outcome.usage is not None and start.plan is not None:
            for effect in charges(outcome.usage, start.plan.model, core.now()):  # its calls count too
                core.emit(effect)
        core.emit(Measure("compactions", 1, "+".join(event.tiers) or "none"))
        if self.reply is not None:
            core.answer(self.reply, describe_compaction(event))
        core.snapshot()
        summary = {k: v for k, v in event.to_payload().items() if k not in ("summary", "cleared")}
        log.info("%s: compaction %s", core.session_id, json.dumps(summary, sort_keys=True))
        core.publish(compaction_output(core.session_id, event))
        return self._go_on(core, event=event)

    def _go_on(self, core: Core, *, event: SessionCompacted | None) -> Activity:
        summary_failed = event is not None and event.summary_failed
        decision = core.context.after_compaction(
            core.state,
            forced=self.forced,
            summary_failed=summary_failed,
            freed_nothing=event is not None and not event.cleared and event.summary is None,
            summarised=event is not None and event.summary is not None,
        )
        if summary_failed or (event is not None and event.summary is not None):
            failures, retry_at = core.context.summaries()
            core.emit(CompactionHealth(failures))
            if event is not None and summary_failed:
                core.publish(failing_notice(core.session_id, event, failures, retry_at, core.state.turns))
        if self.resume is not None:
            return self.resume.resumed(trim=isinstance(decision, ladder.Trim))
        return core.back_to_idle("next")  # just compacted: not again before the next turn

    def interrupted(self, core: Core) -> Activity:
        return self

    def stopping(self, core: Core) -> None:
        self.abandon(core)

    def abandon(self, core: Core) -> None:
        if self.in_flight:
            core.emit(CancelOp(self.op_id))
            self.in_flight = False
        if self.reply is not None:
            core.answer(self.reply, "The compaction was abandoned.")
