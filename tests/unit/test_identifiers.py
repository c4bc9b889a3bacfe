"""Identifiers from outside are matched whole: a trailing newline is not part of an id."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.webhook import session_key
from netclaw.errors import InvalidInput
from netclaw.identifiers import CONTROL, SESSION_ID, check_label, check_session_id

VALID = [
    "cli:default",
    "slack:C0123:1700000000.000100",
    "discord:123",
    "webhook:alerts:t-1",
    "a" * 200,
    "agent:cli:default/1",  # a sub-agent's id: the only place a slash may be
    "agent:slack:C0123:1700000000.000100/12/3",
    "agent:" + "a" * 190 + "/1/2",  # 200 characters
]


@pytest.mark.parametrize("session_id", VALID)
def test_valid_session_ids(session_id: str) -> None:
    assert check_session_id(session_id) == session_id


@pytest.mark.parametrize(
    "session_id",
    [
        *("x\n", "cli:a\r\n", "\ncli:a", "cli:\x00a", "a" * 201, "", "-x", "cli a", "x\u2028", 5, None),
        # A slash only as agent:<id>/<number>: no path, no dot-dot, no empty or zero part.
        *("cli:x/1", "agent:/1", "agent:x/", "agent:x//1", "agent:x/0", "agent:x/01", "agent:x/../1"),
        *("agent:x/1a", "agent:x/1/", "agent:x/1234567", "agent:x/1\n", "agent:x/\x001", "/agent:x/1"),
        "agent:" + "a" * 191 + "/1/2",  # 201 characters
    ],
)
def test_invalid_session_ids(session_id: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_session_id(session_id)
    assert caught.value.field == "session_id"


def test_match_with_a_dollar_would_have_let_a_newline_through() -> None:
    # What issue 34 found: `$` matches before a final newline; fullmatch does not.
    assert re.match(r"^[a-z]+$", "x\n") is not None
    assert SESSION_ID.fullmatch("x\n") is None


@given(
    st.text(min_size=1, max_size=30),
    st.characters(codec="utf-8").filter(lambda c: CONTROL.match(c) is not None),
)
def test_no_id_or_label_with_a_control_character_is_accepted(text: str, control: str) -> None:
    for hostile in (text + control, control + text, text[:1] + control + text[1:]):
        with pytest.raises(InvalidInput):
            check_session_id(hostile)
        with pytest.raises(InvalidInput):
            check_label("user", hostile, max_chars=200)


def test_labels() -> None:
    assert check_label("user_name", "  Ada Lovelace ", max_chars=80) == "Ada Lovelace"
    assert check_label("user", "ünïcode ✓", max_chars=80) == "ünïcode ✓"
    for bad in ("", "  ", "x" * 81, "a\tb", "\ud800", 5, None, ["a"]):
        with pytest.raises(InvalidInput) as caught:
            check_label("user_name", bad, max_chars=80)
        assert caught.value.field == "user_name"


def test_a_webhook_session_key_from_any_json_string() -> None:
    # A lone surrogate (valid JSON, not UTF-8) used to fail hashing it: a 500.
    key = session_key("\ud800")
    assert SESSION_ID.fullmatch(f"webhook:alerts:{key}") and key == session_key("\ud800")
    assert session_key("x\n") != session_key("x\r") and "\n" not in session_key("x\n")
