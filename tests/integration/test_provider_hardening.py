"""Providers against servers that misbehave, over real HTTP: a body held open after a
complete answer, answers and error bodies too large to hold, JSON nested past the
parser's limit, and an overflow that says the server's window is smaller than configured."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from netclaw.config import ProviderConfig
from netclaw.errors import ProviderProtocolError, ProviderUnavailable
from netclaw.messages import ChatMessage
from netclaw.providers import AnthropicProvider, OpenAIProvider, ProviderRequest
from netclaw.providers._http import MAX_ANSWER_BYTES, MAX_ERROR_BODY_BYTES, TAIL_S
from tests.fakes import scripted_anthropic as anthropic
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAI

REQUEST = ProviderRequest(
    model="scripted",
    messages=(ChatMessage(id="u1", role="user", content="hello", ts=0.0),),
)


@pytest.fixture
async def openai_server() -> AsyncIterator[ScriptedOpenAI]:
    async with ScriptedOpenAI() as fake:
        yield fake


def openai(base_url: str, **config: Any) -> OpenAIProvider:
    return OpenAIProvider(
        "local", ProviderConfig(base_url=base_url, timeout_s=20.0, **config), retry_base_delay=0.01
    )


@pytest.mark.parametrize("omit_end", [False, True], ids=["after [DONE]", "after finish_reason"])
async def test_a_complete_answer_is_not_lost_to_a_body_held_open(
    openai_server: ScriptedOpenAI, omit_end: bool
) -> None:
    openai_server.enqueue(Reply("the whole answer", usage=(11, 3), hold_open_s=30.0, omit_end=omit_end))
    provider = openai(openai_server.base_url)
    started = time.monotonic()
    try:
        completion = await provider.complete(REQUEST)
    finally:
        await provider.aclose()
    assert completion.text == "the whole answer"
    assert completion.usage is not None and completion.usage.output_tokens == 3  # after finish_reason
    assert time.monotonic() - started < TAIL_S + 3  # not the server's 30 s, nor the 20 s timeout


async def test_anthropic_finishes_on_message_stop() -> None:
    async with anthropic.ScriptedAnthropic() as server:
        server.enqueue(anthropic.Reply("done here", hold_open_s=30.0))
        provider = AnthropicProvider(
            "claude",
            ProviderConfig(type="anthropic", base_url=server.base_url, timeout_s=20.0),
            retry_base_delay=0.01,
        )
        started = time.monotonic()
        try:
            completion = await provider.complete(REQUEST)
        finally:
            await provider.aclose()
    assert completion.text == "done here" and time.monotonic() - started < TAIL_S + 3


async def test_an_answer_past_the_cap_is_refused(openai_server: ScriptedOpenAI) -> None:
    openai_server.enqueue(Reply("x" * (MAX_ANSWER_BYTES + 1024), chunk_size=256 * 1024))
    provider = openai(openai_server.base_url)
    try:
        with pytest.raises(ProviderProtocolError, match="larger than 8 MB"):
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()


async def test_a_huge_error_body_is_read_only_so_far(openai_server: ScriptedOpenAI) -> None:
    huge = "E" * (50 * 1024 * 1024)
    openai_server.enqueue(*[ErrorReply(status=500, body=huge) for _ in range(3)])
    provider = openai(openai_server.base_url, max_retries=2)
    started = time.monotonic()
    try:
        with pytest.raises(ProviderUnavailable) as caught:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()
    assert len(str(caught.value)) < MAX_ERROR_BODY_BYTES + 1000
    assert time.monotonic() - started < 10


@pytest.fixture
async def nested_server() -> AsyncIterator[str]:
    """A server whose one stream event is JSON nested 100,000 deep."""

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()


async def test_json_nested_past_the_limit_is_a_protocol_error(nested_server: str) -> None:
    provider = openai(nested_server)
    try:
        with pytest.raises(ProviderProtocolError, match="not JSON"):
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()
