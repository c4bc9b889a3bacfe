"""``web_search`` against fake SearXNG, Brave and Tavily servers on 127.0.0.1 that answer in
each backend's real format (tests/fakes/search_backends.py): the request each expects
(key header, parameters), results read and capped, and every error a clear tool error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from netclaw.config import WebSearchConfig
from netclaw.errors import ToolError
from netclaw.messages import ToolCall
from netclaw.security.trust import unlabel
from netclaw.tools import ToolContext, ToolRegistry
from netclaw.tools._web_search import web_search_tool
from tests.fakes.search_backends import KEY, Backend, FakeSearch, Result

CTX = ToolContext("cli:test", "personal")
BACKENDS: list[Backend] = ["searxng", "brave", "tavily"]


@pytest.fixture(params=BACKENDS)
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeSearch]:
    server = FakeSearch(request.param)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def config_for(server: FakeSearch, **extra: Any) -> WebSearchConfig:
    key_env = {} if server.backend == "searxng" else {"api_key_env": "SEARCH_KEY"}
    return WebSearchConfig(enabled=True, backend=server.backend, url=server.url, **key_env, **extra)


async def search(config: WebSearchConfig, **args: Any) -> str:
    tool = web_search_tool(lambda: config)
    return await tool.handler(args, CTX)  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_KEY", KEY)


async def test_results_in_each_backend_format_become_titles_urls_snippets_and_dates(fake: FakeSearch) -> None:
    text = await search(config_for(fake), query="  netclaw   release ")
    assert text.startswith(f"Results for 'netclaw release' ({fake.backend}, 2):")
    # Highlight tags and entities are gone; the date is there where the backend gives one.
    assert (
        "1. Netclaw release notes\n   https://example.org/netclaw/releases\n   (2026-03-01T10:00:00) Version 2.0 adds skills & search."
        in text
    )
    assert (
        "2. Netclaw on the forum\n   https://forum.example.org/t/netclaw\n   People talk about netclaw."
        in text
    )
    [sent] = fake.requests
    if fake.backend == "searxng":
        assert sent["method"] == "GET" and sent["query"] == {"q": "netclaw release", "format": "json"}
    elif fake.backend == "brave":
        assert sent["method"] == "GET" and sent["query"] == {"q": "netclaw release", "count": "10"}
        assert sent["headers"]["X-Subscription-Token"] == KEY
    else:
        assert sent["method"] == "POST" and sent["headers"]["Authorization"] == f"Bearer {KEY}"
        assert sent["json"] == {"query": "netclaw release", "max_results": 10, "search_depth": "basic"}


async def test_results_are_capped_deduplicated_and_only_http(fake: FakeSearch) -> None:
    fake.results = [
        Result("javascript", "javascript:alert(1)", "no"),
        *[Result(f"Page {n}", f"https://example.org/{n}", "x" * 1000) for n in range(30)],
        Result("again", "https://example.org/0", "duplicate"),
    ]
    config = config_for(fake, max_results=4, max_snippet_chars=60)
    text = await search(config, query="pages", max_results=10)  # the model cannot ask past the cap
    assert "(" + fake.backend + ", 4)" in text
    assert "javascript:" not in text and "duplicate" not in text
    assert "   " + "x" * 59 + "…" in text and "x" * 61 not in text
    assert "https://example.org/3" in text and "https://example.org/4\n" not in text
    fewer = await search(config, query="pages", max_results=2)
    assert "(" + fake.backend + ", 2)" in fewer


async def test_no_results_says_so(fake: FakeSearch) -> None:
    fake.results = []
    assert await search(config_for(fake), query="nothing") == f"No results for 'nothing' ({fake.backend})."


async def test_searxng_names_the_engines_that_did_not_answer() -> None:
    server = FakeSearch("searxng")
    server.unresponsive = [["google", "timeout"], ["bing", "CAPTCHA"]]
    await server.start()
    try:
        text = await search(config_for(server), query="q")
    finally:
        await server.stop()
    assert text.endswith("[engines that did not answer: google (timeout), bing (CAPTCHA)]")


@pytest.mark.parametrize("backend", ["brave", "tavily"])
async def test_a_wrong_key_is_a_tool_error_that_says_retrying_will_not_help(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEARCH_KEY", "wrong-key")
    server = FakeSearch(backend)
    await server.start()
    try:
        with pytest.raises(ToolError) as caught:
            await search(config_for(server), query="q")
    finally:
        await server.stop()
    message = str(caught.value)
    assert f"{backend} refused the API key" in message and "Searching again will not help" in message
    expected = "SUBSCRIPTION_TOKEN_INVALID" if backend == "brave" else "missing or invalid API key"
    assert expected in message
    assert "wrong-key" not in message


async def test_a_missing_key_says_where_to_put_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEARCH_KEY")
    server = FakeSearch("brave")
    await server.start()
    try:
        with pytest.raises(
            ToolError, match=r"the brave API key is missing.*set the environment variable SEARCH_KEY"
        ):
            await search(config_for(server), query="q")
    finally:
        await server.stop()
    assert server.requests == []  # nothing was sent without a key


async def test_a_rate_limit_says_when_to_try_again(fake: FakeSearch) -> None:
    body = {
        "brave": {
            "type": "ErrorResponse",
            "error": {
                "status": 429,
                "code": "RATE_LIMITED",
                "detail": "Request rate limit exceeded for plan.",
            },
        }
    }
    fake.fail_next(429, body.get(fake.backend, {"detail": {"error": "Too many requests"}}), Retry_After="7")
    with pytest.raises(
        ToolError, match=f"rate-limited by {fake.backend} \\(HTTP 429.*\\); try again in 7 s, not at once"
    ):
        await search(config_for(fake), query="q")


async def test_a_backend_that_fails_or_is_down_or_slow_is_a_tool_error(fake: FakeSearch) -> None:
    config = config_for(fake, timeout_s=10)  # room for a loaded machine; the slow case has its own
    fake.fail_next(503, "<html>Service Unavailable</html>", Content_Type="text/html")
    with pytest.raises(ToolError, match=f"{fake.backend} is failing \\(HTTP 503\\); it may be down"):
        await search(config, query="q")
    fake.fail_next(200, "this is not json")
    with pytest.raises(
        ToolError, match=r"answered HTTP 200 with something that is not JSON: this is not json"
    ):
        await search(config, query="q")
    fake.fail_next(200, {"unexpected": True} if fake.backend != "brave" else {"web": {"results": "nope"}})
    with pytest.raises(ToolError, match=r"JSON not in its search format"):
        await search(config, query="q")
    fake.fail_next(200, {}, delay_s=3)
    with pytest.raises(ToolError, match=r"did not answer within 0.5s; try again later"):
        await search(config_for(fake, timeout_s=0.5), query="q")


async def test_a_backend_nobody_listens_on_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = WebSearchConfig(enabled=True, backend="searxng", url=f"http://127.0.0.1:{port}")
    with pytest.raises(
        ToolError, match=f"web search is unavailable: searxng at http://127.0.0.1:{port} cannot be reached"
    ):
        await search(config, query="q")


async def test_searxng_without_json_enabled_says_how_to_enable_it() -> None:
    server = FakeSearch("searxng")
    server.fail_next(403, "<html>403 Forbidden</html>", Content_Type="text/html")
    await server.start()
    try:
        with pytest.raises(
            ToolError,
            match=r"SearXNG refused the JSON format \(HTTP 403\).*search.formats in its settings.yml",
        ):
            await search(config_for(server), query="q")
    finally:
        await server.stop()


async def test_tavily_plan_limits_and_a_redirect_are_named() -> None:
    server = FakeSearch("tavily")
    server.fail_next(432, {"detail": {"error": "This request exceeds your plan's set usage limit."}})
    server.fail_next(302, "", Location="https://elsewhere.example/search")
    await server.start()
    try:
        with pytest.raises(
            ToolError, match=r"plan or usage limit is reached \(HTTP 432: This request exceeds"
        ):
            await search(config_for(server), query="q")
        with pytest.raises(ToolError, match=r"redirects \(HTTP 302\) to https://elsewhere.example/search"):
            await search(config_for(server), query="q")
    finally:
        await server.stop()


async def test_bad_arguments_are_refused_before_any_request(fake: FakeSearch) -> None:
    config = config_for(fake)
    for args, message in (
        ({}, "'query' is required"),
        ({"query": "   "}, "'query' is required"),
        ({"query": "x" * 500}, "at most 400"),
        ({"query": "q", "max_results": 0}, "'max_results' must be"),
        ({"query": "q", "max_results": True}, "'max_results' must be"),
    ):
        with pytest.raises(ToolError, match=message):
            await search(config, **args)
    assert fake.requests == []


async def test_the_registry_labels_search_results_untrusted(fake: FakeSearch) -> None:
    registry = ToolRegistry([web_search_tool(lambda: config_for(fake))])
    result = await registry.run(ToolCall("c1", "web_search", '{"query": "q"}'), 10, context=CTX)
    assert not result.is_error
    assert result.content.startswith('<untrusted-content source="web_search"')
    assert unlabel(result.content).startswith("Results for 'q'")
    fake.fail_next(500, "boom")
    failed = await registry.run(ToolCall("c2", "web_search", '{"query": "q"}'), 10, context=CTX)
    # An error quotes what the backend said: labelled too, its "error: " left in front.
    assert failed.is_error and failed.content.startswith('error: <untrusted-content source="web_search"')
    assert unlabel(failed.content).startswith("error: web search:")
