"""The provider request and stream paths that run on every turn: a request body assembled
from cached parts is the same JSON as one built whole, and the byte-level SSE reader finds
the same events however the stream is cut into chunks."""

from __future__ import annotations

import base64
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from netclaw import attachments
from netclaw.attachments import IncomingFile
from netclaw.messages import ChatMessage, MessageKind, ToolCall
from netclaw.providers._anthropic import to_anthropic_messages
from netclaw.providers._base import ProviderRequest, ToolSchema
from netclaw.providers._http import SseReader, WireCache
from netclaw.providers._openai import encode_request, message_to_wire, request_body
from netclaw.security.redact import Scrubber

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


def test_a_turns_tail_travels_in_its_user_message() -> None:
    """One user message (servers with strict role alternation accept it), the same bytes
    whether assembled from cached parts or built whole, and the same in every later request."""
    wire = WireCache()
    note = ChatMessage(
        "ctx1", "user", "[netclaw context for this turn]\nThe time now", 0.0, kind=MessageKind.CONTEXT
    )
    first = [ChatMessage("system", "system", "be brief", 0.0), ChatMessage("u1", "user", "hi", 0.0), note]
    request = ProviderRequest("m", first, cache_key="k")
    body = request_body(request, cache=True)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1]["content"] == "hi\n\n[netclaw context for this turn]\nThe time now"
    assert json.loads(encode_request(request, wire, cache=True)) == body
    assert body["prompt_cache_key"] == "k"
    later = ProviderRequest("m", [*first, ChatMessage("a1", "assistant", "hello", 0.0)])
    assert request_body(later)["messages"][:2] == body["messages"]
    assert json.loads(encode_request(later, wire)) == request_body(later)
    # A note that follows no user message (a restart notice after a tool round) goes alone.
    call = ToolCall("c1", "x", "{}")
    alone = [
        ChatMessage("a2", "assistant", "", 0.0, tool_calls=(call,)),
        ChatMessage("t2", "tool", "r", 0.0, tool_call_id="c1", name="x"),
        note,
    ]
    assert [m["role"] for m in request_body(ProviderRequest("m", alone))["messages"]] == [
        "assistant",
        "tool",
        "user",
    ]


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


def test_images_go_as_image_parts_to_a_vision_model_and_are_named_otherwise(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x01" * 32
    [image] = attachments.store(tmp_path, "s", [IncomingFile("shot.png", "image/png", png)])
    message = ChatMessage("u1", "user", "what is this?", 0.0, user_name="Ann", files=(image,))
    data = base64.b64encode(png).decode()

    openai = message_to_wire(message, vision=True)
    assert openai["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{data}"},
    }
    assert "shown below" in openai["content"][0]["text"]
    _, anthropic = to_anthropic_messages([message], vision=True)
    assert anthropic[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    blind = message_to_wire(message)
    assert isinstance(blind["content"], str) and "this model cannot see images" in blind["content"]
    # A file gone since: named in its place, never a failed request.
    [lost] = attachments.store(tmp_path, "s", [IncomingFile("lost.png", "image/png", png + b"\x02")])
    Path(lost.path).unlink()
    gone = message_to_wire(replace(message, files=(lost,)), vision=True)
    assert gone["content"][1] == {"type": "text", "text": "[the image lost.png is no longer available]"}


def test_images_a_tool_returned_follow_its_round_for_a_vision_model(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x03" * 32
    [image] = attachments.store(tmp_path, "s", [IncomingFile("docs__image-1.png", "image/png", png)])
    data = base64.b64encode(png).decode()
    calls = (ToolCall("c1", "docs__image", "{}"), ToolCall("c2", "docs__echo", "{}"))
    messages = [
        ChatMessage("u1", "user", "show me", 0.0),
        ChatMessage("a1", "assistant", "", 0.0, tool_calls=calls),
        ChatMessage("t1", "tool", "an image", 0.0, tool_call_id="c1", name="docs__image", files=(image,)),
        ChatMessage("t2", "tool", "echoed", 0.0, tool_call_id="c2", name="docs__echo"),
        ChatMessage("r1", "assistant", "a pixel", 0.0),
    ]
    request = ProviderRequest("m", messages, vision=True)
    body = request_body(request)
    assert json.loads(encode_request(request, WireCache())) == body
    wire = body["messages"]
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert "shown below" in wire[2]["content"]
    assert wire[4]["content"][-1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{data}"},
    }
    blind = request_body(ProviderRequest("m", messages))["messages"]
    assert len(blind) == 5 and "this model cannot see images" in blind[2]["content"]
    _, anthropic = to_anthropic_messages(messages, vision=True)
    result = anthropic[2]["content"][0]
    assert result["type"] == "tool_result" and result["content"][0]["text"].startswith("an image")
    assert result["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    _, anthropic_blind = to_anthropic_messages(messages)
    assert "this model cannot see images" in anthropic_blind[2]["content"][0]["content"]


# A session's calls, step by step: what each step does to the messages the next call sends.
STEPS = st.lists(st.sampled_from(["turn", "note", "tools", "image", "clear", "trim", "head"]), max_size=25)


@given(steps=STEPS, vision=st.booleans())
def test_a_sessions_kept_prefix_gives_the_whole_body_whatever_happened_since(
    steps: list[str], vision: bool
) -> None:
    """Calls that begin with the last call's messages start from its kept prefix; whatever
    else happened (a cleared result, a trim, a new head, images, a turn's tail) the body
    is the one built whole."""
    png = b"\x89PNG\r\n\x1a\n" + b"\x05" * 16
    wire = WireCache()
    with tempfile.TemporaryDirectory() as tmp:
        [image] = attachments.store(Path(tmp), "s", [IncomingFile("i.png", "image/png", png)])
        messages = [ChatMessage("system", "system", "be brief", 0.0)]
        for n, step in enumerate(steps):
            if step == "turn":
                messages += [
                    ChatMessage(f"u{n}", "user", f"q{n}", 0.0),
                    ChatMessage(f"r{n}", "assistant", "a", 0.0),
                ]
            elif step == "note":
                messages += [
                    ChatMessage(f"u{n}", "user", f"q{n}", 0.0),
                    ChatMessage(f"n{n}", "user", "[context]", 0.0, kind=MessageKind.CONTEXT),
                ]
            elif step in ("tools", "image"):
                call = ToolCall(f"c{n}", "x", "{}")
                files = (image,) if step == "image" else ()
                messages += [
                    ChatMessage(f"u{n}", "user", f"q{n}", 0.0, files=files),
                    ChatMessage(f"a{n}", "assistant", "", 0.0, tool_calls=(call,)),
                    ChatMessage(f"t{n}", "tool", "r", 0.0, tool_call_id=f"c{n}", name="x", files=files),
                ]
            elif step == "clear":
                tools = [i for i, m in enumerate(messages) if m.role == "tool"]
                if tools:
                    messages[tools[0]] = replace(messages[tools[0]], content="[cleared]", files=())
            elif step == "trim":
                users = [i for i, m in enumerate(messages) if m.role == "user" and m.kind is MessageKind.CHAT]
                if len(users) > 1:
                    messages = [messages[0], *messages[users[1] :]]
            else:
                messages[0] = ChatMessage("system", "system", f"be brief {n}", 0.0)
            request = ProviderRequest("m", list(messages), vision=vision, cache_key="k")
            assert json.loads(encode_request(request, wire)) == request_body(request)


def test_a_kept_prefix_is_a_view_into_the_body_and_counts_all_it_keeps_alive() -> None:
    """The next call's prefix is not a copy of the body's bytes; the bound on what prefixes
    hold counts the whole body a view keeps alive, and drops the oldest past it."""
    wire = WireCache(limit=10_000)
    first = [
        ChatMessage("system", "system", "be brief", 0.0),
        ChatMessage("u0", "user", "q0", 0.0),
        ChatMessage("a0", "assistant", "a" * 4000, 0.0),
        ChatMessage("u1", "user", "q1", 0.0),
    ]
    body = encode_request(ProviderRequest("m", first, cache_key="one"), wire)
    kept = wire.prefix(("prefix", "one", False))
    assert kept is not None and isinstance(kept.data, memoryview) and kept.data.obj is body
    assert bytes(kept.data) in body and bytes(kept.data).endswith(b"a" * 4000 + b'"}')
    assert wire.prefix_size == len(body)
    second = [replace(m, content=m.content + "!") for m in first]
    other = encode_request(ProviderRequest("m", second, cache_key="two"), wire)
    assert wire.prefix_size == len(body) + len(other)
    third = [replace(m, content=m.content + "?") for m in first]
    encode_request(ProviderRequest("m", third, cache_key="three"), wire)  # past the limit
    assert wire.prefix(("prefix", "one", False)) is None
    assert wire.prefix(("prefix", "three", False)) is not None


SECRET_STEPS = st.lists(
    st.sampled_from(["turn", "secret", "split", "tools", "trim", "reload", "none", "model"]), max_size=25
)


@given(steps=SECRET_STEPS)
def test_a_body_as_sent_holds_no_known_secret_though_only_its_new_part_is_searched(steps: list[str]) -> None:
    """A secret anywhere — in a new message, in the kept prefix, at its very edge, after a
    change of the known secrets — is replaced as if the whole body had been searched."""
    secret = "hunter2-swordfish-0042"
    scrubber = Scrubber([secret])
    wire = WireCache()
    messages = [ChatMessage("system", "system", "be brief", 0.0)]
    model = "m"
    for n, step in enumerate(steps):
        if step == "model":  # a secret before the messages (a model named by one)
            model = secret if model == "m" else "m"
        elif step in ("turn", "secret", "split"):
            text = {"turn": f"q{n}", "secret": f"the key is {secret}", "split": secret}[step]
            messages += [
                ChatMessage(f"u{n}", "user", text, 0.0),
                ChatMessage(f"r{n}", "assistant", secret[:9] if step == "split" else "a", 0.0),
            ]
        elif step == "tools":
            call = ToolCall(f"c{n}", "x", "{}")
            messages += [
                ChatMessage(f"u{n}", "user", f"q{n}", 0.0),
                ChatMessage(f"a{n}", "assistant", "", 0.0, tool_calls=(call,)),
                ChatMessage(f"t{n}", "tool", secret, 0.0, tool_call_id=f"c{n}", name="x"),
            ]
        elif step == "trim":
            users = [i for i, m in enumerate(messages) if m.role == "user"]
            if len(users) > 1:
                messages = [messages[0], *messages[users[1] :]]
        elif step == "reload":  # the known secrets swapped whole (a config reload)
            scrubber = Scrubber([secret, "be brief"])  # already in every kept prefix
        else:
            scrubber = Scrubber([])
        request = ProviderRequest(model, list(messages), cache_key="k")
        sent = encode_request(request, wire, scrubber=scrubber)
        assert sent == scrubber.scrub_bytes(encode_request(request, WireCache()))
        if scrubber.longest:
            assert not scrubber.occurs(sent)
