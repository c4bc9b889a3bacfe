"""Idle and passivation, as the actor carries them out: after the idle timeout the
session extracts memories during the grace period (:mod:`._extraction`), snapshots and
asks its manager to stop it; anything routed to it meanwhile aborts all of that."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from netclaw.errors import NetclawError
from netclaw.persistence import NewMemory
from netclaw.policy import memory_scope_of
from netclaw.sessions._core import SessionCore
from netclaw.sessions._events import MemoriesExtracted
from netclaw.sessions._extraction import Extraction, ExtractionPlan, plan_extraction
from netclaw.sessions._loop_ops import start_extraction
from netclaw.sessions._phases import Phase

log = logging.getLogger(__name__)


class PassivationFlow(SessionCore):
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
                    items,
                    session_id=self.session_id,
                    audience=plan.audience,
                    turn=plan.through_turn,
                    scope=memory_scope_of(self.session_id, self.state.place),
                ),
                plan.budget_s,
            )
            self._persist(MemoriesExtracted(plan.through_turn, len(saved)))
            log.info("%s: %d memorie(s) saved at passivation", self.session_id, len(saved))
        except (NetclawError, TimeoutError) as exc:
            log.warning("%s: saving memories at passivation failed: %s", self.session_id, exc)
        self._passivation_step()

    def _leave(self) -> None:
        """Handed off (:class:`~._commands.HandOff`): stop at the first moment no turn or
        compaction is under way — now, or when it ends — without extracting memories (the
        next node does, at its passivation) and whoever watches (they follow the session to
        its new node)."""
        self.leaving = True
        if self.phases.phase is not Phase.READY or self.run is not None or self.compacting is not None:
            return  # _start_next_turn, at the end of what runs, calls us again
        self._set_phase(Phase.PASSIVATING)
        self.grace_over = not self.clock.begin_grace(0.0)
        self.subscribers.close_all()
        self._finish_passivation()

    def _finish_passivation(self) -> None:
        if self.recorder.snapshot_seq != self.state.seq:
            self.recorder.snapshot(self.state, wait=True)
        manager = self.deps.manager
        self.deps.io.call(
            manager.stop_requested, self.session_id, self.actor_ref, self.received, self.clock.epoch
        )
