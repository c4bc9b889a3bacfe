"""Whole-turn trimming of the model-visible context.

A turn runs from a real user message up to the next one, so dropping whole
turns can never separate a tool call from its results. The pinned head
(system messages and compaction summaries before the first turn) is always
kept; the newest turn is always kept whole, even when it alone is over budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from netclaw.messages import ChatMessage, MessageKind, split_turns

BREADCRUMB_TEXT = "[earlier turns omitted to fit the context window]"


@dataclass(frozen=True, slots=True)
class TrimResult:
    messages: tuple[ChatMessage, ...]
    dropped_messages: int  # conversation messages removed (a replaced breadcrumb is not one)
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    budget: int
    trimmed: bool
    first_kept_id: str | None  # first message of the first kept turn


def is_breadcrumb(message: ChatMessage) -> bool:
    return message.kind is MessageKind.TRIM_BREADCRUMB


def is_pinned(message: ChatMessage) -> bool:
    """Pinned head content: system prompts and compaction summaries."""
    if message.kind is MessageKind.COMPACTION_SUMMARY:
        return True
    return message.role == "system" and message.kind is MessageKind.CHAT


def make_breadcrumb(first_kept: ChatMessage) -> ChatMessage:
    # Deterministic id/ts so the same trim yields an equal projection every time.
    #
    # role="system": the breadcrumb sits directly after the pinned head, i.e.
    # inside the leading block of system messages. OpenAI-compatible APIs accept
    # system messages there, and the Anthropic adapter folds the leading system
    # block into its top-level `system` parameter, so user/assistant alternation
    # is untouched. A user-role marker would land right before the first kept
    # real user message: two user messages in a row (Anthropic merges or rejects
    # them) and the model would read the note as something the user said.
    return ChatMessage(
        id=f"breadcrumb:{first_kept.id}",
        role="system",
        content=BREADCRUMB_TEXT,
        ts=first_kept.ts,
        kind=MessageKind.TRIM_BREADCRUMB,
    )


def trim_fraction_target(estimate: int) -> int:
    """~2/3 of an estimate: the overflow ladder's trim target."""
    return max(0, estimate) * 2 // 3


def trim_to_budget(
    messages: Sequence[ChatMessage],
    budget: int,
    count: Callable[[Sequence[ChatMessage]], int],
) -> TrimResult:
    """Drop the oldest whole turns until ``count(result) <= budget``.

    ``count`` must be monotonic in dropped turns (removing messages never raises
    the count), which holds for any per-message sum; the search relies on it.
    Idempotent: trimming the output again with the same budget changes nothing.
    """
    original = tuple(messages)
    tokens_before = count(original)
    head, turns = split_turns(original)

    def unchanged() -> TrimResult:
        return TrimResult(
            messages=original,
            dropped_messages=0,
            dropped_turns=0,
            kept_turns=len(turns),
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            budget=budget,
            trimmed=False,
            first_kept_id=turns[0][0].id if turns else None,
        )

    # One turn (or none) leaves nothing droppable: the newest turn is kept whole.
    if tokens_before <= budget or len(turns) < 2:
        return unchanged()

    pinned = [m for m in head if is_pinned(m)]
    # A stale breadcrumb is replaced, and anything else non-pinned before the
    # first turn goes with the first turn.
    unpinned_head = sum(1 for m in head if not is_pinned(m) and not is_breadcrumb(m))
    # Breadcrumbs never belong inside turns; strip any so the output has one.
    clean_turns = [[m for m in t if not is_breadcrumb(m)] for t in turns]

    def candidate(dropped: int) -> tuple[ChatMessage, ...]:
        kept = clean_turns[dropped:]
        out = [*pinned, make_breadcrumb(kept[0][0])]
        for t in kept:
            out.extend(t)
        return tuple(out)

    # Smallest number of dropped turns in [1, n-1] that fits; n-1 (only the
    # newest turn left) if none does. Binary search: O(log n) count calls.
    lo, hi = 1, len(turns) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if count(candidate(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    dropped = lo
    out = candidate(dropped)
    return TrimResult(
        messages=out,
        dropped_messages=unpinned_head + sum(len(t) for t in clean_turns[:dropped]),
        dropped_turns=dropped,
        kept_turns=len(turns) - dropped,
        tokens_before=tokens_before,
        tokens_after=count(out),
        budget=budget,
        trimmed=True,
        first_kept_id=turns[dropped][0].id,
    )
