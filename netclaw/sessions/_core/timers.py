"""A session's timers, as bookkeeping (pure): the turn timeout, the approval expiry, the
idle timeout and the passivation grace. Each start or stop is an effect; the actor's
shell owns the real timers on the I/O loop.

Idle and passivation timing goes by generation: every arm, abort or step of
passivation starts a new *epoch*; the ticks a timer delivers (``IdleTick``,
``GraceElapsed``) and the manager's ``ConfirmStop`` carry the epoch they belong to,
so one from an older generation is recognised and ignored — a message that arrived
meanwhile has already moved the session on. The turn timer carries its turn number
for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable

from netclaw.sessions._core.effects import Effect, StartTimer, StopTimer, TimerKind
from netclaw.sessions._core.results import ApprovalsDue, GraceElapsed, IdleTick, TurnTimeout


class Timers:
    __slots__ = ("_armed", "_emit", "epoch")

    def __init__(self, emit: Callable[[Effect], None]) -> None:
        self._emit = emit
        self._armed: set[TimerKind] = set()
        self.epoch = 0

    def _start(self, kind: TimerKind, delay_s: float, message: object) -> None:
        self._armed.add(kind)
        self._emit(StartTimer(kind, delay_s, message))

    def _stop(self, kind: TimerKind) -> None:
        if kind in self._armed:
            self._armed.discard(kind)
            self._emit(StopTimer(kind))

    # -- the turn -----------------------------------------------------------------------------

    def start_turn(self, turn: int, timeout_s: float) -> None:
        """A turn begins: no idle tick meanwhile, and a ``TurnTimeout`` if it runs too long."""
        self._stop(TimerKind.IDLE)
        self.end_turn()
        self._start(TimerKind.TURN, timeout_s, TurnTimeout(turn))

    def end_turn(self) -> None:
        self._stop(TimerKind.TURN)
        self.end_approvals()

    # -- approvals ----------------------------------------------------------------------------

    def await_approvals(self, turn: int, due_in_s: float) -> None:
        """The turn waits for people: its own timeout is off (a person has
        ``approval_timeout_s``), and ``ApprovalsDue`` comes when the earliest request expires."""
        self.end_turn()
        self._start(TimerKind.APPROVALS, max(due_in_s, 0.0), ApprovalsDue(turn))

    def end_approvals(self) -> None:
        self._stop(TimerKind.APPROVALS)

    # -- idle and passivation -----------------------------------------------------------------

    def current(self, epoch: int) -> bool:
        return epoch == self.epoch

    def arm(self, idle: bool, timeout_s: float) -> None:
        """Start a new generation; when ``idle``, tick after ``timeout_s``."""
        self._stop(TimerKind.IDLE)
        self.epoch += 1
        if idle:
            self._start(TimerKind.IDLE, timeout_s, IdleTick(self.epoch))

    def begin_grace(self, grace_s: float) -> bool:
        """Passivation begins: a new generation whose grace period ends with a tick.
        Returns False when there is no grace period (finish at once)."""
        self._stop(TimerKind.IDLE)
        self.epoch += 1
        if grace_s <= 0:
            return False
        self._start(TimerKind.IDLE, grace_s, GraceElapsed(self.epoch))
        return True

    def abort(self) -> None:
        """Passivation was aborted: whatever it scheduled or was told is stale now."""
        self._stop(TimerKind.IDLE)
        self.epoch += 1
