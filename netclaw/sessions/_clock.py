"""A session's timers: the turn timeout, the idle timeout and the passivation grace.

Idle and passivation timing goes by generation: every arm, abort or step of
passivation starts a new *epoch*; the ticks a timer delivers (``IdleTick``,
``GraceElapsed``) and the manager's ``ConfirmStop`` carry the epoch they belong to,
so one from an older generation is recognised and ignored — a message that
arrived meanwhile has already moved the session on. The turn timer carries its
turn number for the same reason.

The clock schedules its ticks on the I/O loop (:class:`~netclaw.runtime.Timer`) and
tells them to the actor; deciding what a tick means stays with the actor.
"""

from __future__ import annotations

from netclaw.runtime import IoLoop, Tellable, Timer
from netclaw.sessions._commands import ApprovalsDue, GraceElapsed, IdleTick, TurnTimeout


class SessionClock:
    __slots__ = ("_approvals", "_idle", "_io", "_ref", "_turn", "epoch")

    def __init__(self, io: IoLoop, ref: Tellable) -> None:
        self._io = io
        self._ref = ref
        self._idle: Timer | None = None
        self._turn: Timer | None = None
        self._approvals: Timer | None = None
        self.epoch = 0

    # -- the turn -----------------------------------------------------------------------------

    def start_turn(self, turn: int, timeout_s: float) -> None:
        """A turn begins: no idle tick meanwhile, and a ``TurnTimeout`` if it runs too long."""
        self._cancel_idle()
        self.end_turn()
        self._turn = Timer(self._io, timeout_s, self._ref, TurnTimeout(turn))

    def end_turn(self) -> None:
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self.end_approvals()

    # -- approvals ----------------------------------------------------------------------------

    def await_approvals(self, turn: int, due_in_s: float) -> None:
        """The turn waits for people: its own timeout is off (a person has
        ``approval_timeout_s``), and ``ApprovalsDue`` comes when the earliest request expires."""
        self.end_turn()
        self._approvals = Timer(self._io, max(due_in_s, 0.0), self._ref, ApprovalsDue(turn))

    def end_approvals(self) -> None:
        if self._approvals is not None:
            self._approvals.cancel()
            self._approvals = None

    # -- idle and passivation -----------------------------------------------------------------

    def current(self, epoch: int) -> bool:
        return epoch == self.epoch

    def arm(self, idle: bool, timeout_s: float) -> None:
        """Start a new generation; when ``idle``, tick after ``timeout_s``."""
        self._cancel_idle()
        self.epoch += 1
        if idle:
            self._idle = Timer(self._io, timeout_s, self._ref, IdleTick(self.epoch))

    def begin_grace(self, grace_s: float) -> bool:
        """Passivation begins: a new generation whose grace period ends with a tick.
        Returns False when there is no grace period (finish at once)."""
        self._cancel_idle()
        self.epoch += 1
        if grace_s <= 0:
            return False
        self._idle = Timer(self._io, grace_s, self._ref, GraceElapsed(self.epoch))
        return True

    def abort(self) -> None:
        """Passivation was aborted: whatever it scheduled or was told is stale now."""
        self._cancel_idle()
        self.epoch += 1

    def cancel(self) -> None:
        """Every timer off (the actor stops or breaks)."""
        self._cancel_idle()
        self.end_turn()

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
