"""Commands a session receives (a closed union, :data:`Command`).

``Routed`` ones come through the SessionManager, which counts them; the actor
counts what it received, so passivation can tell whether anything is still in
flight. The others are the manager's word to stop, and what comes back from the
session's own work (:mod:`netclaw.sessions._core.results`: op results, timer ticks, a tool's news).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from netclaw.lineage import ChildRecord, ChildReport, ChildTask, SpawnRequest
from netclaw.messages import Attachment
from netclaw.outputs import Error, OutputFilter
from netclaw.process.runtime import Reply
from netclaw.process.traces import Carrier
from netclaw.security.policy import Place
from netclaw.sessions._core.approvals import PendingApproval
from netclaw.sessions._core.journal.state import TurnOutcome
from netclaw.sessions._core.results import (
    ApprovalsDue,
    CompactionDone,
    ExtractionDone,
    GraceElapsed,
    IdleTick,
    MemoriesSaved,
    OpFailed,
    ProviderDeltas,
    ProviderDone,
    Recalled,
    Spoken,
    SubscriberLeft,
    ToolEvent,
    ToolsDone,
    Transcribed,
    TurnTimeout,
)
from netclaw.sessions._core.status import ModelChoice, StatusReport, VoiceChoice
from netclaw.sessions._subscribers import Sink


@dataclass(frozen=True, slots=True)
class Admission:
    session_id: str
    message_id: str
    duplicate: bool  # the identity was seen before: nothing new was recorded


class Routed:
    """Base of the commands the manager routes (and counts)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class SendUserMessage(Routed):
    text: str
    ts: float
    ack: Reply[Admission]
    identity: str | None = None
    user: str | None = None
    done: Reply[TurnOutcome] | None = None  # resolved when its turn is recorded
    user_name: str | None = None
    prior: str | None = None  # the earlier conversation, rendered (messages.prior_block)
    files: tuple[Attachment, ...] = ()  # already stored (netclaw.attachments)
    place: Place | None = None  # where the channel says the session lives
    speaker: str | None = None  # who sent it, as roles name them (netclaw/security/roles.py)
    speaker_role: str | None = None  # the role they act in (recorded: whose turn it is)
    # A sub-agent's task (its first input, from its parent) or a sub-agent's report (to it).
    subagent: ChildTask | ChildReport | None = None
    # The W3C trace context it came with (an API request's traceparent, a spawning tool's span):
    # its turn's span continues that trace (netclaw/process/traces.py). Never journaled.
    trace: Carrier = ()


@dataclass(frozen=True, slots=True)
class Subscribe(Routed):
    sub_id: str
    filter: OutputFilter
    sink: Sink


@dataclass(frozen=True, slots=True)
class Unsubscribe(Routed):
    sub_id: str


@dataclass(frozen=True, slots=True)
class Cancel(Routed):
    """Stop the running turn; ``reply`` gets its number, or None when nothing ran."""

    reply: Reply[int | None]
    by: str = "user"


@dataclass(frozen=True, slots=True)
class Reset(Routed):
    """Start the model-visible context afresh (a running turn is cancelled first)."""

    by: str
    reply: Reply[None]


@dataclass(frozen=True, slots=True)
class CompactNow(Routed):
    """Compact now, whatever the threshold; ``reply`` gets a sentence for people."""

    reply: Reply[str]


@dataclass(frozen=True, slots=True)
class ReportStatus(Routed):
    reply: Reply[StatusReport]


@dataclass(frozen=True, slots=True)
class Announce(Routed):
    """Tell every subscriber something (a command's answer)."""

    text: str
    kind: str


@dataclass(frozen=True, slots=True)
class Decide(Routed):
    """A person's decision on a pending tool call. ``approver`` is None for the control-token
    holder (API, CLI), else the platform user id to check against the approvers."""

    approval_id: str
    decision: str  # approve | deny | always
    by: str
    approver: str | None
    reply: Reply[str]


@dataclass(frozen=True, slots=True)
class ListApprovals(Routed):
    reply: Reply[list[PendingApproval]]


@dataclass(frozen=True, slots=True)
class MarkDelivered(Routed):
    """The channel showed the reply of ``turn`` (the outbox): record ``ReplyDelivered``."""

    turn: int
    message_ids: tuple[str, ...]
    reply: Reply[bool]


@dataclass(frozen=True, slots=True)
class ListUndelivered(Routed):
    """The replies the conversation is still owed: (turn, text, recorded at)."""

    reply: Reply[list[tuple[int, str, float]]]


@dataclass(frozen=True, slots=True)
class SpawnAnswer:
    """A spawn as the parent recorded it (``new``: just now; else found by its call id):
    the child's task and first input, and its report when it already finished."""

    task: ChildTask
    text: str
    new: bool
    report: ChildReport | None = None

    @property
    def child(self) -> str:
        return self.task.child


@dataclass(frozen=True, slots=True)
class RecordSpawn(Routed):
    """A ``spawn_agent`` call of ``turn``'s recorded round: record the child (or find the
    one this call already spawned). Refused with SubagentRefused when not allowed."""

    turn: int
    call_id: str
    request: SpawnRequest
    reply: Reply[SpawnAnswer]


@dataclass(frozen=True, slots=True)
class DetachChild(Routed):
    """Stop waiting for child ``n`` (its answer becomes input); ``reply`` gets its report
    instead when it already reported."""

    n: int
    reply: Reply[ChildReport | None]


@dataclass(frozen=True, slots=True)
class ListChildren(Routed):
    reply: Reply[list[ChildRecord]]


@dataclass(frozen=True, slots=True)
class OwedReports(Routed):
    """A sub-agent's answers its parent has not admitted yet, oldest first."""

    reply: Reply[list[ChildReport]]


@dataclass(frozen=True, slots=True)
class SetVoice(Routed):
    """Speak this conversation's replies too (``on``), or not; None: only say which.
    ``reply`` gets the choice in force."""

    on: bool | None
    by: str
    reply: Reply[VoiceChoice]


@dataclass(frozen=True, slots=True)
class PinModel(Routed):
    """Use the model named ``model`` (under ``models``) from the next turn on, until changed
    again; None: back to ``models.main``. ``reply`` gets the choice in force."""

    model: str | None
    by: str
    reply: Reply[ModelChoice]
    announce: bool = True  # tell subscribers in a notice (a chat command's answer is told already)


@dataclass(frozen=True, slots=True)
class Release(Routed):
    """A session warmed at start-up may go on (channels are listening now): resume its
    interrupted turn or queued input."""


@dataclass(frozen=True, slots=True)
class PassivateNow(Routed):
    """The manager wants room: passivate now if idle (skipping the idle timeout)."""


@dataclass(frozen=True, slots=True)
class HandOff(Routed):
    """Leave this node (a drain, a move): finish the turn under way, start no other, and
    ask to stop; queued input stays in the journal for the session's next node."""


@dataclass(frozen=True, slots=True)
class ConfirmStop:
    """The manager agrees nothing is in flight: stop if still passivating ``epoch``."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop now (daemon shutdown, or a broken actor being retired)."""


Command = (
    SendUserMessage
    | Subscribe
    | Unsubscribe
    | Cancel
    | Reset
    | CompactNow
    | ReportStatus
    | Announce
    | Decide
    | ListApprovals
    | MarkDelivered
    | ListUndelivered
    | RecordSpawn
    | DetachChild
    | ListChildren
    | OwedReports
    | PinModel
    | SetVoice
    | Release
    | HandOff
    | PassivateNow
    | ConfirmStop
    | Shutdown
    | Recalled
    | Transcribed
    | Spoken
    | ProviderDeltas
    | ProviderDone
    | CompactionDone
    | ExtractionDone
    | MemoriesSaved
    | OpFailed
    | ToolsDone
    | ToolEvent
    | IdleTick
    | GraceElapsed
    | TurnTimeout
    | ApprovalsDue
    | SubscriberLeft
)

COMMAND_TYPES: tuple[type, ...] = get_args(Command)
assert len(set(COMMAND_TYPES)) == len(COMMAND_TYPES), "every command type appears once"


def refuse(message: object, error: Exception, notice: Error | None) -> None:
    """Answer a command that cannot be carried out (its actor is broken): every reply
    fails with ``error`` and a subscription gets ``notice`` (if any) and ends, so nothing
    that waits on the command hangs."""
    match message:
        case SendUserMessage(ack=ack, done=done):
            ack.fail(error)
            if done is not None:
                done.fail(error)
        case Subscribe(sink=sink):
            if notice is not None:
                sink.offer(notice)
            sink.close()
        case (
            Cancel(reply=reply)
            | Reset(reply=reply)
            | CompactNow(reply=reply)
            | ReportStatus(reply=reply)
            | Decide(reply=reply)
            | ListApprovals(reply=reply)
            | MarkDelivered(reply=reply)
            | ListUndelivered(reply=reply)
            | RecordSpawn(reply=reply)
            | DetachChild(reply=reply)
            | ListChildren(reply=reply)
            | OwedReports(reply=reply)
            | PinModel(reply=reply)
            | SetVoice(reply=reply)
        ):
            reply.fail(error)
        case _:
            pass
