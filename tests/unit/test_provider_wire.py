"""The provider request and stream paths that run on every turn: a request body assembled
from cached parts is the same JSON as one built whole, and the byte-level SSE reader finds
the same events however the stream is cut into chunks."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from netclaw.messages import ChatMessage, ToolCall
from netclaw.providers._base import ProviderRequest, ToolSchema
from netclaw.providers._http import SseReader, WireCache
from netclaw.providers._openai import encode_request, request_body

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def conversation(turns: int) -> list[ChatMessage]:
    messages = [ChatMessage("system", "system", "be brief", 0.0)]
    for i in range(turns):
        messages.append(
            ChatMessage(f"u{i}", "user", f'question {i} — ünïcode "quoted"', 0.0, user_name="Ann")
        )
        call = ToolCall(f"c{i}", "search", json.dumps({"q": str(i)}))
        messages.append(ChatMessage(f"a{i}", "assistant", "", 0.0, tool_calls=(call,)))
        messages.append(ChatMessage(f"t{i}", "tool", f"result {i}", 0.0, tool_call_id=f"c{i}", name="search"))
        messages.append(ChatMessage(f"r{i}", "assistant", f"answer {i}", 0.0))
    return messages


def test_an_assembled_body_is_the_whole_body_turn_after_turn() -> None:
    wire = WireCache()
    tools = [ToolSchema("search", "look things up", SCHEMA)]
    transcript = conversation(5)  # the same message objects every turn, as a session has
    for turns in (1, 2, 5):
        request = ProviderRequest("m", transcript[: 1 + 4 * turns], tools=tools, max_output_tokens=64)
        assert json.loads(encode_request(request, wire)) == request_body(request)
    assert len(wire) == 1 + 5 * 4 + 1  # each message once, the system prompt, the tool set


def test_a_changed_message_under_the_same_id_is_encoded_again() -> None:
    # A cleared tool result is a new object with the message's id and new content.
    wire = WireCache()
    first = ChatMessage("t1", "tool", "a long tool result", 0.0, tool_call_id="c1", name="x")
    cleared = ChatMessage("t1", "tool", "[cleared]", 0.0, tool_call_id="c1", name="x")
    for message in (first, cleared):
        request = ProviderRequest("m", [message])
        assert json.loads(encode_request(request, wire)) == request_body(request)


def test_the_cache_stays_within_its_size() -> None:
    wire = WireCache(limit=2_000)
    for turns in range(1, 30):
        request = ProviderRequest("m", conversation(turns)[-4:])
        assert json.loads(encode_request(request, wire)) == request_body(request)
    assert wire.size <= 2_000


STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b'event: message_start\r\ndata: {"b": 2}\r\n\r\n'
    b"data: line one\ndata: line two\n\n"
    b"id: 7\nretry: 100\ndata: [DONE]\n\n"
    b'data: {"tail": true}'  # the last event without its blank line
)
EXPECTED = [
    ("", b'{"a": 1}'),
    ("message_start", b'{"b": 2}'),
    ("", b"line one\nline two"),
    ("", b"[DONE]"),
    ("", b'{"tail": true}'),
]


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM)), max_size=12))
def test_events_are_the_same_however_the_stream_is_chunked(cuts: list[int]) -> None:
    reader = SseReader()
    events = []
    start = 0
    for cut in [*sorted(set(cuts)), len(STREAM)]:
        events += reader.feed(STREAM[start:cut])
        start = cut
    events += reader.end()
    assert events == EXPECTED
    assert reader.stray == []


def test_a_body_that_is_no_stream_is_kept_as_stray_text() -> None:
    reader = SseReader()
    assert reader.feed(b"<html>\n<body>Bad gateway</body>\n") == []
    assert reader.end() == []
    assert reader.stray == ["<html>", "<body>Bad gateway</body>"]
