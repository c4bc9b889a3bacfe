"""Passivating: idle and unwatched, the session extracts memories during the grace
period (:mod:`netclaw.sessions._core.extraction`), snapshots and asks its manager to stop it. Anything routed
to it meanwhile aborts all of that (:meth:`Passivating.interrupted`: back to idle first).
A session handed off departs through it at once: no grace, no extraction."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from netclaw.security.policy import memory_scope_of
from netclaw.sessions._core.activity import Activity, Core
from netclaw.sessions._core.commands import Command, ConfirmStop, PassivateNow
from netclaw.sessions._core.effects import AskToStop, CancelOp, RunExtraction, SaveMemories, Stop
from netclaw.sessions._core.extraction import ExtractionPlan, plan_extraction
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import ExtractionDone, GraceElapsed, MemoriesSaved, OpFailed

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Passivating:
    phase: ClassVar[Phase] = Phase.PASSIVATING
    grace_s: float = 0.0  # how long it waits for a message before it stops
    extract: bool = True  # extract memories meanwhile (when there is something new, and a store)
    extraction: tuple[int, ExtractionPlan] | None = None  # op id and plan of the one running
    saving: int | None = None  # op id of the memories being stored
    grace_over: bool = False

    def handle(self, core: Core, command: Command) -> Activity:
        match command:
            case ExtractionDone(op_id=op_id, observations=observations) if self._extracting(op_id):
                assert self.extraction is not None  # checked by _extracting
                plan = self.extraction[1]
                self.extraction = None
                self.saving = core.new_op()  # none found is recorded too: not asked again
                scope = memory_scope_of(core.session_id, core.state.place)
                core.emit(SaveMemories(self.saving, plan, tuple(observations), scope))
            case MemoriesSaved(op_id=op_id) if op_id == self.saving:
                self.saving = None  # the session recorded them
            case OpFailed(op_id=op_id, error=error) if self._extracting(op_id):
                # Logged and let go: passivation goes on without the observations.
                log.warning("%s: memory extraction at passivation failed: %r", core.session_id, error)
                self.extraction = None
            case OpFailed(op_id=op_id, error=error) if op_id == self.saving:
                log.warning("%s: saving memories at passivation failed: %s", core.session_id, error)
                self.saving = None
            case GraceElapsed(epoch=epoch) if core.timers.current(epoch):
                self.grace_over = True
            case ConfirmStop(epoch=epoch) if core.timers.current(epoch):
                core.emit(Stop())
                return self
            case PassivateNow():
                # Already on our way out (our own idle timer): the manager saw this very message
                # in flight and declined our stop; ask again, now that it arrived.
                pass
            case _:
                return self  # stale
        return self.step(core)

    def entered(self, core: Core) -> Activity:
        """Extract memories during the grace period (when there is something new and a
        store, and ``extract``), snapshot, stop."""
        plan = None
        if core.has_memory and self.extract:
            model, audience = core.settings.compaction_model, core.context.audience
            scope = memory_scope_of(core.session_id, core.state.place)
            plan = plan_extraction(
                core.state, audience=audience, model=model, grace_s=self.grace_s, scope=scope
            )
        if plan is not None:
            op_id = core.new_op()
            self.extraction = (op_id, plan)
            core.emit(RunExtraction(op_id, plan))
        self.grace_over = not core.timers.begin_grace(self.grace_s)
        return self.step(core)

    def step(self, core: Core) -> Activity:
        """Finish once the grace period is over and no extraction or save is running."""
        if self.grace_over and self.extraction is None and self.saving is None:
            if core.snapshot_seq != core.state.seq:
                core.snapshot(wait=True)
            core.emit(AskToStop(core.timers.epoch))
        return self

    def interrupted(self, core: Core) -> Activity:
        """A message arrived: whatever passivation scheduled or was told is stale now (a save
        already under way still completes and is recorded); idle again, waiting."""
        if self.extraction is not None:
            core.emit(CancelOp(self.extraction[0]))
            self.extraction = None
        core.timers.abort()
        return core.back_to_idle("wait")

    def stopping(self, core: Core) -> None:
        pass

    def _extracting(self, op_id: int) -> bool:
        return self.extraction is not None and self.extraction[0] == op_id
