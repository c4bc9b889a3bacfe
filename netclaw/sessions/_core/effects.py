"""What a session asks its actor to carry out (pure values, a closed union).

:class:`~netclaw.sessions._core.session.Session` decides; the actor (:mod:`netclaw.sessions._shell.actor`, :mod:`netclaw.sessions._shell.effector`) only
carries these out, in the order they were produced. Each names a thing to do, never how:
the journal, the subscribers' sinks, the I/O loop and the timers are the shell's.

A command's effects are returned together and carried out once each, in order, after
the session decided them all; a failing :class:`Persist` ends the command there: what the
session decided after it is never carried out (the callers it owed are answered with the
failure), and the actor is replaced by one recovered from the journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, get_args

from netclaw import outputs as out
from netclaw.history import Flushed
from netclaw.llm import ProviderRequest
from netclaw.messages import Attachment, ToolCall
from netclaw.process.runtime import Reply
from netclaw.sessions._core.compaction import CompactionPlan
from netclaw.sessions._core.extraction import ExtractionPlan
from netclaw.sessions._core.journal.events import SessionEvent
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._subscribers import Subscriber
from netclaw.toolspec import ToolContext


class TimerKind(StrEnum):
    TURN = "turn"  # the turn's timeout (TurnTimeout)
    APPROVALS = "approvals"  # the earliest open approval request expires (ApprovalsDue)
    IDLE = "idle"  # the idle timeout, then the passivation grace (IdleTick, GraceElapsed)


# -- the journal ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Persist:
    """Append ``events`` durably (the one blocking call); ``state`` is the state with them
    applied (the session index row is read from it)."""

    events: tuple[SessionEvent, ...]
    state: SessionState


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Save ``state``; in the background unless ``wait`` (passivation)."""

    state: SessionState
    wait: bool = False


# -- subscribers and callers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publish:
    """Offer ``outputs`` to every subscriber whose filter wants them."""

    outputs: tuple[out.Output, ...]


@dataclass(frozen=True, slots=True)
class SendTo:
    """Offer ``outputs`` to one subscriber (a newcomer's greeting)."""

    sub_id: str
    outputs: tuple[out.Output, ...]


@dataclass(frozen=True, slots=True)
class Attach:
    subscriber: Subscriber


@dataclass(frozen=True, slots=True)
class Detach:
    sub_id: str


@dataclass(frozen=True, slots=True)
class CloseSubscribers:
    """End every subscriber's stream quietly (the session leaves this node: they follow it)."""


@dataclass(frozen=True, slots=True)
class Answer:
    reply: Reply[Any]
    value: Any


@dataclass(frozen=True, slots=True)
class Refuse:
    reply: Reply[Any]
    error: Exception


# -- work on the I/O loop (its outcome comes back as a command with the op id) ------------------


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """Memories relevant to ``query``, for the volatile tail of the newest turn."""

    query: str
    audience: str
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class Recall:
    """Search the memory store (briefly: a slow or broken store means no memories, never a
    failed turn); the block found comes back as ``Recalled``."""

    op_id: int
    query: RecallQuery


@dataclass(frozen=True, slots=True)
class Transcribe:
    """Hear the audio ``files`` (index in the message → the stored file) by speech-to-text;
    what was heard, or why nothing was, comes back as ``Transcribed`` (never a failure)."""

    op_id: int
    message_id: str
    files: tuple[tuple[int, Attachment], ...]


@dataclass(frozen=True, slots=True)
class Speak:
    """Speak the reply ``text`` of ``turn`` (text-to-speech) and store the audio with the
    session's files; the outcome comes back as ``Spoken`` (never a failure)."""

    turn: int
    text: str


@dataclass(frozen=True, slots=True)
class CallModel:
    """Send ``request`` to the provider named ``provider`` (``providers.<name>``)."""

    op_id: int
    request: ProviderRequest
    provider: str


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run a tool round; a call in ``refusals`` (call id → why) does not run and gets the
    reason as its result."""

    op_id: int
    calls: tuple[ToolCall, ...]
    timeout_s: float
    allowed: tuple[str, ...] | None
    context: ToolContext
    refusals: Mapping[str, str]
    model: str = "main"  # the model the turn is on: a tool's request to sample goes to it


@dataclass(frozen=True, slots=True)
class RunCompaction:
    op_id: int
    plan: CompactionPlan


@dataclass(frozen=True, slots=True)
class RunExtraction:
    op_id: int
    plan: ExtractionPlan


@dataclass(frozen=True, slots=True)
class SaveMemories:
    op_id: int
    plan: ExtractionPlan
    observations: tuple[Flushed, ...]  # (text, kind) or (text, kind, the memory it replaces)
    scope: str | None


@dataclass(frozen=True, slots=True)
class CancelOp:
    op_id: int


# -- timers -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Tell ``message`` to the session after ``delay_s`` (replacing a timer of the kind)."""

    kind: TimerKind
    delay_s: float
    message: object


@dataclass(frozen=True, slots=True)
class StopTimer:
    kind: TimerKind


# -- the manager ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseChanged:
    phase: Phase


@dataclass(frozen=True, slots=True)
class AskToStop:
    """Passivation is done: ask the manager to stop us (it confirms with ``epoch``)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ReplyOwed:
    """A chat session recorded a reply nobody has shown yet (the outbox posts it), or a
    sub-agent an answer its parent has not admitted yet (the courier takes it there)."""


@dataclass(frozen=True, slots=True)
class CancelSessions:
    """Cancel the running turns of these sessions (a parent's sub-agents, when it is
    cancelled or reset): their provider streams close and their tools get "cancelled"."""

    session_ids: tuple[str, ...]
    by: str


@dataclass(frozen=True, slots=True)
class ContinuityDelivered:
    """The model heard that a restart interrupted it: the notice no longer applies."""


@dataclass(frozen=True, slots=True)
class CompactionHealth:
    """How many summaries in a row failed (0: the last one worked), for status and metrics."""

    failures: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the actor (confirmed passivation, or shutdown)."""


# -- spend and metrics --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Charge:
    """A call was answered: add what it cost to the daemon's day (the spend ledger every
    session reads) and to ``/metrics``. ``model`` is the model id, as usage reports name it."""

    day: str  # the UTC date it counts for
    model: str
    tokens: int  # input + output, as the guards count
    cost: float  # at the model's price; 0 when it has none


MetricName = Literal[
    "turns", "turn_seconds", "tokens", "compactions", "trims", "approvals_pending", "speech_audio_seconds"
]


@dataclass(frozen=True, slots=True)
class Measure:
    """Add ``value`` to a metric (``approvals_pending`` goes down with a negative value)."""

    metric: MetricName
    value: float
    label: str | None = None


Effect = (
    Persist
    | Snapshot
    | Publish
    | SendTo
    | Attach
    | Detach
    | CloseSubscribers
    | Answer
    | Refuse
    | Recall
    | Transcribe
    | Speak
    | CallModel
    | RunTools
    | RunCompaction
    | RunExtraction
    | SaveMemories
    | CancelOp
    | StartTimer
    | StopTimer
    | PhaseChanged
    | AskToStop
    | ReplyOwed
    | CancelSessions
    | ContinuityDelivered
    | CompactionHealth
    | Stop
    | Charge
    | Measure
)

EFFECT_TYPES: tuple[type, ...] = get_args(Effect)
assert len(set(EFFECT_TYPES)) == len(EFFECT_TYPES), "every effect type appears once"
