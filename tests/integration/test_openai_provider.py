"""OpenAIProvider against the scripted OpenAI-compatible server, over real HTTP."""

from __future__ import annotations

import gzip
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

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
    OpenAIProvider,
    ProviderRequest,
    ToolSchema,
    make_provider,
)
from tests.fakes.scripted_openai import (
    ErrorReply,
    Reply,
    ScriptedOpenAI,
    ToolCallSpec,
    overflow,
    rate_limited,
    server_error,
)

MakeProvider = Callable[..., OpenAIProvider]


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAI]:
    async with ScriptedOpenAI() as fake:
        yield fake


@pytest.fixture
async def make(server: ScriptedOpenAI) -> AsyncIterator[MakeProvider]:
    made: list[OpenAIProvider] = []

    def factory(base_url: str | None = None, **overrides: Any) -> OpenAIProvider:
        cfg: dict[str, Any] = {"base_url": base_url or server.base_url, "timeout_s": 5.0}
        cfg.update(overrides)
        provider = OpenAIProvider("local", ProviderConfig(**cfg), retry_base_delay=0.01)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def msg(role: Any, content: str, **kw: Any) -> ChatMessage:
    return ChatMessage(id=f"m_{role}_{len(content)}", role=role, content=content, ts=0.0, **kw)


def req(*messages: ChatMessage, tools: tuple[ToolSchema, ...] = ()) -> ProviderRequest:
    if not messages:
        messages = (msg("system", "be brief"), msg("user", "hello"))
    return ProviderRequest(model="test-model", messages=messages, tools=tools)


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


async def test_streamed_text_reassembles(server: ScriptedOpenAI, make: MakeProvider) -> None:
    text = "Hello there, this answer arrives in many small pieces."
    server.enqueue(Reply(text=text, chunk_size=3))
    rec = Recorder()
    result = await make().complete(req(), rec)
    assert result.text == text
    assert rec.joined("text") == text
    assert rec.count("text") == len(range(0, len(text), 3))
    assert result.finish_reason == "stop"
    assert result.tool_calls == ()
    assert result.thinking == ""


async def test_a_compressed_stream_is_decoded(make: MakeProvider) -> None:
    """A plain body is read as the transport hands it on; one sent with Content-Encoding goes
    through httpx's decoders (netclaw/providers/_http.py, ``_arriving``)."""
    events: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in ("compressed ", "and whole")
    ]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    packed = gzip.compress(raw)

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
        )
        await response.prepare(request)
        half = len(packed) // 2  # two writes: the decoder sees a stream, not one block
        await response.write(packed[:half])
        await response.write(packed[half:])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        rec = Recorder()
        port = runner.addresses[0][1]
        result = await make(base_url=f"http://127.0.0.1:{port}/v1").complete(req(), rec)
    finally:
        await runner.cleanup()
    assert result.text == "compressed and whole"
    assert rec.joined("text") == "compressed and whole"
    assert result.finish_reason == "stop"


async def test_thinking_deltas(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(Reply(thinking="First, consider the question.", text="42", chunk_size=5))
    rec = Recorder()
    result = await make().complete(req(), rec)
    assert result.thinking == "First, consider the question."
    assert rec.joined("thinking") == result.thinking
    assert result.text == "42"
    kinds = [d.kind for d in rec.deltas]
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "thinking")


async def test_tool_call_arguments_split_across_chunks(server: ScriptedOpenAI, make: MakeProvider) -> None:
    args = {"query": "weather in Paris", "limit": 3, "nested": {"a": [1, 2, "x"]}}
    server.enqueue(Reply(tool_calls=[ToolCallSpec("search", args, id="call_abc")], chunk_size=4))
    result = await make().complete(req())
    assert result.tool_calls == (ToolCall("call_abc", "search", json.dumps(args)),)
    assert json.loads(result.tool_calls[0].arguments) == args
    assert result.finish_reason == "tool_calls"
    assert result.text == ""


async def test_two_parallel_tool_calls(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(
        Reply(
            text="Checking both.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "/etc/hosts"}, id="call_rf"),
                ToolCallSpec("clock", "", id=None),  # empty arguments, server-chosen id
            ],
            chunk_size=5,
        )
    )
    result = await make().complete(req())
    assert result.text == "Checking both."
    first, second = result.tool_calls
    assert first == ToolCall("call_rf", "read_file", '{"path": "/etc/hosts"}')
    assert second.name == "clock"
    assert second.arguments == "{}"
    assert second.id and second.id != "call_rf"


async def test_usage_parsed_and_requested(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(Reply(text="ok", usage=(123, 45)))
    result = await make().complete(req())
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (123, 45)
    assert result.usage.cache_read_tokens == 0
    body = server.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 4096
    assert body["model"] == "test-model"
    assert "tools" not in body


async def test_tools_sent(server: ScriptedOpenAI, make: MakeProvider) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    server.enqueue(Reply(text="ok"))
    await make().complete(req(tools=(ToolSchema("search", "Search the web.", schema),)))
    assert server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {"name": "search", "description": "Search the web.", "parameters": schema},
        }
    ]


async def test_wire_messages_round_trip(server: ScriptedOpenAI, make: MakeProvider) -> None:
    call = ToolCall("call_7", "clock", '{"tz": "UTC"}')
    messages = (
        msg("system", "be brief"),
        msg("user", "what time is it?"),
        msg("assistant", "", tool_calls=(call,), thinking="I should call the clock."),
        msg("tool", "12:00", tool_call_id="call_7", name="clock"),
        msg("assistant", "It is noon.", thinking="easy"),
        msg("user", "[earlier messages trimmed]", kind=MessageKind.TRIM_BREADCRUMB),
        msg("user", "thanks"),
    )
    server.enqueue(Reply(text="you're welcome"))
    await make().complete(req(*messages))
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what time is it?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "clock", "arguments": '{"tz": "UTC"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "12:00"},
        {"role": "assistant", "content": "It is noon."},
        {"role": "user", "content": "[earlier messages trimmed]"},
        {"role": "user", "content": "thanks"},
    ]
    assert "I should call the clock." not in json.dumps(server.requests[0])


# --------------------------------------------------------------------------- retries


async def test_rate_limit_honours_retry_after(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(rate_limited(retry_after=0.2), Reply(text="finally"))
    started = time.monotonic()
    result = await make().complete(req())
    assert time.monotonic() - started >= 0.2
    assert result.text == "finally"
    assert len(server.requests) == 2


async def test_server_error_retried(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(server_error(503), Reply(text="recovered"))
    result = await make().complete(req())
    assert result.text == "recovered"
    assert len(server.requests) == 2


async def test_retries_bounded(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(server_error(503), server_error(502), server_error(500), Reply(text="late"))
    with pytest.raises(ProviderUnavailable, match="HTTP 500"):
        await make(max_retries=2).complete(req())
    assert len(server.requests) == 3
    assert server.pending() == 1


async def test_rate_limit_exhausted(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(rate_limited(0.01), rate_limited(0.01))
    with pytest.raises(RateLimited) as info:
        await make(max_retries=1).complete(req())
    assert info.value.retry_after == pytest.approx(0.01)
    assert len(server.requests) == 2


# --------------------------------------------------------------------------- terminal errors


async def test_overflow_not_retried(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(overflow(), Reply(text="never"))
    with pytest.raises(ContextOverflow, match="maximum context length"):
        await make().complete(req())
    assert len(server.requests) == 1


async def test_auth_error_not_retried(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(ErrorReply(401, "Incorrect API key provided.", code="invalid_api_key"), Reply(text="x"))
    with pytest.raises(ProviderAuthError) as info:
        await make(api_key_env="NETCLAW_TEST_KEY").complete(req())
    text = str(info.value)
    assert "NETCLAW_TEST_KEY" in text
    assert "401" in text
    assert "Incorrect API key provided." in text
    assert len(server.requests) == 1


async def test_bad_request(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(ErrorReply(400, "'messages' must not be empty"))
    with pytest.raises(ProviderBadRequest, match="'messages' must not be empty"):
        await make().complete(req())
    assert len(server.requests) == 1


async def test_connection_refused(make: MakeProvider) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ProviderUnavailable) as info:
        await make(url, max_retries=1).complete(req())
    assert url in str(info.value)
    assert "server running" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_mid_stream_drop_not_retried(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(
        Reply(text="a long answer that will be cut short", chunk_size=4, drop_after_chunks=4),
        Reply(text="retry must not happen"),
    )
    rec = Recorder()
    with pytest.raises(ProviderUnavailable, match="stream ended early"):
        await make().complete(req(), rec)
    assert rec.joined("text") == "a long answer that will be cut short"[:12]
    assert len(server.requests) == 1


async def test_drop_before_any_text_is_retried(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(Reply(text="lost", drop_after_chunks=1), Reply(text="second try"))
    rec = Recorder()
    result = await make().complete(req(), rec)
    assert result.text == "second try"
    assert rec.joined("text") == "second try"
    assert len(server.requests) == 2


async def test_timeout(server: ScriptedOpenAI, make: MakeProvider) -> None:
    server.enqueue(Reply(text="too late", delay_s=1.0))
    with pytest.raises(ProviderUnavailable, match="no response"):
        await make(timeout_s=0.2, max_retries=0).complete(req())


async def test_stream_stall_before_text_is_retried(
    server: ScriptedOpenAI, make: MakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    # The scripted server stalls right after its first (empty, role-only) chunk.
    server.enqueue(Reply(text="slow words", chunk_delay_s=1.0), Reply(text="fast"))
    rec = Recorder()
    result = await make(timeout_s=0.2).complete(req(), rec)
    assert result.text == "fast"
    assert rec.joined("text") == "fast"
    assert len(server.requests) == 2
    assert "stream stalled" in caplog.text


# --------------------------------------------------------------------------- check / factory


async def test_check(make: MakeProvider) -> None:
    assert await make().check() == "reachable, 1 model"


async def test_check_unreachable(make: MakeProvider) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ProviderUnavailable, match=f"127.0.0.1:{port}"):
        await make(f"http://127.0.0.1:{port}/v1").check()


async def test_make_provider() -> None:
    provider = make_provider("local", ProviderConfig.model_validate({}))
    try:
        assert isinstance(provider, OpenAIProvider)
        assert provider.name == "local"
    finally:
        await provider.aclose()
    claude = make_provider("claude", ProviderConfig.model_validate({"type": "anthropic"}))
    try:
        assert isinstance(claude, AnthropicProvider)
    finally:
        await claude.aclose()


# --------------------------------------------------------------------------- server quirks
# Shapes the scripted server does not produce, served through the transport seam.


def quirk_provider(handler: Callable[[httpx.Request], httpx.Response], **cfg: Any) -> OpenAIProvider:
    config = ProviderConfig(base_url="http://quirk.test/v1", **cfg)
    return OpenAIProvider("quirk", config, transport=httpx.MockTransport(handler))


def sse(*events: str) -> httpx.Response:
    body = "".join(f"{e}\n\n" for e in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


async def test_non_streaming_json_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "plain",
                            "reasoning": "hmm",
                            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 2,
                    "prompt_tokens_details": {"cached_tokens": 8},
                },
            },
        )

    monkeypatch.setenv("NETCLAW_TEST_KEY", "sk-test")
    provider = quirk_provider(handler, api_key_env="NETCLAW_TEST_KEY")
    rec = Recorder()
    try:
        result = await provider.complete(req(), rec)
    finally:
        await provider.aclose()
    assert seen[0].headers["authorization"] == "Bearer sk-test"
    assert result.text == "plain"
    assert result.thinking == "hmm"
    assert rec.joined("text") == "plain"
    assert rec.joined("thinking") == "hmm"
    assert len(result.tool_calls) == 1
    assert result.tool_calls[0].name == "f"
    assert result.tool_calls[0].arguments == "{}"
    assert result.tool_calls[0].id.startswith("call_")
    assert result.usage is not None
    assert result.usage.cache_read_tokens == 8


async def test_sse_variants() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return sse(
            ": keep-alive comment",
            "event: message\ndata:" + json.dumps({"choices": [{"delta": {"reasoning": "r"}}]}),
            "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}]}),
            "data: " + json.dumps({"choices": [{"delta": {"content": "b"}}]}),
            "data: " + json.dumps({"choices": [{"delta": {}, "finish_reason": "length"}]}),
        )  # no [DONE], but a finish_reason: complete

    provider = quirk_provider(handler)
    try:
        result = await provider.complete(req())
    finally:
        await provider.aclose()
    assert (result.thinking, result.text, result.finish_reason) == ("r", "ab", "length")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"message": "boom", "type": "server_error"}, ProviderUnavailable),
        (
            {"message": "the request exceeds the available context size", "code": 400},
            ContextOverflow,
        ),
    ],
)
async def test_error_inside_stream(error: dict[str, Any], expected: type[Exception]) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return sse("data: " + json.dumps({"error": error}))

    provider = quirk_provider(handler, max_retries=0)
    try:
        with pytest.raises(expected):
            await provider.complete(req())
    finally:
        await provider.aclose()
    assert calls == 1


async def test_non_sse_body_is_protocol_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/html"}, text="<html>hi</html>")

    provider = quirk_provider(handler, max_retries=0)
    try:
        with pytest.raises(ProviderProtocolError, match="not an event stream"):
            await provider.complete(req())
    finally:
        await provider.aclose()
