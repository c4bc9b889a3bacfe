"""The agent turn, as pure pieces: what the actor is waiting for, the context the
model sees, and the messages a turn records."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from netclaw import outputs as out
from netclaw.history import INTERRUPTED_TEXT, make_breadcrumb
from netclaw.history.compaction import apply_clearing, summary_message
from netclaw.messages import ChatMessage, ToolCall, new_id, system
from netclaw.providers import Completion, Delta
from netclaw.runtime import Cancellable
from netclaw.sessions._events import TurnStatus
from netclaw.sessions._state import SessionState

TITLE_MAX = 60


@dataclass(slots=True)
class TurnRun:
    """In-memory progress of the active turn (the durable part is in SessionState)."""

    turn: int
    message_id: str
    iteration: int  # tool iterations done
    op_id: int = 0  # the one async result we accept; anything else is stale
    pending_calls: ChatMessage | None = None  # assistant message whose tools are running
    future: Cancellable | None = None  # the loop future of the op in flight (to cancel it)
    estimate: int = 0  # our token estimate of the prompt in flight
    overflow_passes: int = 0  # overflow recovery passes this turn (at most MAX_OVERFLOW_PASSES)
    compacted: bool = False  # the overflow ladder's first rung (compaction) ran this turn


def build_context(state: SessionState, system_prompt: str) -> list[ChatMessage]:
    """The model-visible projection as recorded: the system prompt, the compaction
    summary, a breadcrumb where turns were trimmed, then the kept transcript with
    cleared tool results shown as placeholders."""
    head = [system(system_prompt)]
    visible = state.visible
    if state.summary is not None:
        head.append(
            summary_message(
                state.summary, id=f"summary:{state.compactions}", ts=visible[0].ts if visible else 0.0
            )
        )
    if state.trimmed and visible:
        head.append(make_breadcrumb(visible[0]))
    if state.cleared:
        return [*head, *apply_clearing(visible, state.cleared)]
    return [*head, *visible]


def assistant_message(completion: Completion, *, with_tool_calls: bool) -> ChatMessage:
    text = completion.text
    calls: tuple[ToolCall, ...] = completion.tool_calls if with_tool_calls else ()
    if not with_tool_calls and completion.tool_calls and not text:
        text = "[stopped: the tool-call limit for this turn was reached]"
    return ChatMessage(
        id=new_id("a"),
        role="assistant",
        content=text,
        ts=time.time(),
        tool_calls=calls,
        thinking=completion.thinking or None,
        extra=dict(completion.extra),
    )


def tool_message(call: ToolCall, content: str, is_error: bool) -> ChatMessage:
    return ChatMessage(
        id=new_id("t"),
        role="tool",
        content=content,
        ts=time.time(),
        tool_call_id=call.id,
        name=call.name,
        is_error=is_error,
    )


def interrupted_results(calls: Sequence[ToolCall]) -> list[ChatMessage]:
    return [tool_message(c, INTERRUPTED_TEXT, True) for c in calls]


def make_title(text: str) -> str:
    words = re.sub(r"\s+", " ", text).strip()
    if len(words) <= TITLE_MAX:
        return words or "untitled"
    return words[: TITLE_MAX - 1].rsplit(" ", 1)[0].rstrip(",.;:") + "…"


def text_deltas(session_id: str, turn: int, deltas: Sequence[Delta]) -> list[out.TextDelta]:
    """One ``text_delta`` output for a batch of provider deltas (empty when none is text)."""
    text = "".join(d.text for d in deltas if d.kind == "text")
    return [out.TextDelta(session_id=session_id, turn=turn, delta=text)] if text else []


def turn_end(status: TurnStatus) -> out.TurnEnd:
    """How a recorded turn ended, as ``turn_completed`` reports it to channels."""
    if status == "completed":
        return "completed"
    if status == "cancelled":
        return "cancelled"
    return "failed"  # failed, timed out, interrupted
