"""Orphan sweep: the safety net run before every provider call.

Providers reject a tool result without its call and a call without its
result. After a crash, an interrupted tool batch or a bad journal, either can
appear; the sweep repairs the projection (never the stored record) so the
conversation can continue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netclaw.messages import ChatMessage

INTERRUPTED_TEXT = "[tool result unavailable: the call was interrupted]"


@dataclass(frozen=True, slots=True)
class SweepResult:
    messages: tuple[ChatMessage, ...]
    removed_results: tuple[str, ...]  # tool_call_ids of removed results ("" if it had none)
    synthesized: tuple[str, ...]  # call ids that got a synthetic result
    changed: bool


def synthetic_result(call_id: str, name: str, ts: float) -> ChatMessage:
    # Deterministic id: sweeping the same history twice gives equal output.
    return ChatMessage(
        id=f"synthetic:{call_id}",
        role="tool",
        content=INTERRUPTED_TEXT,
        ts=ts,
        tool_call_id=call_id,
        name=name,
        is_error=True,
    )


def _well_formed(messages: Sequence[ChatMessage]) -> bool:
    """Every assistant tool call answered right after it, in order; no other tool results."""
    return well_formed_after(messages, 0, frozenset()) is not None


def well_formed_after(
    messages: Sequence[ChatMessage], start: int, seen: frozenset[str]
) -> frozenset[str] | None:
    """Whether ``messages`` is well formed (see ``_well_formed``), given that
    ``messages[:start]`` was, answering the calls ``seen``: the calls answered in all of it,
    or None. A well-formed list ends where a call block ends, so the check can go on from
    there: a caller that keeps a growing history checks only what is new."""
    answered = set(seen)
    i, n = start, len(messages)
    while i < n:
        m = messages[i]
        i += 1
        if m.role == "tool":
            return None
        if m.tool_calls:
            for call in m.tool_calls:
                if i >= n:
                    return None
                r = messages[i]
                if r.role != "tool" or r.tool_call_id != call.id or call.id in answered:
                    return None
                answered.add(call.id)
                i += 1
    return frozenset(answered) if len(answered) != len(seen) else seen


def sweep_orphans(messages: Sequence[ChatMessage]) -> SweepResult:
    """Make every tool call answered and every tool result answer a call.

    Output shape: each assistant message with tool calls is followed
    immediately by one result per call, in call order. A result is kept only if
    an *earlier* assistant message issued its call id (ids mentioned in content
    do not count); it is moved next to that call if it drifted. Duplicate
    results keep the first. A call with no result gets a synthetic error result.
    """
    original = tuple(messages)
    if _well_formed(original):  # the normal case: one tight pass, nothing to do
        return SweepResult(messages=original, removed_results=(), synthesized=(), changed=False)

    owner: dict[str, int] = {}  # call id -> index of the first assistant issuing it
    results: dict[str, ChatMessage] = {}
    removed: list[str] = []
    for i, m in enumerate(original):
        if m.role == "assistant":
            for call in m.tool_calls:
                owner.setdefault(call.id, i)
        elif m.role == "tool":
            cid = m.tool_call_id
            if cid is not None and cid in owner and cid not in results:
                results[cid] = m
            else:
                removed.append(cid or "")

    out: list[ChatMessage] = []
    synthesized: list[str] = []
    emitted: set[str] = set()
    for i, m in enumerate(original):
        if m.role == "tool":
            continue  # placed right after its assistant message below
        out.append(m)
        if m.role != "assistant":
            continue
        for call in m.tool_calls:
            if call.id in emitted or owner.get(call.id) != i:
                continue  # a repeated call id: answered once, at its first issue
            emitted.add(call.id)
            found = results.get(call.id)
            if found is None:
                found = synthetic_result(call.id, call.name, m.ts)
                synthesized.append(call.id)
            out.append(found)

    if not out and original:
        # Only non-tool messages are always kept, so this means the input was
        # nothing but orphan tool results (no user message to fall back to).
        # An empty prompt helps nobody: keep the last message as it was.
        out = [original[-1]]

    changed = len(out) != len(original) or any(a is not b for a, b in zip(out, original, strict=True))
    return SweepResult(
        messages=tuple(out),
        removed_results=tuple(removed),
        synthesized=tuple(synthesized),
        changed=changed,
    )
