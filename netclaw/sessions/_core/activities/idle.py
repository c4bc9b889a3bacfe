"""Idle: nothing runs. How it begins depends on why the session is idle
(:data:`~netclaw.sessions._core.activity.IdleEntry`): the next queued message's turn starts from here, an
interrupted one resumes, a due compaction begins, a handed-off session departs, or the
idle timer is armed. The idle timer leads to passivation; ``/compact`` and a reset start
here; messages are admitted by the session itself (which starts their turn)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from netclaw.sessions._core.activity import Activity, Core, IdleEntry
from netclaw.sessions._core.commands import Cancel, Command, CompactNow, HandOff, PassivateNow, Release, Reset
from netclaw.sessions._core.context.ladder import Compact
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import IdleTick


@dataclass(slots=True)
class Idle:
    phase: ClassVar[Phase] = Phase.READY
    entry: IdleEntry = "rest"
    then: Reset | None = None  # a reset that ended a turn or a compaction: taken once idle

    def entered(self, core: Core) -> Activity:
        if self.then is not None:
            return self.handle(core, self.then)
        match self.entry:
            case "rest":
                return self
            case "wait":
                core.arm_idle()
                return self
            case "next":
                return self._next(core)
            case "go_on":
                return self._go_on(core)

    def handle(self, core: Core, command: Command) -> Activity:
        match command:
            case IdleTick(epoch=epoch):
                if core.timers.current(epoch) and core.idle():
                    return core.passivation(core.settings.session.passivation_grace_s)
            case PassivateNow():
                if core.idle():
                    return core.passivation(0.0)
            case CompactNow(reply=reply):
                return core.compaction(Compact(forced=True, summarise=True), reply=reply)
            case Cancel(reply=reply):
                core.answer(reply, None)
            case Reset(by=by, reply=reply):
                core.reset_context(by)
                core.answer(reply, None)
                return self._next(core)
            case Release():  # warmed at start-up, and released: go on
                return self._go_on(core)
            case HandOff():  # nothing runs: leave now
                return core.departure()
            case _:
                pass  # op results, ticks and timeouts of activities that are over: stale
        return self

    def interrupted(self, core: Core) -> Activity:
        return self

    def stopping(self, core: Core) -> None:
        pass

    def _go_on(self, core: Core) -> Activity:
        """Between turns: compact if due, then the next turn (a turn a restart interrupted
        resumes first)."""
        if core.state.active is None and not core.leaving:  # handed off: its next node compacts
            due = core.compaction_due(None)
            if due is not None:
                return due
        return self._next(core)

    def _next(self, core: Core) -> Activity:
        if core.leaving:  # handed off: no turn starts here; what is queued waits in the journal
            return core.departure()
        turn = core.next_turn()
        if turn is not None:
            return turn
        core.arm_idle()
        return self
