"""Compaction, as the actor carries it out: tier 1 planned here, tiers 2 and 3 run on
the loop (:mod:`._compaction`), the outcome recorded, and the turn (or the next one)
resumed as the context ladder says."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from netclaw.runtime import Reply
from netclaw.sessions import _ladder as ladder
from netclaw.sessions._compaction import (
    CompactionOutcome,
    CompactionRun,
    compaction_output,
    compaction_record,
    describe_compaction,
    plan_compaction,
)
from netclaw.sessions._core import SessionCore
from netclaw.sessions._loop_ops import start_compaction
from netclaw.sessions._phases import Phase

log = logging.getLogger(__name__)


class CompactionFlow(SessionCore):
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
        if self.deps.metrics is not None:
            self.deps.metrics.compactions.labels("+".join(event.tiers) or "none").inc()
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

    def _compact_now(self, reply: Reply[str]) -> None:
        if self.phases.phase is not Phase.READY or self.run is not None:
            reply.resolve(f"not now: the session is {self.phases.phase.value}; try again when it is done")
            return
        self._begin_compaction(ladder.Compact(forced=True, summarise=True), resume_turn=False, reply=reply)
