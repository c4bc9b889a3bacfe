"""Whole-turn trimming of the model-visible context.

A turn runs from a real user message up to the next one, so dropping whole
turns can never separate a tool call from its results. The pinned head
(system messages and compaction summaries before the first turn) is always
kept; the newest turn is always kept whole, even when it alone is over budget.

A trim starts only over the budget but cuts down to a lower ``target`` (the low-water
mark): every trim moves the start of the prompt, which costs the provider's prompt cache
the whole conversation, so it should buy room for many turns, not one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from netclaw.messages import ChatMessage, MessageKind, turn_starts

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
    target: int | None = None  # what a trim cut down to (None: the budget)


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
    count_message: Callable[[ChatMessage], int],
    fixed: int = 0,
    counts: Sequence[int] | None = None,
    *,
    target: int | None = None,
) -> TrimResult:
    """Over ``budget``: drop the oldest whole turns until the projection's tokens fit
    ``target`` (the low-water mark, at most ``budget``; default: the budget itself).

    The projection's tokens are ``fixed`` (priming, tool schemas) plus the sum of
    ``count_message`` over its messages. Each message is counted once and the
    cut is found with suffix sums, so a trim is one pass over the history.
    ``counts``, if given, are the messages' counts already computed (in order).
    A projection within the budget is never touched (however far above the target), so
    trimming the output again with the same budget and target changes nothing.
    """
    goal = budget if target is None else min(target, budget)
    original = tuple(messages)
    counts = list(map(count_message, original)) if counts is None else list(counts)
    tokens_before = fixed + sum(counts)
    starts = turn_starts(original)

    def unchanged() -> TrimResult:
        return TrimResult(
            messages=original,
            dropped_messages=0,
            dropped_turns=0,
            kept_turns=len(starts),
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            budget=budget,
            trimmed=False,
            first_kept_id=original[starts[0]].id if starts else None,
        )

    # One turn (or none) leaves nothing droppable: the newest turn is kept whole.
    if tokens_before <= budget or len(starts) < 2:
        return unchanged()

    head = original[: starts[0]]
    pinned = [m for m in head if is_pinned(m)]
    pinned_tokens = sum(n for m, n in zip(head, counts, strict=False) if is_pinned(m))
    # A stale breadcrumb is replaced, and anything else non-pinned before the
    # first turn goes with the first turn.
    unpinned_head = sum(1 for m in head if not is_pinned(m) and not is_breadcrumb(m))

    body = original[starts[0] :]
    body_counts = counts[starts[0] :]
    crumb = MessageKind.TRIM_BREADCRUMB
    if any(m.kind is crumb for m in body):  # never inside turns; strip so the output has one
        kept = [(m, n) for m, n in zip(body, body_counts, strict=True) if m.kind is not crumb]
        body = tuple(m for m, _ in kept)
        body_counts = [n for _, n in kept]
        body_starts = turn_starts(body)
    else:
        body_starts = [i - starts[0] for i in starts]

    # cum[i] = tokens of body[:i]; keeping turns k.. costs cum[-1] - cum[start_k]. The
    # cost falls as k grows, so the first k that fits is found by bisection over the
    # turn starts (drop at least one turn, at most all but the newest).
    cum = [0, *accumulate(body_counts)]
    crumb_tokens = count_message(make_breadcrumb(body[body_starts[-1]]))  # same text for every cut
    need = cum[-1] + fixed + pinned_tokens + crumb_tokens - goal  # cum[start_k] must reach this
    start_cums = [cum[i] for i in body_starts]
    dropped = min(max(bisect_left(start_cums, need), 1), len(body_starts) - 1)
    cut = body_starts[dropped]

    breadcrumb = make_breadcrumb(body[cut])
    out = (*pinned, breadcrumb, *body[cut:])
    return TrimResult(
        messages=out,
        dropped_messages=unpinned_head + cut,
        dropped_turns=dropped,
        kept_turns=len(body_starts) - dropped,
        tokens_before=tokens_before,
        tokens_after=fixed + pinned_tokens + crumb_tokens + cum[-1] - cum[cut],
        budget=budget,
        trimmed=True,
        first_kept_id=body[cut].id,
        target=goal,
    )
