"""AnthropicProvider against the scripted Messages API server, over real HTTP; plus the
pure wire conversion (``to_anthropic_messages``), including a property test."""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netclaw.config import ProviderConfig
from netclaw.errors import (
    ContextOverflow,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderProtocolError,
    ProviderUnavailable,
    RateLimited,
)
from netclaw.messages import ChatMessage, MessageKind, ToolCall
from netclaw.providers import (
    AnthropicProvider,
    Delta,
    ProviderRequest,
    ToolSchema,
    make_provider,
)
from netclaw.providers._anthropic import (
    CONTINUES_PLACEHOLDER,
    MISSING_RESULT,
    THINKING_EXTRA_KEY,
    to_anthropic_messages,
    tool_input,
    wire_tool_id,
)
from tests.fakes.scripted_anthropic import (
    ErrorReply,
    Reply,
    ScriptedAnthropic,
    StreamError,
    ToolCallSpec,
    overflow,
    overloaded,
    rate_limited,
    server_error,
    validate_request,
)

MakeProvider = Callable[..., AnthropicProvider]

_ids = itertools.count(1)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedAnthropic]:
    async with ScriptedAnthropic() as fake:
        yield fake


@pytest.fixture
async def make(server: ScriptedAnthropic) -> AsyncIterator[MakeProvider]:
    made: list[AnthropicProvider] = []

    def factory(base_url: str | None = None, **overrides: Any) -> AnthropicProvider:
        # The wire conversion is checked here without cache markers (test_prompt_cache checks them).
        cfg: dict[str, Any] = {
            "type": "anthropic",
            "base_url": base_url or server.base_url,
            "timeout_s": 5.0,
            "prompt_cache": "off",
        }
        cfg.update(overrides)
        provider = AnthropicProvider("claude", ProviderConfig(**cfg), retry_base_delay=0.01)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def msg(role: Any, content: str, **kw: Any) -> ChatMessage:
    return ChatMessage(id=f"m_{role}_{next(_ids)}", role=role, content=content, ts=0.0, **kw)


def req(*messages: ChatMessage, tools: tuple[ToolSchema, ...] = ()) -> ProviderRequest:
    if not messages:
        messages = (msg("system", "be brief"), msg("user", "hello"))
    return ProviderRequest(model="claude-test", messages=messages, tools=tools)


def assistant_from(result: Any) -> ChatMessage:
    """The assistant message the session records for a completion, through a JSON round trip."""
    recorded = msg(
        "assistant",
        result.text,
        tool_calls=result.tool_calls,
        thinking=result.thinking or None,
        extra=dict(result.extra),
    )
    return ChatMessage.from_dict(json.loads(json.dumps(recorded.to_dict())))


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[Delta] = []

    def __call__(self, delta: Delta) -> None:
        self.deltas.append(delta)

    def joined(self, kind: str) -> str:
        return "".join(d.text for d in self.deltas if d.kind == kind)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.deltas if d.kind == kind)


# --------------------------------------------------------------------------- streaming


async def test_streamed_text_reassembles(
    server: ScriptedAnthropic, make: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETCLAW_TEST_ANTHROPIC_KEY", "sk-ant-test")
    text = "Hello there, this answer arrives in many small pieces."
    server.enqueue(Reply(text=text, chunk_size=3))
    rec = Recorder()
    result = await make(api_key_env="NETCLAW_TEST_ANTHROPIC_KEY").complete(req(), rec)
    assert result.text == text
    assert rec.joined("text") == text
    assert rec.count("text") == len(range(0, len(text), 3))
    assert result.finish_reason == "end_turn"
    assert result.tool_calls == ()
    assert result.thinking == ""
    assert result.extra == {}
    headers = {k.lower(): v for k, v in server.headers[0].items()}
    assert headers["x-api-key"] == "sk-ant-test"
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"].startswith("application/json")


async def test_thinking_signature_round_trips(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(
        Reply(thinking="First, consider the question.", signature="sig-XYZ==", text="42", chunk_size=5),
        Reply(text="sure"),
    )
    rec = Recorder()
    provider = make()
    question = msg("user", "what is six times seven?")
    result = await provider.complete(req(question), rec)
    assert result.thinking == "First, consider the question."
    assert rec.joined("thinking") == result.thinking
    assert result.text == "42"
    kinds = [d.kind for d in rec.deltas]
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "thinking")
    block = {"type": "thinking", "thinking": "First, consider the question.", "signature": "sig-XYZ=="}
    assert result.extra == {THINKING_EXTRA_KEY: [block]}

    await provider.complete(req(question, assistant_from(result), msg("user", "and seven times eight?")))
    assert not server.rejected
    assert server.requests[1]["messages"][1] == {
        "role": "assistant",
        "content": [block, {"type": "text", "text": "42"}],
    }


async def test_redacted_thinking_round_trips(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(redacted_thinking="EncryptedBlob==", text="ok"), Reply(text="again"))
    provider = make()
    first = msg("user", "hi")
    result = await provider.complete(req(first))
    assert result.extra == {THINKING_EXTRA_KEY: [{"type": "redacted_thinking", "data": "EncryptedBlob=="}]}
    await provider.complete(req(first, assistant_from(result), msg("user", "more")))
    assert server.requests[1]["messages"][1]["content"][0] == {
        "type": "redacted_thinking",
        "data": "EncryptedBlob==",
    }


async def test_tool_use_input_split_across_chunks(server: ScriptedAnthropic, make: MakeProvider) -> None:
    args = {"query": "weather in Paris", "limit": 3, "nested": {"a": [1, 2, "x"]}}
    server.enqueue(Reply(tool_calls=[ToolCallSpec("search", args, id="toolu_abc")], chunk_size=4))
    result = await make().complete(req())
    assert result.tool_calls == (ToolCall("toolu_abc", "search", json.dumps(args)),)
    assert json.loads(result.tool_calls[0].arguments) == args
    assert result.finish_reason == "tool_use"
    assert result.text == ""


async def test_two_parallel_tool_calls(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(
        Reply(
            text="Checking both.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "/etc/hosts"}, id="toolu_rf"),
                ToolCallSpec("clock", "", id=None),  # empty input, server-chosen id
            ],
            chunk_size=5,
        )
    )
    result = await make().complete(req())
    assert result.text == "Checking both."
    first, second = result.tool_calls
    assert first == ToolCall("toolu_rf", "read_file", '{"path": "/etc/hosts"}')
    assert second.name == "clock"
    assert second.arguments == "{}"
    assert second.id.startswith("toolu_") and second.id != "toolu_rf"


async def test_full_tool_round_trip(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(
        Reply(
            thinking="I need the file and the time.",
            signature="sig-tools",
            text="Let me look.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "/etc/hosts"}, id="toolu_01"),
                ToolCallSpec("clock", {}, id="toolu_02"),
            ],
        ),
        Reply(text="Done."),
    )
    provider = make()
    question = msg("user", "read hosts and tell me the time")
    first = await provider.complete(req(msg("system", "be brief"), question))
    assistant = assistant_from(first)
    results = [
        msg("tool", "127.0.0.1 localhost", tool_call_id="toolu_01", name="read_file"),
        msg("tool", "clock broke", tool_call_id="toolu_02", name="clock", is_error=True),
    ]
    second = await provider.complete(req(msg("system", "be brief"), question, assistant, *results))
    assert second.text == "Done."
    assert not server.rejected
    wire = server.requests[1]["messages"]
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert wire[1]["content"] == [
        {"type": "thinking", "thinking": "I need the file and the time.", "signature": "sig-tools"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "/etc/hosts"}},
        {"type": "tool_use", "id": "toolu_02", "name": "clock", "input": {}},
    ]
    assert wire[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "127.0.0.1 localhost"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "clock broke", "is_error": True},
        ],
    }


async def test_usage_with_cache_tokens(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(text="ok", usage=(100, 20), cache_read=50, cache_write=30))
    result = await make().complete(req())
    assert result.usage is not None
    assert result.usage.input_tokens == 180  # comparable to OpenAI's prompt_tokens
    assert result.usage.output_tokens == 20
    assert result.usage.cache_read_tokens == 50
    assert result.usage.cache_write_tokens == 30
    body = server.requests[0]
    assert body["stream"] is True
    assert body["max_tokens"] == 4096
    assert body["model"] == "claude-test"
    assert "tools" not in body


async def test_tools_sent(server: ScriptedAnthropic, make: MakeProvider) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    server.enqueue(Reply(text="ok"))
    await make().complete(req(tools=(ToolSchema("search", "Search the web.", schema),)))
    assert server.requests[0]["tools"] == [
        {"name": "search", "description": "Search the web.", "input_schema": schema}
    ]


async def test_consecutive_user_messages_merged(server: ScriptedAnthropic, make: MakeProvider) -> None:
    # A failed turn leaves its user message without an answer.
    messages = (
        msg("user", "first try"),
        msg("user", "second try"),
    )
    result = await make().complete(req(*messages))
    assert result.text == "echo: second try"
    assert not server.rejected
    assert server.requests[0]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first try"}, {"type": "text", "text": "second try"}],
        }
    ]


async def test_system_messages_go_to_system(server: ScriptedAnthropic, make: MakeProvider) -> None:
    messages = (
        msg("system", "You are netclaw."),
        msg("system", "[earlier messages trimmed]", kind=MessageKind.TRIM_BREADCRUMB),
        msg("user", "hi"),
        msg("assistant", "hello"),
        msg("system", "A late note."),
        msg("user", "bye"),
    )
    await make().complete(req(*messages))
    body = server.requests[0]
    assert body["system"] == "You are netclaw.\n\n[earlier messages trimmed]\n\nA late note."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert "You are netclaw." not in json.dumps(body["messages"])


async def test_wire_messages_round_trip(server: ScriptedAnthropic, make: MakeProvider) -> None:
    call = ToolCall("toolu_7", "clock", '{"tz": "UTC"}')
    messages = (
        msg("system", "be brief"),
        msg("user", "what time is it?"),
        msg("assistant", "", tool_calls=(call,), thinking="I should call the clock."),
        msg("tool", "12:00", tool_call_id="toolu_7", name="clock"),
        msg("assistant", "It is noon.", thinking="easy"),
        msg("user", "thanks"),
    )
    server.enqueue(Reply(text="you're welcome"))
    await make().complete(req(*messages))
    assert server.requests[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what time is it?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_7", "name": "clock", "input": {"tz": "UTC"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": "12:00"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is noon."}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    # Thinking without a signature (another provider's) is never sent.
    assert "I should call the clock." not in json.dumps(server.requests[0])


# --------------------------------------------------------------------------- retries


async def test_rate_limit_honours_retry_after(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(rate_limited(retry_after=0.2), Reply(text="finally"))
    started = time.monotonic()
    result = await make().complete(req())
    assert time.monotonic() - started >= 0.2
    assert result.text == "finally"
    assert len(server.requests) == 2


async def test_overloaded_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(overloaded(), Reply(text="recovered"))
    result = await make().complete(req())
    assert result.text == "recovered"
    assert len(server.requests) == 2


async def test_retries_bounded(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(overloaded(), server_error(502), server_error(500), Reply(text="late"))
    with pytest.raises(ProviderUnavailable, match="HTTP 500"):
        await make(max_retries=2).complete(req())
    assert len(server.requests) == 3
    assert server.pending() == 1


async def test_rate_limit_exhausted(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(rate_limited(0.01), rate_limited(0.01))
    with pytest.raises(RateLimited) as info:
        await make(max_retries=1).complete(req())
    assert info.value.retry_after == pytest.approx(0.01)
    assert len(server.requests) == 2


# --------------------------------------------------------------------------- terminal errors


async def test_overflow_not_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(overflow(), Reply(text="never"))
    with pytest.raises(ContextOverflow, match="prompt is too long"):
        await make().complete(req())
    assert len(server.requests) == 1


async def test_max_tokens_overflow_is_context_overflow(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(
        ErrorReply(
            400,
            message="input length and `max_tokens` exceed context limit: 187254 + 20000 > 200000, "
            "decrease input length or `max_tokens` and try again",
        )
    )
    with pytest.raises(ContextOverflow):
        await make().complete(req())


async def test_auth_error_not_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(ErrorReply(401, "authentication_error", "invalid x-api-key"), Reply(text="x"))
    with pytest.raises(ProviderAuthError) as info:
        await make(api_key_env="NETCLAW_TEST_ANTHROPIC_KEY").complete(req())
    text = str(info.value)
    assert "NETCLAW_TEST_ANTHROPIC_KEY" in text
    assert "401" in text
    assert "invalid x-api-key" in text
    assert len(server.requests) == 1


async def test_missing_key_still_sent_and_401_names_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETCLAW_TEST_ANTHROPIC_KEY", raising=False)
    async with ScriptedAnthropic(api_key="sk-ant-right") as fake:
        cfg = ProviderConfig(
            type="anthropic", base_url=fake.base_url, api_key_env="NETCLAW_TEST_ANTHROPIC_KEY"
        )
        provider = AnthropicProvider("claude", cfg, retry_base_delay=0.01)
        try:
            with pytest.raises(ProviderAuthError, match="NETCLAW_TEST_ANTHROPIC_KEY"):
                await provider.complete(req())
            monkeypatch.setenv("NETCLAW_TEST_ANTHROPIC_KEY", "sk-ant-right")
            result = await provider.complete(req())
        finally:
            await provider.aclose()
    assert result.text == "echo: hello"


async def test_bad_request(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(ErrorReply(400, message="max_tokens: Input should be greater than or equal to 1"))
    with pytest.raises(ProviderBadRequest, match="max_tokens"):
        await make().complete(req())
    assert len(server.requests) == 1


async def test_connection_refused(make: MakeProvider) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ProviderUnavailable) as info:
        await make(url, max_retries=1).complete(req())
    assert url in str(info.value)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_mid_stream_drop_not_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    # message_start, content_block_start, ping, then three text deltas of 4 characters.
    server.enqueue(
        Reply(text="a long answer that will be cut short", chunk_size=4, drop_after_chunks=6),
        Reply(text="retry must not happen"),
    )
    rec = Recorder()
    with pytest.raises(ProviderUnavailable, match="stream ended early"):
        await make().complete(req(), rec)
    assert rec.joined("text") == "a long answer that will be cut short"[:12]
    assert len(server.requests) == 1


async def test_drop_before_any_text_is_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(text="lost", drop_after_chunks=2), Reply(text="second try"))
    rec = Recorder()
    result = await make().complete(req(), rec)
    assert result.text == "second try"
    assert rec.joined("text") == "second try"
    assert len(server.requests) == 2


async def test_timeout(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(text="too late", delay_s=1.0))
    with pytest.raises(ProviderUnavailable, match="no response"):
        await make(timeout_s=0.2, max_retries=0).complete(req())


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (StreamError("overloaded_error", "Overloaded"), ProviderUnavailable),
        (StreamError("rate_limit_error", "slow down"), RateLimited),
        (
            StreamError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
            ContextOverflow,
        ),
        (StreamError("api_error", "Internal server error"), ProviderUnavailable),
    ],
)
async def test_stream_error_event_classified(
    server: ScriptedAnthropic, make: MakeProvider, error: StreamError, expected: type[Exception]
) -> None:
    server.enqueue(Reply(stream_error=error))
    with pytest.raises(expected, match=error.message.split(":")[0]):
        await make(max_retries=0).complete(req())
    assert len(server.requests) == 1


async def test_stream_error_before_text_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(stream_error=StreamError()), Reply(text="fine now"))
    result = await make().complete(req())
    assert result.text == "fine now"
    assert len(server.requests) == 2


async def test_stream_error_after_text_not_retried(server: ScriptedAnthropic, make: MakeProvider) -> None:
    server.enqueue(Reply(text="partial", stream_error=StreamError()), Reply(text="must not happen"))
    rec = Recorder()
    with pytest.raises(ProviderUnavailable, match="Overloaded"):
        await make().complete(req(), rec)
    assert rec.joined("text") == "partial"
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- check / factory


async def test_check(make: MakeProvider) -> None:
    assert await make().check() == "reachable, 1 model"


async def test_check_unreachable(make: MakeProvider) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ProviderUnavailable, match=f"127.0.0.1:{port}"):
        await make(f"http://127.0.0.1:{port}").check()


async def test_make_provider() -> None:
    provider = make_provider("claude", ProviderConfig.model_validate({"type": "anthropic"}))
    try:
        assert isinstance(provider, AnthropicProvider)
        assert provider.name == "claude"
        assert provider.api_url == "https://api.anthropic.com/v1"  # the config's default is local
    finally:
        await provider.aclose()


# --------------------------------------------------------------------------- server quirks
# Shapes the scripted server does not produce, served through the transport seam.


def quirk_provider(
    handler: Callable[[httpx.Request], httpx.Response], base_url: str = "http://quirk.test", **cfg: Any
) -> AnthropicProvider:
    config = ProviderConfig(type="anthropic", base_url=base_url, **cfg)
    return AnthropicProvider("quirk", config, transport=httpx.MockTransport(handler), retry_base_delay=0.01)


def sse(*events: tuple[str, dict[str, Any]]) -> httpx.Response:
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


START = (
    "message_start",
    {"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}},
)
TEXT_START = (
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)


def text_delta(text: str) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    )


async def test_v1_not_doubled_and_404_check() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.method == "GET":
            return httpx.Response(404, json={"type": "error", "error": {"type": "not_found_error"}})
        return sse(START, TEXT_START, text_delta("hi"), ("message_stop", {"type": "message_stop"}))

    provider = quirk_provider(handler, base_url="http://quirk.test/v1")
    try:
        assert (await provider.complete(req())).text == "hi"
        assert await provider.check() == "reachable, GET /v1/models answered HTTP 404"
    finally:
        await provider.aclose()
    assert seen == ["http://quirk.test/v1/messages", "http://quirk.test/v1/models"]


async def test_stream_without_message_stop_is_incomplete() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return sse(
            START,
            TEXT_START,
            text_delta("half"),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        )

    provider = quirk_provider(handler, max_retries=0)
    try:
        with pytest.raises(ProviderUnavailable, match="stream ended early"):
            await provider.complete(req())
    finally:
        await provider.aclose()


async def test_unknown_events_and_comments_ignored() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = (
            ": a comment\n\n"
            + "".join(
                f"event: {name}\ndata: {json.dumps(data)}\n\n"
                for name, data in (
                    START,
                    ("future_event", {"type": "future_event", "x": 1}),
                    TEXT_START,
                    text_delta("a"),
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta"}},
                    ),
                    text_delta("b"),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    (
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": "max_tokens"},
                            "usage": {"output_tokens": 7},
                        },
                    ),
                )
            )
            + 'event: message_stop\ndata: {"type": "message_stop"}'  # no final blank line
        )
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    provider = quirk_provider(handler)
    try:
        result = await provider.complete(req())
    finally:
        await provider.aclose()
    assert (result.text, result.finish_reason) == ("ab", "max_tokens")
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (5, 7)


async def test_non_streaming_message_answer() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s1"},
                    {"type": "text", "text": "plain"},
                    {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 8},
            },
        )

    provider = quirk_provider(handler)
    rec = Recorder()
    try:
        result = await provider.complete(req(), rec)
    finally:
        await provider.aclose()
    assert (result.text, result.thinking) == ("plain", "hmm")
    assert rec.joined("text") == "plain"
    assert result.tool_calls == (ToolCall("toolu_x", "f", '{"a": 1}'),)
    assert result.extra == {THINKING_EXTRA_KEY: [{"type": "thinking", "thinking": "hmm", "signature": "s1"}]}
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (18, 8)


async def test_non_sse_body_is_protocol_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/html"}, text="<html>hi</html>")

    provider = quirk_provider(handler, max_retries=0)
    try:
        with pytest.raises(ProviderProtocolError, match="not an event stream"):
            await provider.complete(req())
    finally:
        await provider.aclose()


# --------------------------------------------------------------------------- the fake's validation


def body_of(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages)}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "f", "input": {}}


def result_of(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "r"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (body_of(user(text("a")), user(text("b"))), "alternate"),
        (body_of(assistant(text("a"))), "first message"),
        (body_of({"role": "system", "content": "s"}, user(text("a"))), "role"),
        (body_of(user(text("a")), {"role": "tool", "content": "r"}), "role"),
        (body_of(user(text("a")), assistant(use("t1")), user(result_of("t2"))), "unexpected `tool_use_id`"),
        (
            body_of(
                user(text("a")),
                assistant(use("t1")),
                user(text("x")),
                assistant(text("y")),
                user(result_of("t1")),
            ),
            "without `tool_result`",
        ),
        (
            body_of(user(text("a")), assistant(use("t1")), user(text("x"), result_of("t1"))),
            "must come before",
        ),
        (body_of(user(text(" "))), "non-whitespace"),
        (body_of(user(text("a")), assistant({"type": "thinking", "thinking": "t"})), "signature"),
    ],
)
def test_fake_rejects_invalid_bodies(body: dict[str, Any], reason: str) -> None:
    problem = validate_request(body)
    assert problem is not None and reason in problem


def test_fake_accepts_a_valid_tool_exchange() -> None:
    body = body_of(
        user(text("a")),
        assistant(text("b"), use("t1"), use("t2")),
        user(result_of("t1"), result_of("t2"), text("c")),
    )
    assert validate_request(body) is None


async def test_fake_rejection_is_a_bad_request(server: ScriptedAnthropic) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{server.base_url}/v1/messages",
            json=body_of(user(text("a")), user(text("b"))),
            headers={"anthropic-version": "2023-06-01"},
        )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert len(server.rejected) == 1
    assert server.requests == []


# --------------------------------------------------------------------------- to_anthropic_messages


def test_leading_assistant_gets_placeholder() -> None:
    system, wire = to_anthropic_messages(
        [msg("system", "sys"), msg("assistant", "summary so far"), msg("user", "go")]
    )
    assert system == "sys"
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": CONTINUES_PLACEHOLDER}]},
        {"role": "assistant", "content": [{"type": "text", "text": "summary so far"}]},
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
    ]


def test_invalid_json_arguments_sent_raw() -> None:
    assert tool_input('{"a": 1}') == {"a": 1}
    assert tool_input("") == {}
    assert tool_input("{broken") == {"_raw": "{broken"}
    assert tool_input("[1, 2]") == {"_raw": "[1, 2]"}
    _, wire = to_anthropic_messages(
        [msg("user", "q"), msg("assistant", "", tool_calls=(ToolCall("c1", "f", "{broken"),))]
    )
    assert wire[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {"_raw": "{broken"}}]


def test_missing_result_synthesised_and_orphan_kept_as_text() -> None:
    messages = [
        msg("user", "q"),
        msg("assistant", "", tool_calls=(ToolCall("c1", "f", "{}"), ToolCall("c2", "g", "{}"))),
        msg("tool", "one", tool_call_id="c1", name="f"),
        msg("tool", "stray", tool_call_id="c9", name="h"),
        msg("user", "next"),
    ]
    _, wire = to_anthropic_messages(messages)
    assert validate_request({"model": "m", "max_tokens": 1, "messages": wire}) is None
    assert wire[2]["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "content": "one"}
    assert wire[2]["content"][1] == {
        "type": "tool_result",
        "tool_use_id": "c2",
        "content": MISSING_RESULT,
        "is_error": True,
    }
    assert "stray" in wire[2]["content"][2]["text"]
    assert wire[2]["content"][3] == {"type": "text", "text": "next"}


def test_results_go_before_text_and_ids_are_sanitised() -> None:
    messages = [
        msg("user", "q"),
        msg("assistant", "x", tool_calls=(ToolCall("functions.f:0", "f", "{}"),)),
        msg("user", "interjection"),
        msg("tool", "done", tool_call_id="functions.f:0", name="f"),
    ]
    _, wire = to_anthropic_messages(messages)
    assert validate_request({"model": "m", "max_tokens": 1, "messages": wire}) is None
    assert wire[1]["content"][1]["id"] == wire_tool_id("functions.f:0") == "functions_f_0"
    assert wire[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "functions_f_0", "content": "done"},
        {"type": "text", "text": "interjection"},
    ]


def test_empty_and_blank_texts_left_out() -> None:
    _, wire = to_anthropic_messages(
        [msg("user", "q"), msg("assistant", "   "), msg("user", ""), msg("user", "r")]
    )
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "r"}]}
    ]
    assert to_anthropic_messages([]) == (
        "",
        [{"role": "user", "content": [{"type": "text", "text": CONTINUES_PLACEHOLDER}]}],
    )


def test_merged_assistants_keep_thinking_first() -> None:
    a = msg(
        "assistant",
        "one",
        extra={THINKING_EXTRA_KEY: [{"type": "thinking", "thinking": "t1", "signature": "s1"}]},
    )
    b = msg(
        "assistant",
        "two",
        extra={THINKING_EXTRA_KEY: [{"type": "thinking", "thinking": "t2", "signature": "s2"}]},
    )
    _, wire = to_anthropic_messages([msg("user", "q"), a, b])
    assert [blk["type"] for blk in wire[1]["content"]] == ["thinking", "thinking", "text", "text"]


# ----- property: random histories stay valid and lossless

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_ARGS = st.one_of(
    st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3).map(json.dumps),
    st.just(""),
    st.text(max_size=8),  # often not JSON
)


@st.composite
def histories(draw: st.DrawFn) -> list[ChatMessage]:
    counter = itertools.count(1)
    out: list[ChatMessage] = []
    if draw(st.booleans()):
        out.append(msg("system", draw(_TEXT)))
    if draw(st.integers(0, 5)) == 0:
        out.append(msg("assistant", draw(_TEXT)))  # a summary-like leading assistant
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 6)) == 0:
            out.append(msg("system", draw(_TEXT), kind=MessageKind.TRIM_BREADCRUMB))
        out.append(msg("user", draw(_TEXT)))
        if draw(st.integers(0, 3)) == 0:
            continue  # a failed turn: no answer, so the next user message follows directly
        for _ in range(draw(st.integers(0, 3))):  # tool rounds
            calls = tuple(
                ToolCall(
                    f"{draw(st.sampled_from(['call_', 'toolu_', 'fn.x:']))}{next(counter)}",
                    draw(st.sampled_from(["read", "clock", "search"])),
                    draw(_ARGS),
                )
                for _ in range(draw(st.integers(0, 3)))
            )
            extra: dict[str, Any] = {}
            if draw(st.booleans()):
                extra[THINKING_EXTRA_KEY] = [
                    {"type": "thinking", "thinking": draw(_TEXT), "signature": "sig"}
                ]
            out.append(msg("assistant", draw(_TEXT), tool_calls=calls, extra=extra))
            for call in calls:
                out.append(
                    msg(
                        "tool",
                        draw(_TEXT),
                        tool_call_id=call.id,
                        name=call.name,
                        is_error=draw(st.booleans()),
                    )
                )
        out.append(msg("assistant", draw(_TEXT)))
    return out


@given(histories())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_histories_convert_validly_and_losslessly(history: list[ChatMessage]) -> None:
    system, wire = to_anthropic_messages(history)

    # The fake (modelled on the real API's rules) accepts it.
    assert validate_request({"model": "m", "max_tokens": 1, "system": system, "messages": wire}) is None

    # Alternation, first role user, no system/tool roles.
    roles = [m["role"] for m in wire]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert set(roles) <= {"user", "assistant"}

    # Every tool_result answers a tool_use of the immediately preceding assistant message.
    for i, wire_message in enumerate(wire):
        for block in wire_message["content"]:
            if block["type"] == "tool_result":
                assert i > 0 and wire[i - 1]["role"] == "assistant"
                answered = {b["id"] for b in wire[i - 1]["content"] if b["type"] == "tool_use"}
                assert block["tool_use_id"] in answered

    # Lossless: every content, call and result is there, in its place.
    texts = {(m["role"], b["text"]) for m in wire for b in m["content"] if b["type"] == "text"}
    uses = {b["id"]: b for m in wire for b in m["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"]: b for m in wire for b in m["content"] if b["type"] == "tool_result"}
    for message in history:
        if message.role == "system":
            if message.content.strip():
                assert message.content in system
        elif message.role == "tool":
            result = results[wire_tool_id(message.tool_call_id)]
            assert result.get("content", "") == message.content
            assert result.get("is_error", False) == message.is_error
        else:
            if message.content.strip():
                assert (message.role, message.content) in texts
            for call in message.tool_calls:
                block = uses[wire_tool_id(call.id)]
                assert (block["name"], block["input"]) == (call.name, tool_input(call.arguments))
                if call.arguments.strip():
                    try:
                        parsed = json.loads(call.arguments)
                    except ValueError:
                        parsed = None
                    if isinstance(parsed, dict):
                        assert block["input"] == parsed
                    else:
                        assert block["input"] == {"_raw": call.arguments}
    assert MISSING_RESULT not in json.dumps(wire)
    assert all(m["content"] for m in wire)
