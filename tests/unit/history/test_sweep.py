from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.history import INTERRUPTED_TEXT, sweep_orphans, well_formed_after
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


# Messages a history is made of, well formed or not: calls with and without their results,
# results out of place, a call id used twice.
_PIECES = st.lists(
    st.one_of(
        st.builds(lambda n: m(f"u{n}", "user"), st.integers(0, 5)),
        st.builds(lambda c: [call(f"c{c}", id=f"a{c}"), result(f"c{c}")], st.integers(0, 6)),
        st.builds(lambda c: call(f"c{c}", id=f"a{c}"), st.integers(0, 6)),
        st.builds(lambda c: result(f"c{c}"), st.integers(0, 6)),
        st.builds(
            lambda c, d: [call(f"c{c}", f"d{d}", id=f"b{c}"), result(f"c{c}"), result(f"d{d}")],
            st.integers(0, 6),
            st.integers(0, 6),
        ),
    ),
    max_size=12,
)


def _flat(pieces: list[Any]) -> list[ChatMessage]:
    return [x for p in pieces for x in (p if isinstance(p, list) else [p])]


@settings(max_examples=400, deadline=None)
@given(_PIECES, _PIECES)
def test_checking_only_what_was_added_agrees_with_checking_it_all(first: list[Any], then: list[Any]) -> None:
    before, after = _flat(first), _flat(first) + _flat(then)
    whole = well_formed_after(after, 0, frozenset())
    known = well_formed_after(before, 0, frozenset())
    if known is not None:  # a well-formed start: the rest checked from where it ended
        assert well_formed_after(after, len(before), known) == whole
    if whole is not None:  # what the prompt builder then skips: the sweep would change nothing
        assert not sweep_orphans(after).changed
