"""Journal events of a session (pure); their JSON form is :mod:`netclaw.sessions._core.journal.codec`.

Append-only: compaction and trimming (later) are events too; nothing already
stored is rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from netclaw.lineage import ChildReport, ChildTask
from netclaw.messages import Attachment, ChatMessage, Transcript
from netclaw.security.policy import Place

TurnStatus = Literal["completed", "failed", "timed_out", "interrupted", "cancelled"]
# approve: this call runs; always: it runs and the tool needs no approval for the rest of the
# session; deny/expired: it does not run, and its result says why; cancelled: the turn ended.
Decision = Literal["approve", "deny", "always", "expired", "cancelled"]


@dataclass(frozen=True, slots=True)
class InputAdmitted:
    """A user message became durable; written *before* it is acknowledged. ``place``:
    where the channel says the session lives (given with a session's first messages)."""

    message: ChatMessage
    place: Place | None = None


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """The admitted message ``message_id`` entered the transcript and its turn began."""

    turn: int
    message_id: str


@dataclass(frozen=True, slots=True)
class StepRecorded:
    """One tool iteration: the assistant's tool calls and all their results, together."""

    turn: int
    messages: tuple[ChatMessage, ...]


@dataclass(frozen=True, slots=True)
class TurnRecorded:
    turn: int
    message_id: str
    status: TurnStatus
    messages: tuple[ChatMessage, ...] = ()  # the final assistant reply (none when failed)
    error: Mapping[str, str] | None = None  # {"code", "message"} when not completed
    usage: Mapping[str, int] | None = None  # the last call's (its input_tokens: the prompt's size)
    # The whole turn's provider tokens (every call: input, output, cache_read, cache_write)
    # and the model (usage reports and the daily spend guard); ``cost``: what those calls
    # cost at the models' prices (spend.currency). Absent in events from before they existed.
    spent: Mapping[str, int] | None = None
    model: str | None = None
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ContextAttached:
    """The volatile tail of ``turn`` (the time, recalled memories, a restart notice): a
    user-role ``context`` message after the turn's newest message, recorded before the call
    that carries it, so every later request repeats it where it is, byte for byte.
    ``told_time``: it tells the current time (the next tail need not, for a while)."""

    turn: int
    message: ChatMessage
    told_time: bool = False


@dataclass(frozen=True, slots=True)
class ModelSwitched:
    """``turn`` goes on with the fallback ``to_model`` (``from_model`` failed with ``reason``,
    an error code, after its retries). Only this turn: the next starts on the session's model."""

    turn: int
    from_model: str
    to_model: str
    reason: str


@dataclass(frozen=True, slots=True)
class ModelPinned:
    """A person chose the session's model (a name under ``models``; None: back to ``main``)."""

    model: str | None
    by: str


@dataclass(frozen=True, slots=True)
class SpeechTranscribed:
    """The audio attachments of the user message ``message_id`` were heard: each file's
    transcript by its index among the message's files (a failure is recorded too, with its
    reason: never transcribed twice). ``spent``: ``{"speech_ms": <audio heard>}``; ``cost``:
    at the endpoints' prices (usage and the spend guards count it)."""

    message_id: str
    transcripts: tuple[tuple[int, Transcript], ...]
    spent: Mapping[str, int] | None = None
    cost: float | None = None
    model: str | None = None  # the model that heard the first note heard (usage by model)


@dataclass(frozen=True, slots=True)
class VoiceRepliesSet:
    """A person chose whether this conversation's replies are also spoken (``/voice``)."""

    on: bool
    by: str


@dataclass(frozen=True, slots=True)
class ReplySpoken:
    """The reply of ``turn`` was spoken: the stored audio ``file``; ``spent``:
    ``{"speech_chars": <characters spoken>}``; ``cost`` at the endpoint's price."""

    turn: int
    file: Attachment
    spent: Mapping[str, int] | None = None
    cost: float | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class SessionTitleSet:
    title: str


@dataclass(frozen=True, slots=True)
class HistoryTrimmed:
    """Whole turns before ``first_kept_id`` left the model-visible projection.

    The transcript keeps them; recovery rebuilds the same projection from this.
    """

    first_kept_id: str
    dropped_messages: int
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    budget: int
    reason: str  # "budget" (before a call) or "overflow" (the provider refused the prompt)

    def to_payload(self) -> dict[str, Any]:
        return {
            "first_kept_id": self.first_kept_id,
            "dropped_messages": self.dropped_messages,
            "dropped_turns": self.dropped_turns,
            "kept_turns": self.kept_turns,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "budget": self.budget,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class SessionCompacted:
    """Tiered compaction ran. Like a trim, it changes the model-visible projection only:
    cleared tool results show as placeholders, and with a summary the projection starts
    at ``first_kept_id`` behind the summary. The transcript keeps every message."""

    cleared: tuple[str, ...]  # tool_call_ids whose results are now placeholders
    summary: str | None  # the merged summary (None: no summary this time)
    first_kept_id: str | None  # with a summary: the first message it does not cover
    tiers: tuple[str, ...]  # "clear_tool_results", "memory_flush", "summary"
    memories_saved: int
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    note: str | None = None  # why a tier was skipped or cancelled, for people
    summary_failed: bool = False  # the LLM tiers ran and no summary came of them
    # What its LLM calls spent (as TurnRecorded's): counted in usage and by the spend guards.
    spent: Mapping[str, int] | None = None
    model: str | None = None
    cost: float | None = None

    def to_payload(self) -> dict[str, Any]:
        payload = self._shown()
        optional = {"spent": dict(self.spent) if self.spent else None, "model": self.model, "cost": self.cost}
        payload.update({key: value for key, value in optional.items() if value is not None})
        return payload

    def _shown(self) -> dict[str, Any]:
        return {
            "cleared": list(self.cleared),
            "summary": self.summary,
            "first_kept_id": self.first_kept_id,
            "tiers": list(self.tiers),
            "memories_saved": self.memories_saved,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "note": self.note,
            "summary_failed": self.summary_failed,
        }


@dataclass(frozen=True, slots=True)
class SessionReset:
    """The model-visible context starts empty from here (``/reset``, ``/new``). The
    transcript keeps every message, and memories stay."""

    by: str


@dataclass(frozen=True, slots=True)
class MemoriesExtracted:
    """Durable observations of the turns up to ``through_turn`` were saved (at passivation),
    so the next extraction starts after them."""

    through_turn: int
    saved: int


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    id: str
    call_id: str
    tool: str
    arguments: str  # as the model wrote them (JSON text)
    requested_at: float
    expires_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApprovalRequest:
        return cls(
            str(d["id"]),
            str(d["call_id"]),
            str(d["tool"]),
            str(d["arguments"]),
            float(d["requested_at"]),
            float(d["expires_at"]),
        )


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A tool round waits for people: ``assistant`` holds every call of the round (so a
    recovered session can run it once decided); ``requests`` the calls that need a yes."""

    turn: int
    assistant: ChatMessage
    requests: tuple[ApprovalRequest, ...]


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """Journaled before the tool runs (or is refused)."""

    approval_id: str
    decision: Decision
    by: str


@dataclass(frozen=True, slots=True)
class ReplyDelivered:
    """The reply of ``turn`` is shown in its chat conversation: these platform messages."""

    turn: int
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RoundStarted:
    """A tool round that must not be asked for twice (it spawns sub-agents) is recorded
    before it runs: a session recovered in its middle runs this round again — the spawns
    find their records — instead of asking the model anew. ``StepRecorded`` ends it."""

    turn: int
    assistant: ChatMessage


@dataclass(frozen=True, slots=True)
class ChildSpawned:
    """The parent recorded a child before the child's first input (``text``) is sent, so
    the spawn is found again by ``call_id`` if it runs again."""

    task: ChildTask
    call_id: str
    turn: int
    text: str
    wait: bool


@dataclass(frozen=True, slots=True)
class ChildReported:
    """A child's turn reached the parent: with the ``InputAdmitted`` of its report in the
    same write, or alone when it starts no turn (the spawning turn waited for it, or the
    child was cancelled). Its tokens count toward the parent's spend."""

    report: ChildReport


@dataclass(frozen=True, slots=True)
class ChildDetached:
    """The parent stopped waiting for child ``n``: its answer will arrive as input."""

    n: int


@dataclass(frozen=True, slots=True)
class TaskGiven:
    """This session is a sub-agent: written with its first input, the task's terms."""

    task: ChildTask


SessionEvent = (
    InputAdmitted
    | TurnStarted
    | StepRecorded
    | TurnRecorded
    | SessionTitleSet
    | HistoryTrimmed
    | SessionCompacted
    | SessionReset
    | MemoriesExtracted
    | ApprovalRequested
    | ApprovalDecided
    | ReplyDelivered
    | RoundStarted
    | ChildSpawned
    | ChildReported
    | ChildDetached
    | TaskGiven
    | ContextAttached
    | ModelSwitched
    | ModelPinned
    | SpeechTranscribed
    | VoiceRepliesSet
    | ReplySpoken
)
