"""Provider prompt caching, over real HTTP against the scripted providers: Anthropic
requests carry valid ``cache_control`` breakpoints (the fake refuses invalid ones, as the
API would) and an OpenAI-compatible request a per-session ``prompt_cache_key``; through the
daemon, consecutive requests repeat each other as a prefix, and the cached tokens the
provider reports show in usage, ``/status`` and ``/metrics``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from itertools import pairwise
from typing import Any

import pytest

from netclaw.config import ProviderConfig
from netclaw.history.compaction import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from netclaw.llm import ProviderRequest, ToolSchema
from netclaw.messages import ChatMessage, MessageKind, ToolCall
from netclaw.providers import AnthropicProvider, OpenAIProvider
from netclaw.providers._anthropic import EXTENDED_TTL_BETA
from tests.conftest import DaemonHandle
from tests.fakes._scripted_server import ScriptedServerThread
from tests.fakes.scripted_anthropic import Reply as AReply
from tests.fakes.scripted_anthropic import ScriptedAnthropic, validate_request
from tests.fakes.scripted_anthropic import ToolCallSpec as AToolCall
from tests.fakes.scripted_openai import Reply, ScriptedOpenAI, ScriptedOpenAIThread

SUMMARY = "\n\n".join(f"## {name}\n- noted" for name in REQUIRED_SECTIONS)

TOOLS = [
    ToolSchema("zeta", "z", {"type": "object", "properties": {}}),
    ToolSchema("alpha", "a", {"type": "object"}),
]


def msg(role: Any, content: str, **kw: Any) -> ChatMessage:
    return ChatMessage(id=f"{role}-{content[:8]}-{len(content)}", role=role, content=content, ts=1.0, **kw)


def marks(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = [
        (f"tools.{i}", t["cache_control"])
        for i, t in enumerate(body.get("tools") or [])
        if "cache_control" in t
    ]
    system = body.get("system")
    if isinstance(system, list):
        found += [(f"system.{i}", b["cache_control"]) for i, b in enumerate(system) if "cache_control" in b]
    for n, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            found += [
                (f"messages.{n}.{k}", b["cache_control"])
                for k, b in enumerate(m["content"])
                if "cache_control" in b
            ]
    return found


# -- the providers ---------------------------------------------------------------------------


@pytest.fixture
async def anthropic() -> AsyncIterator[ScriptedAnthropic]:
    async with ScriptedAnthropic() as fake:
        yield fake


def conversation() -> list[ChatMessage]:
    call = ToolCall("toolu_1", "alpha", "{}")
    return [
        msg("system", "You are netclaw."),
        msg("user", "first"),
        msg("assistant", "one"),
        msg("user", "second"),
        msg("assistant", "", tool_calls=(call,)),
        msg("tool", "result", tool_call_id="toolu_1", name="alpha"),
        msg(
            "user",
            "[netclaw context for this turn; not written by the user]\nThe time",
            kind=MessageKind.CONTEXT,
        ),
    ]


async def test_anthropic_requests_carry_valid_breakpoints_and_read_the_cache(
    anthropic: ScriptedAnthropic,
) -> None:
    provider = AnthropicProvider("claude", ProviderConfig(type="anthropic", base_url=anthropic.base_url))
    try:
        request = ProviderRequest("claude-scripted", conversation(), tools=TOOLS)
        first = await provider.complete(request)
        again = await provider.complete(request)
    finally:
        await provider.aclose()
    assert anthropic.rejected == []
    body = anthropic.requests[0]
    assert validate_request(body) is None
    found = marks(body)
    # After tools + system, on the message before the newest one, and on the newest one.
    assert [where for where, _ in found] == ["system.0", "messages.2.0", "messages.4.1"]
    assert all(control == {"type": "ephemeral"} for _, control in found)
    assert body["system"] == [
        {"type": "text", "text": "You are netclaw.", "cache_control": {"type": "ephemeral"}}
    ]
    # The first call writes the prefix, the second reads it (the fake simulates the cache).
    assert first.usage is not None and again.usage is not None
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert again.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert again.usage.input_tokens == first.usage.input_tokens  # the whole prompt, either way


async def test_an_hour_long_cache_says_so_and_off_means_no_markers(anthropic: ScriptedAnthropic) -> None:
    hour = AnthropicProvider(
        "claude", ProviderConfig(type="anthropic", base_url=anthropic.base_url, cache_ttl="1h")
    )
    off = AnthropicProvider(
        "claude", ProviderConfig(type="anthropic", base_url=anthropic.base_url, prompt_cache="off")
    )
    try:
        await hour.complete(ProviderRequest("claude-scripted", conversation()))
        await off.complete(ProviderRequest("claude-scripted", conversation()))
    finally:
        await hour.aclose()
        await off.aclose()
    assert anthropic.rejected == []
    assert {json.dumps(c) for _, c in marks(anthropic.requests[0])} == {'{"type": "ephemeral", "ttl": "1h"}'}
    assert anthropic.headers[0].get("anthropic-beta") == EXTENDED_TTL_BETA
    assert marks(anthropic.requests[1]) == [] and isinstance(anthropic.requests[1]["system"], str)
    assert "anthropic-beta" not in anthropic.headers[1]


def test_the_fake_refuses_what_the_api_refuses() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": f"t{i}", "cache_control": {"type": "ephemeral"}}],
            }
            if i % 2 == 0
            else {
                "role": "assistant",
                "content": [{"type": "text", "text": f"a{i}", "cache_control": {"type": "ephemeral"}}],
            }
            for i in range(5)
        ],
    }
    assert "maximum of 4" in (validate_request(body) or "")
    body["messages"] = body["messages"][:1]
    body["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert "must not come after" in (validate_request(body) or "")
    body["messages"][0]["content"][0]["cache_control"] = {"type": "persistent"}
    assert "ephemeral" in (validate_request(body) or "")


async def test_openai_requests_carry_a_per_session_cache_key() -> None:
    async with ScriptedOpenAI() as fake:
        on = OpenAIProvider("local", ProviderConfig(base_url=fake.base_url))
        off = OpenAIProvider("local", ProviderConfig(base_url=fake.base_url, prompt_cache="off"))
        try:
            request = ProviderRequest("scripted", conversation()[:4], cache_key="k" * 32)
            await on.complete(request)
            second = await on.complete(request)
            await off.complete(request)
        finally:
            await on.aclose()
            await off.aclose()
    assert fake.requests[0]["prompt_cache_key"] == "k" * 32
    assert "prompt_cache_key" not in fake.requests[2]
    assert second.usage is not None and second.usage.cache_read_tokens > 0  # cached_tokens read back


# -- through the daemon -------------------------------------------------------------------------


@pytest.fixture
def claude() -> Iterator[ScriptedServerThread[AReply, Any]]:
    with ScriptedServerThread(ScriptedAnthropic(), "scripted-anthropic") as thread:
        yield thread


def start_on_claude(start_daemon: Any, base_url: str) -> DaemonHandle:
    handle: DaemonHandle = start_daemon(
        providers={"local": {"type": "anthropic", "base_url": base_url, "timeout_s": 10, "max_retries": 1}},
        models={
            "main": {
                "provider": "local",
                "model": "claude-scripted",
                "context_window": 32768,
                "max_output_tokens": 1024,
                "price": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75},
            }
        },
    )
    return handle


def test_cached_tokens_show_in_usage_status_and_metrics(start_daemon: Any, claude: Any) -> None:
    handle = start_on_claude(start_daemon, claude.base_url)
    sid = "cli:cached"
    claude.enqueue(AReply(tool_calls=[AToolCall("current_time", {})]), AReply(text="noon"))
    for text in ("what time is it?", "and the date?", "thanks"):
        assert handle.send(sid, text, wait=True).status_code == 200
    server: ScriptedAnthropic = claude.server
    assert server.rejected == [] and len(server.requests) == 4
    for body in server.requests:
        assert 1 <= len(marks(body)) <= 4
    usage = handle.http.get("/api/usage", params={"by": "session"}).json()
    (row,) = usage
    assert row["cache_read_tokens"] > 0 and row["cache_write_tokens"] > 0
    assert row["cost"] > 0 and row["currency"] == "USD"
    status = handle.daemon.io.run(handle.daemon.gateway.commands.status_text(sid), 10)  # type: ignore[union-attr]
    assert "from the provider's cache" in status and "USD" in status
    metrics = handle.http.get("/metrics").text
    assert 'netclaw_provider_tokens_total{kind="cache_read"}' in metrics
    assert 'netclaw_cost_total{model="claude-scripted"}' in metrics


def test_consecutive_requests_repeat_each_other_as_a_prefix(
    start_daemon: Any, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon()
    sid = "cli:prefix"
    for n in range(6):
        assert handle.send(sid, f"message {n}", wait=True).status_code == 200
    bodies = scripted.requests
    for before, after in pairwise(bodies):
        assert after["tools"] == before["tools"]
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert after["prompt_cache_key"] == before["prompt_cache_key"]
    names = [t["function"]["name"] for t in bodies[0]["tools"]]
    assert names == sorted(names)
    usage = handle.http.get("/api/usage").json()
    assert usage[0]["cache_read_tokens"] > 0  # the OpenAI fake's cached_tokens, recorded


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_usage_counts_money_and_compaction_calls_on_either_journal(
    backend: str, start_daemon: Any, scripted: ScriptedOpenAIThread, request: pytest.FixtureRequest
) -> None:
    sections: dict[str, Any] = {}
    if backend == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        request.getfixturevalue("monkeypatch").setenv("NETCLAW_TEST_PG_DSN", dsn)
        sections = {
            "journal": {"backend": "postgres", "dsn_env": "NETCLAW_TEST_PG_DSN"},
            "cluster": {"node_id": "n1"},
        }
    handle = start_daemon(
        models={"main": {"provider": "local", "model": "scripted", "price": {"input": 2, "output": 10}}},
        **sections,
    )
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]", usage=(500, 50)))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=SUMMARY, usage=(500, 50)))
    for n in range(3):
        scripted.enqueue(Reply(text=f"answer {n}", usage=(100, 10)))
        assert handle.send("cli:money", f"message {n}", wait=True).status_code == 200
    compacted = handle.send("cli:money", "/compact").json()["notice"]
    assert "summarised" in compacted
    (row,) = handle.http.get("/api/usage").json()
    # Three turns (100 in, 10 out each), and the compaction's flush and summary (500, 50 each).
    assert (row["turns"], row["input_tokens"], row["output_tokens"]) == (3, 1300, 130)
    assert row["cost"] == pytest.approx((1300 * 2 + 130 * 10) / 1_000_000)
