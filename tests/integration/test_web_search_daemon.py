"""``web_search`` through the daemon, a scripted model calling it and then ``web_fetch`` on a
result, against a fake of each backend speaking its real format: the round works; the
backend on a private address (the operator's) is reached while the SSRF rules still stop
the model fetching a private result; every error is a tool error the model sees;
audiences decide who may search."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from netclaw.security.trust import unlabel
from tests.conftest import DaemonHandle
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.search_backends import KEY, Backend, FakeSearchThread, Result

ARTICLE = "<html><body><h1>Netclaw 2.0</h1><p>Skills and web search arrived.</p></body></html>"


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = ARTICLE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/article"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["searxng", "brave", "tavily"])
def backend(request: pytest.FixtureRequest, page: str) -> Iterator[FakeSearchThread]:
    results = [Result("Netclaw 2.0 is out", page, "Skills and web search.", "2026-03-01")]
    with FakeSearchThread(request.param, results=results) as fake:
        yield fake


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_KEY", KEY)


def search_config(fake: FakeSearchThread, *, private_fetch: bool = True) -> dict[str, Any]:
    name: Backend = fake.server.backend
    search: dict[str, Any] = {"enabled": True, "backend": name, "url": fake.url}
    if name != "searxng":
        search["api_key_env"] = "SEARCH_KEY"
    return {"web_search": search, "web_fetch": {"allow_private_networks": private_fetch}}


def tool_messages(scripted: ScriptedOpenAIThread) -> list[dict[str, Any]]:
    return [m for m in scripted.requests[-1]["messages"] if m["role"] == "tool"]


def test_search_then_fetch_round_against_each_backend(
    start_daemon: Callable[..., DaemonHandle],
    scripted: ScriptedOpenAIThread,
    backend: FakeSearchThread,
    page: str,
) -> None:
    handle = start_daemon(tools=search_config(backend))
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("web_search", {"query": "netclaw release"})]),
        Reply(tool_calls=[ToolCallSpec("web_fetch", {"url": page})]),
        Reply(text="Netclaw 2.0 brought skills."),
    )
    answer = handle.send("cli:search", "what is new in netclaw?", wait=True)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "Netclaw 2.0 brought skills."
    searched, fetched = tool_messages(scripted)
    assert searched["content"].startswith('<untrusted-content source="web_search"')
    assert f"1. Netclaw 2.0 is out\n   {page}\n   (2026-03-01) Skills and web search." in searched["content"]
    assert fetched["content"].startswith('<untrusted-content source="web_fetch"')
    assert "Skills and web search arrived." in fetched["content"]
    assert len(backend.server.requests) == 1
    # The tool is offered to the model, next to web_fetch.
    offered = {t["function"]["name"] for t in scripted.requests[0]["tools"]}
    assert {"web_search", "web_fetch"} <= offered


def test_a_private_backend_is_reached_but_a_private_result_is_not_fetched(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread, page: str
) -> None:
    with FakeSearchThread("searxng", results=[Result("Intranet", page, "inside")]) as fake:
        handle = start_daemon(tools=search_config(fake, private_fetch=False))
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("web_search", {"query": "intranet"})]),
            Reply(tool_calls=[ToolCallSpec("web_fetch", {"url": page})]),
            Reply(text="could not read it"),
        )
        assert handle.send("cli:ssrf", "find the intranet page", wait=True).status_code == 200
    searched, fetched = tool_messages(scripted)
    assert page in searched["content"]  # the search on 127.0.0.1 (the operator's instance) ran
    assert fetched["content"].startswith('error: <untrusted-content source="web_fetch"')  # it ran
    assert unlabel(fetched["content"]).startswith(
        "error: refused '127.0.0.1': it resolves to 127.0.0.1, a loopback address"
    )


def test_errors_reach_the_model_as_tool_errors(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeSearchThread("brave") as fake:
        handle = start_daemon(tools=search_config(fake))
        monkeypatch.setenv("SEARCH_KEY", "revoked-key")  # read at each call: no restart needed to see it
        fake.server.fail_next(
            429,
            {
                "type": "ErrorResponse",
                "error": {
                    "status": 429,
                    "code": "RATE_LIMITED",
                    "detail": "Request rate limit exceeded for plan.",
                },
            },
            Retry_After="2",
        )
        scripted.enqueue(
            Reply(
                tool_calls=[
                    ToolCallSpec("web_search", {"query": "a"}),
                    ToolCallSpec("web_search", {"query": "b"}),
                ]
            ),
            Reply(text="search is not working"),
        )
        assert handle.send("cli:errors", "search twice", wait=True).status_code == 200
    # What the backend said is its text, not netclaw's: labelled, with the "error: " in front.
    labelled = sorted(m["content"] for m in tool_messages(scripted))
    assert all(c.startswith('error: <untrusted-content source="web_search"') for c in labelled), labelled
    contents = [unlabel(c) for c in labelled]
    assert any(
        c.startswith("error: web search: brave refused the API key (HTTP 422: SUBSCRIPTION_TOKEN_INVALID")
        for c in contents
    ), contents
    assert any(
        c.startswith("error: web search is rate-limited by brave (HTTP 429: RATE_LIMITED") for c in contents
    ), contents


def test_audiences_decide_who_may_search(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_SECRET", "hook-secret-0123456789-0123456789abcdef")
    with FakeSearchThread("searxng") as fake:
        handle = start_daemon(
            tools=search_config(fake),
            webhooks={
                "routes": {"form": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}}}
            },  # public
        )
        scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web_search", {"query": "x"})]), Reply(text="no"))
        done = handle.http.post(
            "/webhooks/form",
            json={"text": "search for me"},
            params={"wait": "1"},
            headers={"Authorization": "Bearer hook-secret-0123456789-0123456789abcdef"},
        )
        assert done.status_code == 200, done.text
        assert fake.server.requests == []
    offered = {t["function"]["name"] for t in scripted.requests[-1].get("tools", [])}
    assert "web_search" not in offered
    [refused] = tool_messages(scripted)
    assert refused["content"] == (
        "error: tool 'web_search' is not available to public sessions or to the role of the person whose turn this is"
    )
