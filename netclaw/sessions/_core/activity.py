"""What a session's activities see of it, and what an activity is (protocols, pure).

A session is always in exactly one activity — :class:`~netclaw.sessions._core.activities.idle.Idle`,
:class:`~netclaw.sessions._core.activities.turning.Turn`, :class:`~netclaw.sessions._core.activities.compacting.Compacting` or
:class:`~netclaw.sessions._core.activities.passivating.Passivating` — which owns the progress of what it is doing (the
turn's op id and tool round, the compaction in flight, the extraction) and declares its
:class:`~netclaw.sessions._core.phases.Phase`, the name the outside sees. Everything that outlives an activity
is the session's (:class:`~netclaw.sessions._core.session.Session`): the durable state, the settings, the
prompt builder and the context ladder, the timers, the callers waiting.

An activity changes in one way only: by the value its ``entered`` or ``handle`` returns.
The session makes that value current, announces the change of phase and enters it, whose
``entered`` may return yet another (a turn that ends returns ``Idle``, which starts the
next queued turn) — until one stays. Activities reach the session through :class:`Core`
only, so they import neither the session nor each other: the next one is *built* through
``Core`` (``compaction``, ``passivation``, ``turn_ended``, ...), never entered there.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.process.runtime import Reply
from netclaw.security.redact import Scrubber
from netclaw.sessions._core.commands import Command, Reset
from netclaw.sessions._core.context.build import ModelContext
from netclaw.sessions._core.context.ladder import Compact
from netclaw.sessions._core.effects import Effect
from netclaw.sessions._core.journal.events import SessionEvent, TurnStatus
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.timers import Timers
from netclaw.sessions._core.turn import Step
from netclaw.spend import DailySpend

# How an Idle session begins, by why it is idle:
# "rest": nothing more (recovered, and held until Release);
# "wait": wait for input — arm the idle timer (passivation was aborted by a message);
# "next": the next queued message's turn, else wait (depart when handed off);
# "go_on": an interrupted turn, else a compaction that is due, else "next".
IdleEntry = Literal["rest", "wait", "next", "go_on"]


class Activity(Protocol):
    """What the session is doing now; ``phase`` is how the outside sees it."""

    phase: ClassVar[Phase]

    def entered(self, core: Core) -> Activity:
        """Just made current: begin (effects go through ``core``); the activity afterwards —
        itself to stay."""
        ...

    def handle(self, core: Core, command: Command) -> Activity:
        """Carry ``command`` out; the activity afterwards."""
        ...

    def interrupted(self, core: Core) -> Activity:
        """A command came from outside (the manager routed it): what to be before it is
        taken — passivation stops there; the others go on as they are."""
        ...

    def stopping(self, core: Core) -> None:
        """The actor stops or broke: answer whoever this activity still owes."""
        ...


class Suspended(Activity, Protocol):
    """A turn waiting while the session compacts in its middle."""

    @property
    def turn(self) -> int: ...

    def resumed(self, *, trim: bool) -> Activity:
        """Compaction is over: the turn, to be entered again — it calls the model then
        (after the overflow trim if ``trim``)."""
        ...

    def fail(
        self, core: Core, code: str, message: str, status: TurnStatus, *, then: Reset | None = None
    ) -> Activity:
        """End the turn without an answer; the idle session afterwards (which takes
        ``then``, a reset that ended the turn)."""
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
    leaving: bool

    def idle(self) -> bool: ...
    def may_recall(self, audience: str) -> bool: ...

    # -- what it takes from the world (the env's: a test controls each) --------------------------
    def now(self) -> float:
        """The wall clock, in seconds since the epoch: what is recorded and shown."""
        ...

    def monotonic(self) -> float:
        """A clock for durations (a turn's seconds)."""
        ...

    def random_hex(self, digits: int) -> str:
        """``digits`` fresh random hex digits (an approval request's id is made of them)."""
        ...

    def new_id(self, prefix: str) -> str:
        """A fresh message id: ``prefix``, ``_`` and 20 random hex digits."""
        ...

    def known_secrets(self) -> Scrubber:
        """The daemon's own secret values, as they are now (``netclaw.security.redact``)."""
        ...

    # -- effects: added, in order, to what the command produces ----------------------------------
    def emit(self, effect: Effect) -> None: ...
    def persist(self, *events: SessionEvent) -> None: ...
    def record(self, step: Step) -> None: ...
    def publish(self, *outputs: out.Output) -> None: ...
    def answer(self, reply: Reply[Any], value: object) -> None: ...
    def new_op(self) -> int: ...
    def snapshot(self, *, wait: bool = False) -> None: ...
    def resolve_waiters(self, message_id: str) -> None: ...
    def take_continuity(self) -> float | None: ...
    def reset_context(self, by: str) -> None: ...
    def arm_idle(self) -> None: ...

    # -- the activities it builds (entered by the session once returned) -------------------------
    def compaction(
        self, decision: Compact, *, resume: Suspended | None = None, reply: Reply[str] | None = None
    ) -> Activity: ...
    def compaction_due(self, resume: Suspended | None) -> Activity | None: ...
    def passivation(self, grace_s: float) -> Activity: ...
    def departure(self) -> Activity: ...
    def active_turn(self) -> Activity: ...
    def next_turn(self) -> Activity | None: ...
    def turn_ended(self, *, then: Reset | None = None) -> Activity: ...
    def back_to_idle(self, entry: IdleEntry = "next", *, then: Reset | None = None) -> Activity: ...
