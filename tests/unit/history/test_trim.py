from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from netclaw.history import (
    BREADCRUMB_TEXT,
    TokenCounter,
    is_breadcrumb,
    sweep_orphans,
    trim_fraction_target,
    trim_to_budget,
)
from netclaw.messages import ChatMessage, MessageKind, ToolCall

UNIT = 10  # every message costs the same, so budgets read as message counts


def count(message: ChatMessage) -> int:
    return UNIT


def total(messages: Sequence[ChatMessage]) -> int:
    return UNIT * len(messages)


def m(id: str, role: Any, content: str = "", **kw: Any) -> ChatMessage:
    return ChatMessage(id=id, role=role, content=content or id, ts=float(len(id)), **kw)


def sys(id: str = "sys") -> ChatMessage:
    return m(id, "system", "You are helpful.")


def simple_turn(n: int) -> list[ChatMessage]:
    return [m(f"u{n}", "user"), m(f"a{n}", "assistant")]


def tool_turn(n: int, calls: int) -> list[ChatMessage]:
    ids = [f"c{n}_{i}" for i in range(calls)]
    call_msg = m(
        f"a{n}",
        "assistant",
        tool_calls=tuple(ToolCall(id=c, name="shell", arguments="{}") for c in ids),
    )
    results = [m(f"r{n}_{i}", "tool", tool_call_id=c, name="shell") for i, c in enumerate(ids)]
    return [m(f"u{n}", "user"), call_msg, *results, m(f"f{n}", "assistant")]


def ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [x.id for x in messages]


def test_under_budget_is_untouched() -> None:
    history = [sys(), *simple_turn(1), *simple_turn(2)]
    result = trim_to_budget(history, 50, count)
    assert result.messages == tuple(history)
    assert not result.trimmed
    assert result.tokens_before == result.tokens_after == 50
    assert (result.dropped_turns, result.dropped_messages, result.kept_turns) == (0, 0, 2)
    assert result.first_kept_id == "u1"


def test_drops_oldest_turns_keeps_system_and_newest() -> None:
    history = [sys(), *simple_turn(1), *simple_turn(2), *simple_turn(3), *simple_turn(4)]
    result = trim_to_budget(history, 60, count)
    assert result.trimmed
    assert ids(result.messages) == ["sys", "breadcrumb:u3", "u3", "a3", "u4", "a4"]
    bc = result.messages[1]
    assert is_breadcrumb(bc) and bc.content == BREADCRUMB_TEXT
    assert bc.ts == history[5].ts  # deterministic: the first kept message's ts
    assert result.dropped_turns == 2
    assert result.kept_turns == 2
    assert result.dropped_messages == 4
    assert result.tokens_before == 90
    assert result.tokens_after == 60
    assert result.budget == 60
    assert result.first_kept_id == "u3"


def test_breadcrumb_tokens_count_toward_budget() -> None:
    history = [sys(), *simple_turn(1), *simple_turn(2), *simple_turn(3)]
    # sys + u2..a3 is 50 and would fit without a breadcrumb; with it, it does not.
    result = trim_to_budget(history, 50, count)
    assert ids(result.messages) == ["sys", "breadcrumb:u3", "u3", "a3"]
    assert result.tokens_after <= 50


def test_tool_heavy_newest_turn_over_budget_is_kept_whole() -> None:
    newest = tool_turn(2, calls=3)
    history = [sys(), *simple_turn(1), *newest]
    result = trim_to_budget(history, 30, count)
    assert result.trimmed
    assert ids(result.messages) == ["sys", "breadcrumb:u2", *ids(newest)]
    assert result.tokens_after > result.budget
    assert result.kept_turns == 1
    assert not sweep_orphans(result.messages).changed


def test_single_turn_over_budget_is_unchanged() -> None:
    history = [sys(), *tool_turn(1, calls=3)]
    result = trim_to_budget(history, 10, count)
    assert result.messages == tuple(history)
    assert not result.trimmed
    assert result.kept_turns == 1


def test_tool_results_never_start_a_turn() -> None:
    middle = tool_turn(2, calls=3)  # u2, a2, r2_0, r2_1, r2_2, f2
    history = [sys(), *simple_turn(1), *middle, *simple_turn(3)]
    # Room for sys + breadcrumb + [r2_1, r2_2, f2] + turn 3 (70) — a cut at a tool
    # result would fit, but the whole middle turn (100) does not.
    result = trim_to_budget(history, 70, count)
    assert ids(result.messages) == ["sys", "breadcrumb:u3", "u3", "a3"]
    assert result.dropped_turns == 2
    assert result.kept_turns == 1
    assert not sweep_orphans(result.messages).changed


def test_breadcrumb_once_after_all_leading_system_messages() -> None:
    summary = m("summary", "system", "Summary so far.", kind=MessageKind.COMPACTION_SUMMARY)
    head = [sys("sys1"), sys("sys2"), summary]
    turns = [x for n in range(1, 6) for x in simple_turn(n)]
    history = [*head, *turns]

    first = trim_to_budget(history, 100, count)
    assert ids(first.messages)[:4] == ["sys1", "sys2", "summary", "breadcrumb:u3"]
    assert first.kept_turns == 3

    again = trim_to_budget(first.messages, 80, count)
    assert ids(again.messages) == [
        "sys1",
        "sys2",
        "summary",
        "breadcrumb:u4",
        "u4",
        "a4",
        "u5",
        "a5",
    ]
    assert sum(is_breadcrumb(x) for x in again.messages) == 1
    # The old breadcrumb is neither a turn nor a dropped conversation message.
    assert again.dropped_turns == 1
    assert again.kept_turns == 2
    assert again.dropped_messages == 2


def test_retrim_with_same_budget_is_noop() -> None:
    history = [sys(), *tool_turn(1, 2), *tool_turn(2, 1), *simple_turn(3), *tool_turn(4, 2)]
    first = trim_to_budget(history, 110, count)
    assert first.trimmed
    again = trim_to_budget(first.messages, 110, count)
    assert not again.trimmed
    assert again.messages == first.messages


def test_stale_breadcrumb_in_head_is_replaced_not_stacked() -> None:
    old = ChatMessage(
        id="breadcrumb:u0",
        role="system",
        content=BREADCRUMB_TEXT,
        ts=0.0,
        kind=MessageKind.TRIM_BREADCRUMB,
    )
    history = [sys(), old, *simple_turn(1), *simple_turn(2), *simple_turn(3)]
    result = trim_to_budget(history, 40, count)
    assert ids(result.messages) == ["sys", "breadcrumb:u3", "u3", "a3"]
    assert result.dropped_messages == 4


def test_user_message_with_breadcrumb_text_is_a_real_turn() -> None:
    fake = m("u2", "user", BREADCRUMB_TEXT)
    history = [sys(), *simple_turn(1), fake, m("a2", "assistant"), *simple_turn(3)]
    untouched = trim_to_budget(history, 1000, count)
    assert untouched.kept_turns == 3

    result = trim_to_budget(history, 60, count)
    assert ids(result.messages) == ["sys", "breadcrumb:u2", "u2", "a2", "u3", "a3"]
    assert result.kept_turns == 2
    assert result.dropped_turns == 1

    # On a re-trim the look-alike is still a turn (and still trimmable as one).
    again = trim_to_budget(result.messages, 40, count)
    assert ids(again.messages) == ["sys", "breadcrumb:u3", "u3", "a3"]
    assert again.dropped_turns == 1


def test_history_without_user_message_is_unchanged() -> None:
    history = [sys(), m("a1", "assistant"), m("a2", "assistant"), m("a3", "assistant")]
    result = trim_to_budget(history, 10, count)
    assert result.messages == tuple(history)
    assert not result.trimmed
    assert result.kept_turns == 0
    assert result.first_kept_id is None


def test_unpinned_head_messages_go_with_the_first_turn() -> None:
    greeting = m("hello", "assistant", "Hi! How can I help?")
    history = [sys(), greeting, *simple_turn(1), *simple_turn(2), *simple_turn(3)]
    result = trim_to_budget(history, 60, count)
    assert ids(result.messages) == ["sys", "breadcrumb:u2", "u2", "a2", "u3", "a3"]
    assert result.dropped_messages == 3  # greeting + u1 + a1


def test_with_real_token_counter() -> None:
    counter = TokenCounter()

    def real(ms: Sequence[ChatMessage]) -> int:
        return counter.estimate(ms)

    long = "lorem ipsum dolor sit amet " * 50
    roles = {"u": "user", "a": "assistant"}
    history = [sys(), *[m(f"{r}{n}", roles[r], long) for n in range(10) for r in roles]]
    budget = real(history) // 2
    result = trim_to_budget(history, budget, counter.count_message, counter.fixed_overhead())
    assert result.trimmed
    assert result.tokens_after <= budget
    assert result.tokens_after == real(result.messages)
    # Minimal: keeping one more turn would not fit.
    last_dropped = history[1 + 2 * (result.dropped_turns - 1) :][:2]
    assert result.tokens_after + sum(counter.count_message(x) for x in last_dropped) > budget


def test_trim_fraction_target() -> None:
    assert trim_fraction_target(900) == 600
    assert trim_fraction_target(10) == 6
    assert trim_fraction_target(0) == 0
