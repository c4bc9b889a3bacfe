"""Idle and passivation timing of one session, by generation.

Every arm, abort or step of passivation starts a new *epoch*; the ticks a timer
delivers (``IdleTick``, ``GraceElapsed``) and the manager's ``ConfirmStop`` carry
the epoch they belong to, so one from an older generation is recognised and ignored
— a message that arrived meanwhile has already moved the session on.

The clock schedules its ticks on the I/O loop (:class:`~netclaw.runtime.Timer`) and
tells them to the actor; deciding what a tick means stays with the actor.
"""

from __future__ import annotations

from netclaw.runtime import IoLoop, Tellable, Timer
from netclaw.sessions._commands import GraceElapsed, IdleTick


class IdleClock:
    __slots__ = ("_io", "_ref", "_timer", "epoch")

    def __init__(self, io: IoLoop, ref: Tellable) -> None:
        self._io = io
        self._ref = ref
        self._timer: Timer | None = None
        self.epoch = 0

    def current(self, epoch: int) -> bool:
        return epoch == self.epoch

    def arm(self, idle: bool, timeout_s: float) -> None:
        """Start a new generation; when ``idle``, tick after ``timeout_s``."""
        self.cancel()
        self.epoch += 1
        if idle:
            self._timer = Timer(self._io, timeout_s, self._ref, IdleTick(self.epoch))

    def begin_grace(self, grace_s: float) -> bool:
        """Passivation begins: a new generation whose grace period ends with a tick.
        Returns False when there is no grace period (finish at once)."""
        self.cancel()
        self.epoch += 1
        if grace_s <= 0:
            return False
        self._timer = Timer(self._io, grace_s, self._ref, GraceElapsed(self.epoch))
        return True

    def abort(self) -> None:
        """Passivation was aborted: whatever it scheduled or was told is stale now."""
        self.cancel()
        self.epoch += 1

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
