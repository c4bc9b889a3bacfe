"""Idle: nothing runs. The idle timer leads to passivation; ``/compact`` and a reset
start here; messages are admitted by the session itself (which starts their turn)."""

from __future__ import annotations

from dataclasses import dataclass

from netclaw.sessions._commands import Cancel, Command, CompactNow, PassivateNow, Reset
from netclaw.sessions._core import Activity, Core
from netclaw.sessions._ladder import Compact
from netclaw.sessions._phases import Phase
from netclaw.sessions._results import IdleTick


@dataclass(slots=True)
class Idle:
    @property
    def phase(self) -> Phase:
        return Phase.READY

    def handle(self, core: Core, command: Command) -> Activity:
        match command:
            case IdleTick(epoch=epoch):
                if core.timers.current(epoch) and core.idle():
                    return core.begin_passivation(core.settings.session.passivation_grace_s)
            case PassivateNow():
                if core.idle():
                    return core.begin_passivation(0.0)
            case CompactNow(reply=reply):
                return core.begin_compaction(Compact(forced=True, summarise=True), reply=reply)
            case Cancel(reply=reply):
                core.answer(reply, None)
            case Reset(by=by, reply=reply):
                after = core.reset_context(by)
                core.answer(reply, None)
                return after
            case _:
                pass  # op results, ticks and timeouts of activities that are over: stale
        return self
