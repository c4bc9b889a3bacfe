"""What a session's activities see of it, and what an activity is (protocols, pure).

A session is always in exactly one activity — :class:`~._idle.Idle`,
:class:`~._turning.Turn`, :class:`~._compacting.Compacting` or
:class:`~._passivating.Passivating` — which owns the progress of what it is doing (the
turn's op id and tool round, the compaction in flight, the extraction). Everything that
outlives an activity is the session's (:class:`~._session.Session`): the durable state,
the settings, the prompt builder and the context ladder, the timers, the callers
waiting. Activities reach it through :class:`Core` only, so they import neither the
session nor each other; a change of activity goes through the session
(``begin_compaction``, ``turn_ended``, ...), which builds the next one.
"""

from __future__ import annotations

from typing import Any, Protocol

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.runtime import Reply
from netclaw.sessions._commands import Command
from netclaw.sessions._context import ModelContext
from netclaw.sessions._effects import Effect
from netclaw.sessions._events import SessionEvent, TurnStatus
from netclaw.sessions._ladder import Compact
from netclaw.sessions._phases import Phase
from netclaw.sessions._state import SessionState
from netclaw.sessions._timers import Timers
from netclaw.sessions._turn import Step
from netclaw.spend import DailySpend


class Activity(Protocol):
    """What the session is doing now; ``phase`` is how the outside sees it."""

    @property
    def phase(self) -> Phase: ...

    def handle(self, core: Core, command: Command) -> Activity:
        """Carry ``command`` out (effects go through ``core``); the activity afterwards."""
        ...


class Suspended(Protocol):
    """A turn waiting while the session compacts in its middle."""

    @property
    def phase(self) -> Phase: ...

    @property
    def turn(self) -> int: ...

    def handle(self, core: Core, command: Command) -> Activity: ...

    def proceed(self, core: Core, *, trim: bool) -> Activity:
        """Compaction is over: call the model again (after the overflow trim if ``trim``)."""
        ...

    def fail(
        self, core: Core, code: str, message: str, status: TurnStatus, *, go_on: bool = True
    ) -> Activity:
        """End the turn without an answer."""
        ...


class Core(Protocol):
    """The session, as its activities use it."""

    # -- what it is and knows --------------------------------------------------------------------
    @property
    def session_id(self) -> str: ...
    @property
    def state(self) -> SessionState: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def spend(self) -> DailySpend: ...

    context: ModelContext
    has_memory: bool
    timers: Timers
    snapshot_seq: int

    def now(self) -> float: ...
    def idle(self) -> bool: ...
    def may_recall(self, audience: str) -> bool: ...

    # -- effects ---------------------------------------------------------------------------------
    def emit(self, effect: Effect) -> None: ...
    def persist(self, *events: SessionEvent) -> None: ...
    def record(self, step: Step) -> None: ...
    def publish(self, *outputs: out.Output) -> None: ...
    def answer(self, reply: Reply[Any], value: object) -> None: ...
    def new_op(self) -> int: ...
    def snapshot(self, *, wait: bool = False) -> None: ...
    def resolve_waiters(self, message_id: str) -> None: ...
    def take_continuity(self) -> float | None: ...

    # -- changes of activity ---------------------------------------------------------------------
    def enter(self, activity: Activity) -> None: ...
    def begin_compaction(
        self, decision: Compact, *, resume: Suspended | None = None, reply: Reply[str] | None = None
    ) -> Activity: ...
    def compact_if_due(self, resume: Suspended | None) -> Activity | None: ...
    def begin_passivation(self, grace_s: float) -> Activity: ...
    def turn_ended(self, *, go_on: bool) -> Activity: ...
    def back_to_idle(self, *, go_on: bool) -> Activity: ...
    def start_next_turn(self) -> Activity: ...
    def reset_context(self, by: str) -> Activity: ...
