"""What comes back to a session from its own work (pure values): the results of the ops
it started on the I/O loop (each carries the ``op_id`` it answers, so a stale one is
dropped), what a running tool tells it, its timers' ticks, and a subscriber found gone.
Unlike the ``Routed`` commands (:mod:`netclaw.sessions._core.commands`), nobody waits on these and the
manager does not count them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netclaw.history import Flushed
from netclaw.llm import Completion, Delta, Usage
from netclaw.messages import Attachment, Transcript
from netclaw.outputs import Output
from netclaw.sessions._core.compaction import CompactionOutcome
from netclaw.toolspec import ToolResult


@dataclass(frozen=True, slots=True)
class Recalled:
    """What recall found for the turn's tail (None: nothing, or the store did not answer)."""

    op_id: int
    memories: str | None


@dataclass(frozen=True, slots=True)
class Transcribed:
    """What speech-to-text heard in the turn's audio files: each transcript (or why there
    is none) by the file's index in the message."""

    op_id: int
    transcripts: tuple[tuple[int, Transcript], ...]


@dataclass(frozen=True, slots=True)
class Spoken:
    """A reply of ``turn`` spoken by text-to-speech: the stored audio file and the model
    that spoke it, or why there is none (``error``). Not an op of any activity: the turn is
    over when it comes back."""

    turn: int
    file: Attachment | None
    chars: int = 0
    model: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderDeltas:
    """Deltas streamed since the last batch (coalesced on the loop: one tell per batch)."""

    op_id: int
    deltas: tuple[Delta, ...]


@dataclass(frozen=True, slots=True)
class ProviderDone:
    op_id: int
    completion: Completion
    deltas: tuple[Delta, ...] = ()  # the last ones, not yet told: they travel with the answer


@dataclass(frozen=True, slots=True)
class CompactionDone:
    op_id: int
    outcome: CompactionOutcome


@dataclass(frozen=True, slots=True)
class ExtractionDone:
    op_id: int
    observations: Sequence[Flushed]  # (text, kind) or (text, kind, the memory it replaces)


@dataclass(frozen=True, slots=True)
class OpFailed:
    op_id: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class ToolsDone:
    op_id: int
    results: Sequence[ToolResult]


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """A running tool told its session something (:mod:`netclaw.sessions._shell.tool_port`): an output to publish,
    what a call it made to the session's model spent (sampling). Dropped once ``turn`` is
    over."""

    turn: int
    output: Output | None = None
    usage: Usage | None = None
    waiting: int = 0  # +1: a person is asked (the turn's timeout stops), -1: answered


@dataclass(frozen=True, slots=True)
class IdleTick:
    epoch: int


@dataclass(frozen=True, slots=True)
class GraceElapsed:
    epoch: int


@dataclass(frozen=True, slots=True)
class TurnTimeout:
    turn: int


@dataclass(frozen=True, slots=True)
class ApprovalsDue:
    """The earliest open approval request of ``turn`` has expired."""

    turn: int


@dataclass(frozen=True, slots=True)
class MemoriesSaved:
    """The memories extracted at passivation are stored (``count`` of them)."""

    op_id: int
    through_turn: int  # the newest turn they cover
    count: int


@dataclass(frozen=True, slots=True)
class SubscriberLeft:
    """A subscriber's sink reported itself gone while outputs were offered to it."""

    sub_id: str
