from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from netclaw.history import INTERRUPTED_TEXT, sweep_orphans
from netclaw.messages import ChatMessage, ToolCall


def m(id: str, role: Any, content: str = "", **kw: Any) -> ChatMessage:
    return ChatMessage(id=id, role=role, content=content or id, ts=1.0, **kw)


def call(*call_ids: str, id: str = "a") -> ChatMessage:
    calls = tuple(ToolCall(id=c, name=f"tool_{c}", arguments="{}") for c in call_ids)
    return m(id, "assistant", tool_calls=calls)


def result(call_id: str, id: str | None = None) -> ChatMessage:
    return m(id or f"r_{call_id}", "tool", tool_call_id=call_id, name=f"tool_{call_id}")


def ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [x.id for x in messages]


def test_well_formed_history_is_unchanged() -> None:
    history = [m("s", "system"), m("u", "user"), call("c1", "c2"), result("c1"), result("c2")]
    swept = sweep_orphans(history)
    assert not swept.changed
    assert swept.messages == tuple(history)
    assert swept.removed_results == swept.synthesized == ()


def test_orphan_result_is_removed() -> None:
    history = [m("u", "user"), result("ghost"), call("c1"), result("c1"), m("f", "assistant")]
    swept = sweep_orphans(history)
    assert swept.changed
    assert ids(swept.messages) == ["u", "a", "r_c1", "f"]
    assert swept.removed_results == ("ghost",)


def test_result_before_its_call_is_an_orphan() -> None:
    history = [m("u", "user"), result("c1", id="early"), call("c1"), result("c1")]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u", "a", "r_c1"]
    assert swept.removed_results == ("c1",)


def test_missing_result_is_synthesized_adjacent_in_call_order() -> None:
    history = [m("u", "user"), call("c1", "c2", "c3"), result("c1"), result("c3"), m("u2", "user")]
    swept = sweep_orphans(history)
    assert swept.changed
    assert swept.synthesized == ("c2",)
    assert ids(swept.messages) == ["u", "a", "r_c1", "synthetic:c2", "r_c3", "u2"]
    synthetic = swept.messages[3]
    assert synthetic.role == "tool"
    assert synthetic.tool_call_id == "c2"
    assert synthetic.name == "tool_c2"
    assert synthetic.is_error
    assert synthetic.content == INTERRUPTED_TEXT
    # Sweeping the repaired history is a no-op.
    assert not sweep_orphans(swept.messages).changed


def test_trailing_call_without_results_gets_them() -> None:
    history = [m("u", "user"), call("c1", "c2")]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u", "a", "synthetic:c1", "synthetic:c2"]


def test_drifted_result_moves_next_to_its_call() -> None:
    history = [m("u", "user"), call("c1", "c2"), result("c2"), m("u2", "user"), result("c1")]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u", "a", "r_c1", "r_c2", "u2"]
    assert swept.changed
    assert swept.removed_results == swept.synthesized == ()


def test_duplicate_result_keeps_the_first() -> None:
    history = [m("u", "user"), call("c1"), result("c1", id="one"), result("c1", id="two")]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u", "a", "one"]
    assert swept.removed_results == ("c1",)


def test_id_in_prose_is_not_a_call() -> None:
    history = [
        m("u", "user", "please look at call c9"),
        m("a", "assistant", "I will run tool call c9 now"),
        result("c9"),
    ]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u", "a"]
    assert swept.removed_results == ("c9",)


def test_never_empty() -> None:
    history = [result("x"), result("y")]
    swept = sweep_orphans(history)
    assert len(swept.messages) == 1
    assert swept.messages[0].id == "r_y"
    assert sweep_orphans([]).messages == ()
    assert not sweep_orphans([]).changed


def test_user_message_survives_when_all_tool_messages_go() -> None:
    history = [m("u", "user"), result("x"), result("y")]
    swept = sweep_orphans(history)
    assert ids(swept.messages) == ["u"]
