"""What a session tells its subscribers: one frozen dataclass per output event (pure).

Every channel — SSE, Slack, Discord, the CLI — receives the same typed outputs and
matches on their types (``case out.TextDelta(delta=d)``), never on dict keys. Import
the module, not the names: several outputs share a name with the thing they report
(``out.ToolCall`` is the output, ``messages.ToolCall`` the call itself)::

    from netclaw import outputs as out

The event names and payloads are documented in docs/events.md; :func:`payload`
turns an output into the JSON object an SSE ``data:`` line carries, and
:func:`parse` turns such an object back into an output (the CLI client, tests). Both
are the one place the wire shape lives.

A subscriber picks what it wants with an :class:`OutputFilter` bit mask; outputs
without a bit (lifecycle: turn completed, errors, phases, ...) go to everyone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntFlag
from typing import Any, ClassVar, Literal, get_args

OutputEvent = Literal[
    "joined",
    "text",
    "text_delta",
    "thinking",
    "tool_call",
    "tool_result",
    "usage",
    "file",
    "turn_completed",
    "title",
    "error",
    "compaction",
    "history_trimmed",
    "phase",
    "approval_requested",
    "approval_decided",
    "notice",
    "session_reset",
    "tool_progress",
    "input_requested",
    "input_answered",
    "subagent_started",
    "subagent_finished",
    "model_switched",
]

TurnEnd = Literal["completed", "failed", "cancelled"]


class OutputFilter(IntFlag):
    NONE = 0
    TEXT = 1
    TEXT_STREAMING = 2
    THINKING = 4
    TOOL_CALLS = 8
    USAGE = 16
    FILES = 32
    ALL = TEXT | TEXT_STREAMING | THINKING | TOOL_CALLS | USAGE | FILES

    @classmethod
    def parse(cls, spec: str | None) -> OutputFilter:
        """``"text,usage"`` → TEXT|USAGE. Empty or None → TEXT (the assembled reply)."""
        if spec is None or not spec.strip():
            return cls.TEXT
        result = cls.NONE
        for raw in spec.split(","):
            name = raw.strip().upper()
            if not name:
                continue
            if name not in _FILTER_NAMES:
                known = ", ".join(n.lower() for n in _FILTER_NAMES)
                raise ValueError(f"unknown output filter {raw.strip()!r} (known: {known})")
            result |= cls[name]
        return result


_FILTER_NAMES = ("TEXT", "TEXT_STREAMING", "THINKING", "TOOL_CALLS", "USAGE", "FILES", "ALL")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputBase:
    """Fields every output carries. Subclasses set ``event`` and, when a filter bit
    gates them, ``bit``; ``droppable`` ones may be shed by a subscriber that falls behind."""

    event: ClassVar[OutputEvent]
    bit: ClassVar[OutputFilter | None] = None  # None: lifecycle, delivered to everyone
    droppable: ClassVar[bool] = False
    omit_if_none: ClassVar[frozenset[str]] = frozenset()  # optional payload keys

    session_id: str

    def wanted_by(self, mask: OutputFilter) -> bool:
        return self.bit is None or bool(mask & self.bit)


# -- gated by a filter bit ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Text(OutputBase):
    """The assembled assistant reply of a turn."""

    event: ClassVar[OutputEvent] = "text"
    bit: ClassVar[OutputFilter | None] = OutputFilter.TEXT
    turn: int
    message_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(OutputBase):
    """Streamed reply text since the previous delta (one per batch the provider sent)."""

    event: ClassVar[OutputEvent] = "text_delta"
    bit: ClassVar[OutputFilter | None] = OutputFilter.TEXT_STREAMING
    droppable: ClassVar[bool] = True
    turn: int
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Thinking(OutputBase):
    event: ClassVar[OutputEvent] = "thinking"
    bit: ClassVar[OutputFilter | None] = OutputFilter.THINKING
    turn: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(OutputBase):
    event: ClassVar[OutputEvent] = "tool_call"
    bit: ClassVar[OutputFilter | None] = OutputFilter.TOOL_CALLS
    turn: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(OutputBase):
    event: ClassVar[OutputEvent] = "tool_result"
    bit: ClassVar[OutputFilter | None] = OutputFilter.TOOL_CALLS
    turn: int
    id: str
    name: str
    content: str
    is_error: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolProgress(OutputBase):
    """How far a running tool call is (an MCP server's progress notifications):
    ``progress`` of ``total`` (None: unknown), and what it is doing."""

    event: ClassVar[OutputEvent] = "tool_progress"
    bit: ClassVar[OutputFilter | None] = OutputFilter.TOOL_CALLS
    droppable: ClassVar[bool] = True
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"total", "message"})
    turn: int
    id: str  # the tool call's id
    name: str
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage(OutputBase):
    """One model call's tokens: ``input_tokens`` is the whole prompt, of which
    ``cache_read_tokens`` were read from the provider's prompt cache and
    ``cache_write_tokens`` written to it; ``cost`` at the model's price (``spend.currency``;
    0 when the model has no price)."""

    event: ClassVar[OutputEvent] = "usage"
    bit: ClassVar[OutputFilter | None] = OutputFilter.USAGE
    droppable: ClassVar[bool] = True
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"model"})
    turn: int
    input_tokens: int
    output_tokens: int
    context_window: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0
    model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class File(OutputBase):
    event: ClassVar[OutputEvent] = "file"
    bit: ClassVar[OutputFilter | None] = OutputFilter.FILES
    turn: int
    name: str
    mime_type: str
    path: str
    size: int


# -- lifecycle: always delivered ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined(OutputBase):
    """The first output of every subscription: where the session stands."""

    event: ClassVar[OutputEvent] = "joined"
    title: str | None
    turns: int
    phase: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCompleted(OutputBase):
    """A turn ended. ``message_id`` is the user message that started it, so a channel
    can find the platform message to un-react or reply to without counting turns."""

    event: ClassVar[OutputEvent] = "turn_completed"
    turn: int
    message_id: str
    status: TurnEnd


@dataclass(frozen=True, slots=True, kw_only=True)
class Title(OutputBase):
    event: ClassVar[OutputEvent] = "title"
    title: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Error(OutputBase):
    """A turn failed (``turn`` set) or the session or stream did (``turn`` None)."""

    event: ClassVar[OutputEvent] = "error"
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"turn"})
    code: str
    message: str
    turn: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction(OutputBase):
    event: ClassVar[OutputEvent] = "compaction"
    messages_before: int
    messages_after: int
    tool_results_cleared: int
    summarized: bool
    memories_saved: int
    tokens_before: int
    tokens_after: int
    tiers: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryTrimmed(OutputBase):
    event: ClassVar[OutputEvent] = "history_trimmed"
    first_kept_id: str
    dropped_messages: int
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    budget: int
    reason: str  # "budget" (before a call) or "overflow" (the provider refused the prompt)


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase(OutputBase):
    """The session's phase changed. ``from_`` is ``from`` on the wire."""

    event: ClassVar[OutputEvent] = "phase"
    from_: str
    to: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(OutputBase):
    event: ClassVar[OutputEvent] = "approval_requested"
    turn: int
    approval_id: str
    tool: str
    arguments: str
    expires_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided(OutputBase):
    event: ClassVar[OutputEvent] = "approval_decided"
    approval_id: str
    decision: Literal["approve", "deny", "always", "expired", "cancelled"]
    by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequested(OutputBase):
    """A running tool asks the person something (an MCP server's elicitation, or the
    go-ahead for sampling): ``kind`` ``form`` (fill in ``schema``), ``url`` (open ``url``)
    or ``confirm`` (yes or no). Answered with ``POST
    /api/sessions/{id}/questions/{question_id}`` (``netclaw questions``)."""

    event: ClassVar[OutputEvent] = "input_requested"
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"schema", "url"})
    turn: int
    question_id: str
    tool: str
    kind: str
    source: str
    message: str
    expires_at: float
    schema: Mapping[str, Any] | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InputAnswered(OutputBase):
    event: ClassVar[OutputEvent] = "input_answered"
    question_id: str
    action: Literal["accept", "decline", "cancel", "expired"]
    by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice(OutputBase):
    """A short note for people: command answers, continuity and delivery notes."""

    event: ClassVar[OutputEvent] = "notice"
    text: str
    kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionReset(OutputBase):
    event: ClassVar[OutputEvent] = "session_reset"
    by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentStarted(OutputBase):
    """The session spawned a sub-agent (``child_id``, its own session and stream); ``wait``:
    the turn waits for its answer."""

    event: ClassVar[OutputEvent] = "subagent_started"
    child_id: str
    task: str  # a one-line preview
    wait: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentFinished(OutputBase):
    """A sub-agent's answer (or failure) for its turn ``turn`` reached this session."""

    event: ClassVar[OutputEvent] = "subagent_finished"
    child_id: str
    turn: int
    status: Literal["completed", "failed", "timed_out", "interrupted", "cancelled"]
    summary: str  # a one-line preview of the answer or of what went wrong


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSwitched(OutputBase):
    """The session's model changed (names under ``models``): a turn went on with a fallback
    (``turn`` set; ``reason`` the error code of the model that failed), or a person chose
    one (``reason`` ``pinned``, or ``default`` back to main: from the next turn on)."""

    event: ClassVar[OutputEvent] = "model_switched"
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"turn"})
    from_model: str
    to_model: str
    reason: str
    turn: int | None = None


Output = (
    Text
    | TextDelta
    | Thinking
    | ToolCall
    | ToolResult
    | Usage
    | File
    | Joined
    | TurnCompleted
    | Title
    | Error
    | Compaction
    | HistoryTrimmed
    | Phase
    | ApprovalRequested
    | ApprovalDecided
    | Notice
    | SessionReset
    | ToolProgress
    | InputRequested
    | InputAnswered
    | SubagentStarted
    | SubagentFinished
    | ModelSwitched
)

OUTPUT_TYPES: Mapping[str, type[Output]] = {cls.event: cls for cls in get_args(Output)}
assert set(OUTPUT_TYPES) == set(get_args(OutputEvent)), "every event name has exactly one output type"

_WIRE_NAMES = {"from_": "from"}
_FIELD_NAMES = {
    cls: tuple((f.name, _WIRE_NAMES.get(f.name, f.name)) for f in dataclasses.fields(cls))
    for cls in OUTPUT_TYPES.values()
}


def payload(output: Output) -> dict[str, Any]:
    """The output as the JSON object of its SSE ``data:`` line (``session_id`` included)."""
    data: dict[str, Any] = {}
    skip = output.omit_if_none
    for name, wire in _FIELD_NAMES[type(output)]:
        value = getattr(output, name)
        if value is None and name in skip:
            continue
        data[wire] = list(value) if isinstance(value, tuple) else value
    return data


def parse(event: str, data: Mapping[str, Any]) -> Output:
    """The output an SSE event carried. Unknown keys are ignored (a newer daemon may add
    some); an unknown event or a missing key is a ValueError naming it."""
    cls = OUTPUT_TYPES.get(event)
    if cls is None:
        raise ValueError(f"unknown output event {event!r}")
    kwargs: dict[str, Any] = {}
    for name, wire in _FIELD_NAMES[cls]:
        if wire in data:
            value = data[wire]
            kwargs[name] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{event} output is missing fields: {exc}") from exc
