from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.history import (
    TokenCounter,
    is_breadcrumb,
    make_breadcrumb,
    sweep_orphans,
    trim_to_budget,
)
from netclaw.messages import ChatMessage, MessageKind, Role, ToolCall, split_turns

TEXT = st.text(alphabet='abc xyz{}":0123\n', max_size=300)


@st.composite
def histories(draw: st.DrawFn) -> list[ChatMessage]:
    seq = iter(range(1_000_000))

    def mk(role: Role, content: str, **kw: Any) -> ChatMessage:
        n = next(seq)
        return ChatMessage(id=f"{role}{n}", role=role, content=content, ts=float(n), **kw)

    out = [mk("system", draw(TEXT)) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        out.append(mk("system", draw(TEXT), kind=MessageKind.COMPACTION_SUMMARY))
    for _ in range(draw(st.integers(0, 8))):
        out.append(mk("user", draw(TEXT)))
        for _ in range(draw(st.integers(0, 2))):  # tool rounds in this turn
            calls = tuple(
                ToolCall(id=f"call{next(seq)}", name="shell", arguments=draw(TEXT))
                for _ in range(draw(st.integers(1, 3)))
            )
            out.append(mk("assistant", draw(TEXT), tool_calls=calls))
            out.extend(mk("tool", draw(TEXT), tool_call_id=c.id, name=c.name) for c in calls)
        out.append(mk("assistant", draw(TEXT)))
    return out


@settings(max_examples=200, deadline=None)
@given(history=histories(), fraction=st.floats(0.0, 1.2))
def test_trim_invariants(history: list[ChatMessage], fraction: float) -> None:
    counter = TokenCounter()

    def count(ms: Sequence[ChatMessage]) -> int:
        return counter.estimate(ms)

    budget = int(count(history) * fraction)
    result = trim_to_budget(history, budget, counter.count_message, counter.fixed_overhead())
    out = result.messages
    head, turns = split_turns(history)
    out_head, out_turns = split_turns(out)

    # Never splits a tool call from its result.
    assert not sweep_orphans(out).changed
    # Whole turns only, the newest always kept whole.
    if turns:
        assert out_turns == turns[len(turns) - len(out_turns) :]
        assert out_turns[-1] == turns[-1]
    assert result.kept_turns == len(out_turns)
    assert result.dropped_turns == len(turns) - len(out_turns)
    # Fits, unless at most one turn remains.
    assert result.tokens_after == count(out)
    assert result.tokens_after <= budget or len(out_turns) <= 1
    # Drops no more than needed.
    if result.dropped_turns > 1:
        pinned = [m for m in head if m.role == "system"]
        one_more = turns[result.dropped_turns - 1 :]
        candidate = [*pinned, make_breadcrumb(one_more[0][0]), *[m for t in one_more for m in t]]
        assert count(candidate) > budget
    # Pinned head kept, in order, at the front; one breadcrumb right after it.
    pinned_head = [m for m in head if m.role == "system"]
    assert list(out[: len(pinned_head)]) == pinned_head
    breadcrumbs = [m for m in out if is_breadcrumb(m)]
    assert len(breadcrumbs) == (1 if result.trimmed else 0)
    if result.trimmed:
        assert out[len(pinned_head)] is breadcrumbs[0]
        assert out_head == [*pinned_head, breadcrumbs[0]]
        assert result.first_kept_id == out_turns[0][0].id
        assert result.dropped_messages == len(history) - len(out) + 1
    else:
        assert out == tuple(history)
    # Idempotent.
    again = trim_to_budget(out, budget, counter.count_message, counter.fixed_overhead())
    assert again.messages == out
    assert not again.trimmed


@settings(max_examples=200, deadline=None)
@given(history=histories(), first=st.floats(0.0, 1.0), second=st.floats(0.0, 1.0))
def test_retrim_never_stacks_breadcrumbs(history: list[ChatMessage], first: float, second: float) -> None:
    counter = TokenCounter()

    def count(ms: Sequence[ChatMessage]) -> int:
        return counter.estimate(ms)

    once = trim_to_budget(
        history, int(count(history) * first), counter.count_message, counter.fixed_overhead()
    )
    twice = trim_to_budget(
        once.messages, int(count(once.messages) * second), counter.count_message, counter.fixed_overhead()
    )
    assert sum(is_breadcrumb(m) for m in twice.messages) <= 1
    assert not sweep_orphans(twice.messages).changed
    _, turns = split_turns(history)
    _, out_turns = split_turns(twice.messages)
    if turns:
        assert out_turns[-1] == turns[-1]


@settings(max_examples=200, deadline=None)
@given(history=histories(), fraction=st.floats(0.0, 1.2), low_water=st.floats(0.05, 1.0))
def test_a_trim_cuts_to_the_low_water_mark_and_only_over_the_budget(
    history: list[ChatMessage], fraction: float, low_water: float
) -> None:
    counter = TokenCounter()

    def count(ms: Sequence[ChatMessage]) -> int:
        return counter.estimate(ms)

    fixed = counter.fixed_overhead()
    budget = int(count(history) * fraction)
    target = int(budget * low_water)
    result = trim_to_budget(history, budget, counter.count_message, fixed, target=target)
    out = result.messages
    head, turns = split_turns(history)
    _, out_turns = split_turns(out)

    # Within the budget nothing moves, however far above the low-water mark it is.
    if count(history) <= budget:
        assert not result.trimmed and out == tuple(history)
    # A trim ends at or under the low-water mark (unless only the newest turn is left)...
    if result.trimmed:
        assert result.target == target
        assert result.tokens_after == count(out)
        assert result.tokens_after <= target or len(out_turns) <= 1
        # ... and drops no more than reaching it needs.
        if result.dropped_turns > 1:
            pinned = [m for m in head if m.role == "system"]
            one_more = turns[result.dropped_turns - 1 :]
            candidate = [*pinned, make_breadcrumb(one_more[0][0]), *[m for t in one_more for m in t]]
            assert count(candidate) > target
    # Still whole turns, the newest kept, nothing split.
    assert not sweep_orphans(out).changed
    if turns:
        assert out_turns == turns[len(turns) - len(out_turns) :]
    # Hysteresis: the trimmed projection is under the budget, so the next call leaves it be.
    again = trim_to_budget(out, budget, counter.count_message, fixed, target=target)
    assert again.messages == out and not again.trimmed
