"""Untrusted content (pure): a label wraps outside text so that it cannot close itself
early; an error keeps its ``error: `` outside the label; a turn has met untrusted content
once labelled text is in a tool result or in the input that started it (a sub-agent's
report) — and journals written before tools labelled by themselves still count their
results by the tool's name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from netclaw.messages import ChatMessage
from netclaw.security.trust import is_labelled, label, label_result, read_untrusted, unlabel


def user(mid: str, text: str = "hi") -> ChatMessage:
    return ChatMessage(mid, "user", text, 0.0)


def tool(name: str, content: str = "x", *, mid: str = "t", is_error: bool = False) -> ChatMessage:
    return ChatMessage(mid, "tool", content, 0.0, tool_call_id="c", name=name, is_error=is_error)


@given(st.text(), st.text(alphabet=st.characters(blacklist_characters='"'), max_size=30))
def test_a_label_holds_any_content_and_is_recognised(content: str, source: str) -> None:
    wrapped = label(source, content)
    assert is_labelled(wrapped) and unlabel(wrapped) == content
    failed = label_result(source, f"error: {content}", True)
    assert failed.startswith("error: <untrusted-content ") and is_labelled(failed)
    assert unlabel(failed) == f"error: {content}"
    assert is_labelled(f"[netclaw: report …]\n{wrapped}")


@given(st.text())
def test_words_after_a_label_are_not_labelled_text(content: str) -> None:
    assert not is_labelled(label("x", content) + "\nand netclaw's words after it")


def test_look_alike_labels_cost_linear_time() -> None:
    forged = '<untrusted-content source="" id="abcdabcd">\n' * 20_000
    assert not is_labelled(forged)
    assert is_labelled(label("shell", forged))


def test_a_result_that_is_not_an_error_is_labelled_whole() -> None:
    assert label_result("shell", "error: it said so", False).startswith('<untrusted-content source="shell"')


def test_labelled_results_mark_the_turn_from_then_on() -> None:
    start, later = user("u1"), user("u2")
    assert read_untrusted((start, tool("list_dir", label("list_dir", "a.txt"))), "u1")
    assert read_untrusted((start, tool("shell", label_result("shell", "error: timed out: x", True))), "u1")
    assert not read_untrusted((start, tool("current_time", "12:00")), "u1")
    # Labelled content before the turn started is another turn's business.
    assert not read_untrusted((start, tool("list_dir", label("list_dir", "a"), mid="t1"), later), "u2")


def test_a_turn_started_by_labelled_input_has_met_untrusted_content() -> None:
    report = user(
        "u1", "[netclaw: report from your sub-agent agent:cli:x/1 …]\n" + label("agent:cli:x/1", "go")
    )
    assert read_untrusted((report,), "u1")
    assert not read_untrusted((user("u1", "[netclaw: report …; it did not finish: failed: boom]"),), "u1")


def test_journals_from_before_tools_said_so_count_by_name() -> None:
    start = user("u1")
    for name in ("web_fetch", "web_search", "read_file", "shell", "docs__read"):
        assert read_untrusted((start, tool(name, "unlabelled", is_error=True)), "u1"), name
    assert not read_untrusted((start, tool("list_dir", "unlabelled")), "u1")
