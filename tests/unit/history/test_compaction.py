from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.history import (
    FLUSH_KINDS,
    FLUSH_MARKER,
    MEMORY_KINDS,
    REQUIRED_SECTIONS,
    SUMMARY_MARKER,
    TokenCounter,
    apply_clearing,
    bound_summary,
    clearable_results,
    flush_request,
    missing_sections,
    parse_flush,
    placeholder,
    render_for_summary,
    summary_boundary,
    summary_message,
    summary_request,
    sweep_orphans,
)
from netclaw.history.compaction import TRIMMED_NOTE
from netclaw.messages import ChatMessage, MessageKind, Role, ToolCall, split_turns, turn_starts


def m(id: str, role: Role, content: str = "", **kw: Any) -> ChatMessage:
    return ChatMessage(id=id, role=role, content=content or id, ts=1.0, **kw)


def call(id: str, *call_ids: str) -> ChatMessage:
    calls = tuple(ToolCall(id=c, name=f"tool_{c}", arguments='{"x": 1}') for c in call_ids)
    return m(id, "assistant", tool_calls=calls)


def result(call_id: str, content: str = "") -> ChatMessage:
    return m(
        f"r_{call_id}",
        "tool",
        content or f"output of {call_id}",
        tool_call_id=call_id,
        name=f"tool_{call_id}",
    )


def interaction(id: str, *call_ids: str) -> list[ChatMessage]:
    return [call(id, *call_ids), *(result(c) for c in call_ids)]


def ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [x.id for x in messages]


def one_each(_: ChatMessage) -> int:
    return 1


def tool_history() -> list[ChatMessage]:
    return [
        m("u1", "user"),
        *interaction("a1", "c1", "c2"),
        m("f1", "assistant"),
        m("u2", "user"),
        *interaction("a2", "c3"),
        *interaction("a3", "c4", "c5"),
        m("f2", "assistant"),
        m("u3", "user"),
        *interaction("a4", "c6"),
    ]


# --------------------------------------------------------------------------- phase 1


def test_clearable_keeps_recent_interactions_and_lists_oldest_first() -> None:
    history = tool_history()
    assert clearable_results(history, 2, ()) == ["c1", "c2", "c3"]
    assert clearable_results(history, 1, ()) == ["c1", "c2", "c3", "c4", "c5"]
    assert clearable_results(history, 0, ()) == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert clearable_results(history, 4, ()) == []
    assert clearable_results(history, 10, ()) == []  # more than there are: keep all


def test_clearable_excludes_already_cleared() -> None:
    history = tool_history()
    assert clearable_results(history, 1, {"c1", "c3"}) == ["c2", "c4", "c5"]
    # After applying, the placeholders are not listed again even without the set.
    cleared = apply_clearing(history, clearable_results(history, 1, ()))
    assert clearable_results(cleared, 1, ()) == []
    assert clearable_results(cleared, 0, ()) == ["c6"]


def test_placeholder_has_new_id_and_keeps_the_pair() -> None:
    original = m("r9", "tool", "x" * 500, tool_call_id="c9", name="shell", is_error=True)
    ph = placeholder(original)
    assert ph.id == "cleared:r9" != original.id
    assert ph.role == "tool"
    assert (ph.tool_call_id, ph.name, ph.is_error, ph.ts) == ("c9", "shell", True, original.ts)
    assert ph.content == "[tool result cleared by compaction: shell (call c9)]"
    counter = TokenCounter()
    assert counter.count_message(ph) < counter.count_message(original)


def test_apply_clearing_keeps_other_messages_and_pairs_intact() -> None:
    history = tool_history()
    cleared_ids = clearable_results(history, 2, ())
    out = apply_clearing(history, cleared_ids)
    assert len(out) == len(history)
    for before, after in zip(history, out, strict=True):
        if before.role == "tool" and before.tool_call_id in cleared_ids:
            assert after.id == f"cleared:{before.id}"
            assert after.tool_call_id == before.tool_call_id
        else:
            assert after is before
    assert not sweep_orphans(out).changed
    # Idempotent: no "cleared:cleared:" ids.
    again = apply_clearing(out, cleared_ids)
    assert all(a is b for a, b in zip(out, again, strict=True))


# --------------------------------------------------------------------------- boundary


def test_boundary_is_a_real_user_message_and_keeps_the_newest_turn() -> None:
    history = tool_history()  # turns start at 0, 5, 12; 15 messages
    assert turn_starts(history) == [0, 5, 12] and len(history) == 15
    assert summary_boundary(history, 3, one_each) == 12  # only the newest turn fits
    assert summary_boundary(history, 9, one_each) == 12
    assert summary_boundary(history, 0, one_each) == 12  # nothing fits: newest turn still kept
    assert summary_boundary(history, 10, one_each) == 5
    assert summary_boundary(history, 14, one_each) == 5
    assert summary_boundary(history, 15, one_each) is None  # all fits
    for keep in range(20):
        b = summary_boundary(history, keep, one_each)
        if b is not None:
            assert history[b].is_real_user
            assert not sweep_orphans(history[b:]).changed
            assert not sweep_orphans(history[:b]).changed


def test_boundary_none_for_one_turn_or_none() -> None:
    assert (
        summary_boundary([m("u", "user"), *interaction("a", "c1"), m("f", "assistant")], 0, one_each) is None
    )
    assert summary_boundary([], 0, one_each) is None
    assert summary_boundary([m("x", "assistant")], 0, one_each) is None


def test_boundary_skips_markers_and_never_splits_a_drifted_pair() -> None:
    crumb = m("b", "user", kind=MessageKind.TRIM_BREADCRUMB)  # not a turn start
    history = [m("u1", "user"), m("f1", "assistant"), crumb, m("u2", "user"), m("f2", "assistant")]
    assert summary_boundary(history, 0, one_each) == 3
    # A malformed history where a result drifted past the next user message:
    # cutting at u2 would orphan r_c1, so the only safe cut is u3.
    drifted = [
        m("u1", "user"),
        call("a1", "c1"),
        m("u2", "user"),
        result("c1"),
        m("f2", "assistant"),
        m("u3", "user"),
        m("f3", "assistant"),
    ]
    assert summary_boundary(drifted, 100, lambda x: 10) is None  # all fits
    assert summary_boundary(drifted, 30, lambda x: 10) == 5
    assert summary_boundary(drifted, 0, lambda x: 10) == 5
    # If the newest turn itself is glued to older ones, nothing can be cut.
    glued = [m("u1", "user"), call("a1", "c1"), m("u2", "user"), result("c1")]
    assert summary_boundary(glued, 0, one_each) is None


TEXT = st.text(alphabet='abc xyz{}":0123\n', max_size=200)


@st.composite
def histories(draw: st.DrawFn) -> list[ChatMessage]:
    seq = iter(range(1_000_000))

    def mk(role: Role, content: str, **kw: Any) -> ChatMessage:
        n = next(seq)
        return ChatMessage(id=f"{role}{n}", role=role, content=content, ts=float(n), **kw)

    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(mk("system", "", kind=MessageKind.TRIM_BREADCRUMB))
    for _ in range(draw(st.integers(0, 8))):
        out.append(mk("user", draw(TEXT)))
        for _ in range(draw(st.integers(0, 3))):  # tool rounds in this turn
            calls = tuple(
                ToolCall(id=f"call{next(seq)}", name="shell", arguments=draw(TEXT))
                for _ in range(draw(st.integers(1, 3)))
            )
            out.append(mk("assistant", draw(TEXT), tool_calls=calls))
            out.extend(mk("tool", draw(TEXT), tool_call_id=c.id, name=c.name) for c in calls)
        if draw(st.booleans()):
            out.append(mk("assistant", draw(TEXT)))
    return out


@settings(max_examples=300, deadline=None)
@given(history=histories(), fraction=st.floats(0.0, 1.2), keep_recent=st.integers(0, 4))
def test_boundary_properties(history: list[ChatMessage], fraction: float, keep_recent: int) -> None:
    counter = TokenCounter()
    # Clearing first, as the session does, must not disturb the boundary's guarantees.
    history = apply_clearing(history, clearable_results(history, keep_recent, ()))
    assert not sweep_orphans(history).changed
    starts = turn_starts(history)
    total = sum(map(counter.count_message, history[starts[0] :])) if starts else 0
    keep = int(total * fraction)
    b = summary_boundary(history, keep, counter.count_message)
    if b is None:
        assert len(starts) < 2 or total <= keep
        return
    assert b in starts[1:]  # a turn start, with something older to summarise
    kept = history[b:]
    assert not sweep_orphans(kept).changed
    assert not sweep_orphans(history[:b]).changed
    kept_tokens = sum(map(counter.count_message, kept))
    assert kept_tokens <= keep or b == starts[-1]
    _, turns = split_turns(history)
    assert split_turns(kept)[1][-1] == turns[-1]
    # Keeps as much as fits: one more turn would not.
    previous = starts[starts.index(b) - 1]
    assert sum(map(counter.count_message, history[previous:])) > keep


# --------------------------------------------------------------------------- transcript


def test_render_for_summary_formats_and_truncates() -> None:
    history = [
        m("crumb", "system", "[earlier turns omitted]", kind=MessageKind.TRIM_BREADCRUMB),
        m("u1", "user", "please fix /etc/app.conf"),
        call("a1", "c1"),
        result("c1", "A" * 5000),
        placeholder(result("c2")),
        m("f", "assistant", "done"),
    ]
    text = render_for_summary(history)
    assert "earlier turns omitted" not in text
    assert "User: please fix /etc/app.conf" in text
    assert 'Assistant called tool tool_c1({"x": 1})' in text
    assert "Tool tool_c1 (call c1) returned: " in text
    assert re.search(r"\[… \d+ chars omitted …\]", text)
    assert len(text) < 3000
    assert "Tool tool_c2 (call c2) returned: [result cleared earlier]" in text
    assert "Assistant: done" in text


# --------------------------------------------------------------------------- phase 2


def test_flush_request_has_marker_and_transcript() -> None:
    req = flush_request([m("u1", "user", "my name is Ada"), m("f", "assistant", "hi Ada")])
    assert [x.role for x in req] == ["system", "user"]
    assert FLUSH_MARKER in req[0].content
    assert SUMMARY_MARKER not in req[0].content
    for kind in FLUSH_KINDS:
        assert kind in req[0].content
    assert "JSON array" in req[0].content
    assert "User: my name is Ada" in req[1].content


def test_parse_flush_fenced_json() -> None:
    text = '```json\n[{"text": "User prefers tabs", "kind": "preference"}]\n```'
    assert parse_flush(text) == [("User prefers tabs", "preference")]


def test_parse_flush_prose_wrapped_and_bracketed_prose() -> None:
    text = (
        "Sure [1]! Here are the memories:\n"
        '[{"text": "Deploy target is prod-eu-1", "kind": "fact", "tags": ["x"]},\n'
        ' {"text": "Rotate key k-42 by Friday", "kind": "action item"}]\n'
        "Let me know [if] you need more."
    )
    assert parse_flush(text) == [
        ("Deploy target is prod-eu-1", "fact"),
        ("Rotate key k-42 by Friday", "action_item"),
    ]


def test_parse_flush_object_wrapper() -> None:
    text = '{"memories": [{"text": "Uses Postgres 16", "kind": "decision"}]}'
    assert parse_flush(text) == [("Uses Postgres 16", "decision")]


@pytest.mark.parametrize(
    "text",
    ["", "no memories here", "[", "[{]", '[{"text": "a"', "[1, 2, 3]", '["just strings"]', "[" * 5000, "{}"],
)
def test_parse_flush_garbage_gives_empty(text: str) -> None:
    assert parse_flush(text) == []


def test_parse_flush_normalises_kinds_items_and_caps() -> None:
    items: list[Any] = [
        {"text": "  A   fact\n with   spaces ", "kind": "weird"},
        {"text": "a fact with spaces", "kind": "decision"},  # duplicate, case-insensitive
        {"text": "", "kind": "fact"},
        {"kind": "fact"},
        {"text": 42},
        "not an object",
        {"text": "Likes dark mode", "kind": "Preferences"},
        {"text": "Chose SQLite", "kind": None},
        {"text": "x" * 2000, "kind": "fact"},
    ]
    out = parse_flush(json.dumps(items))
    assert out[0] == ("A fact with spaces", "fact")
    assert ("Likes dark mode", "preference") in out
    assert ("Chose SQLite", "fact") in out
    assert len(out) == 4
    assert all(kind in MEMORY_KINDS for _, kind in out)
    assert len(out[-1][0]) <= 500
    many = [{"text": f"memory {i}", "kind": "fact"} for i in range(50)]
    assert len(parse_flush(json.dumps(many))) == 20


# --------------------------------------------------------------------------- phase 3


def full_summary(body: str = "- something") -> str:
    return "\n\n".join(f"## {s}\n{body}" for s in REQUIRED_SECTIONS)


def test_missing_sections_complete_summary() -> None:
    assert missing_sections(full_summary()) == []
    # Tolerates heading levels, trailing colons, case and "None" bodies.
    variants = "\n".join(
        f"{'#' * (1 + i % 3)} {s.upper() if i % 2 else s}:\n{'None' if i == 0 else '- none'}"
        for i, s in enumerate(REQUIRED_SECTIONS)
    )
    assert missing_sections(variants) == []


def test_missing_sections_lacking_two() -> None:
    text = "\n".join(
        f"## {s}\n- item" for s in REQUIRED_SECTIONS if s not in ("Key decisions", "Work completed")
    )
    assert missing_sections(text) == ["Key decisions", "Work completed"]


def test_missing_sections_empty_bodies() -> None:
    parts = []
    for s in REQUIRED_SECTIONS:
        body = "" if s == "Exact identifiers" else "-" if s == "Current work and next step" else "- x"
        parts.append(f"## {s}\n{body}\n")
    assert missing_sections("\n".join(parts)) == ["Exact identifiers", "Current work and next step"]
    assert missing_sections("") == list(REQUIRED_SECTIONS)
    # A sub-heading inside a section is content, not the end of the body.
    nested = full_summary().replace("## Work completed\n- something", "## Work completed\n### Phase A\n- x")
    assert missing_sections(nested) == []


def test_bound_summary_keeps_every_heading_and_fits() -> None:
    long_bullets = "\n".join(f"- item {i} touching /srv/app/file_{i}.py" for i in range(200))
    parts = []
    for i, s in enumerate(REQUIRED_SECTIONS):
        parts.append(f"## {s}\n{'- None' if i == 1 else long_bullets[: 2000 * (i + 1)]}")
    summary = "Preamble line.\n\n" + "\n\n".join(parts)
    assert len(summary) > 6000
    for limit in (6000, 2000, 1000):
        out = bound_summary(summary, limit)
        assert len(out) <= limit
        for s in REQUIRED_SECTIONS:
            assert f"## {s}" in out
        assert TRIMMED_NOTE in out
        assert "- None" in out  # short bodies are kept whole
        assert missing_sections(out) == []
    # Proportional: a longer section keeps more.
    out = bound_summary(summary, 3000)
    bodies = re.split(r"^## .*$", out, flags=re.M)[1:]
    assert len(bodies[5]) > len(bodies[0])
    # Already short: unchanged.
    assert bound_summary(full_summary(), 6000) == full_summary()


def test_bound_summary_extreme_limit_still_fits() -> None:
    summary = full_summary("- " + "word " * 500)
    out = bound_summary(summary, 300)
    assert len(out) <= 300
    for s in REQUIRED_SECTIONS:
        assert f"## {s}" in out
    assert len(bound_summary(summary, 20)) <= 20


def test_summary_request_structure() -> None:
    msgs = [m("u1", "user", "rename /src/a.py"), m("f", "assistant", "renamed")]
    req = summary_request(msgs, None, max_chars=4000)
    assert [x.role for x in req] == ["system", "user"]
    system = req[0].content
    assert SUMMARY_MARKER in system
    assert FLUSH_MARKER not in system
    positions = [system.index(f"## {s}") for s in REQUIRED_SECTIONS]
    assert positions == sorted(positions)
    assert "4000" in system
    assert "verbatim" in system
    assert "MERGE" not in system
    assert "missing" not in system
    assert "User: rename /src/a.py" in req[1].content


def test_summary_request_merges_prior_summary() -> None:
    prior = "## Primary request and intent\n- migrate DB ticket OPS-7731"
    req = summary_request([m("u1", "user", "next step")], prior)
    everything = "\n".join(x.content for x in req)
    assert SUMMARY_MARKER in req[0].content
    assert "OPS-7731" in everything
    assert "MERGE" in req[0].content
    assert "keep every item of the prior summary unless the new conversation supersedes it" in req[0].content


def test_summary_request_retry_names_missing_sections() -> None:
    req = summary_request([m("u1", "user")], None, missing=["Key decisions", "Work completed"])
    system = req[0].content
    assert "missing" in system
    assert '"Key decisions", "Work completed"' in system


def test_summary_message() -> None:
    msg = summary_message("## Key decisions\n- x", id="sum1", ts=5.0)
    assert msg.role == "system"
    assert msg.kind is MessageKind.COMPACTION_SUMMARY
    assert msg.content == "Summary of the earlier conversation (compacted):\n\n## Key decisions\n- x"
    assert (msg.id, msg.ts) == ("sum1", 5.0)
    assert not msg.is_real_user
    assert render_for_summary([msg]) == ""


def test_the_flush_shows_the_related_memories_and_keeps_only_replaces_it_showed() -> None:
    request = flush_request(
        [ChatMessage(id="u1", role="user", content="Anna drives an ambulance now", ts=1.0)],
        [(7, "Anna is a nurse")],
    )
    assert request[-1].content.endswith("Memories already saved (number: text):\n7: Anna is a nurse")
    assert '"replaces"' in request[0].content
    assert (
        "Memories already saved"
        not in flush_request([ChatMessage(id="u1", role="user", content="hi", ts=1.0)])[-1].content
    )
    answer = json.dumps(
        [
            {"text": "Anna is a paramedic", "replaces": 7},
            {"text": "Anna likes jazz", "replaces": 8},  # not shown: a guess, ignored
            {"text": "Anna has a van", "replaces": True},  # not a number
            {"text": "Anna lives in Leeds", "replaces": "7"},
        ]
    )
    assert parse_flush(answer, {7}) == [
        ("Anna is a paramedic", "fact", 7),
        ("Anna likes jazz", "fact"),
        ("Anna has a van", "fact"),
        ("Anna lives in Leeds", "fact"),
    ]
    assert parse_flush(answer) == [
        (t, "fact")
        for t in ("Anna is a paramedic", "Anna likes jazz", "Anna has a van", "Anna lives in Leeds")
    ]
