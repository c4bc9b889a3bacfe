"""Fake web search backends on 127.0.0.1, each answering in its real wire format
(see netclaw/tools/_search_backends.py for the formats and where they come from):

- SearXNG: ``GET /search?q=…&format=json`` → ``{"query", "number_of_results", "results":
  [{"url", "title", "content", "engine", "engines", "parsed_url", "template", "positions",
  "score", "category", "publishedDate"}], "answers", "corrections", "infoboxes",
  "suggestions", "unresponsive_engines"}``; ``format`` other than json → 403 (as an
  instance whose settings.yml does not list it).
- Brave: ``GET /res/v1/web/search?q=…&count=N`` with ``X-Subscription-Token`` →
  ``{"type": "search", "query": {...}, "mixed": {...}, "web": {"type": "search",
  "results": [{"type": "search_result", "title", "url", "description", "page_age", "age",
  "language", "family_friendly", "meta_url": {...}}]}}``; a wrong token → 422
  ``{"type": "ErrorResponse", "error": {"id", "status", "code": "SUBSCRIPTION_TOKEN_INVALID",
  "detail", "meta"}, "time"}``.
- Tavily: ``POST /search`` with ``Authorization: Bearer`` and a JSON body →
  ``{"query", "follow_up_questions", "answer", "images", "results": [{"title", "url",
  "content", "score", "raw_content"}], "response_time"}``; a wrong key → 401
  ``{"detail": {"error": "Unauthorized: missing or invalid API key."}}``.

``fail_next`` scripts the next answers (status, body, headers) to test error paths;
``requests`` records what arrived (method, path, query, headers, JSON body).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from aiohttp import web

from tests.fakes._loop_thread import run_until_stopped

Backend = Literal["searxng", "brave", "tavily"]
KEY = "test-search-key-0123456789"


@dataclass
class Result:
    title: str
    url: str
    snippet: str
    date: str | None = None


@dataclass
class Scripted:
    status: int
    body: str | dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


DEFAULT_RESULTS = [
    Result(
        "Netclaw <strong>release</strong> notes",
        "https://example.org/netclaw/releases",
        "Version 2.0 adds skills &amp; search.",
        "2026-03-01T10:00:00",
    ),
    Result("Netclaw on the forum", "https://forum.example.org/t/netclaw", "People talk about netclaw."),
]


class FakeSearch:
    def __init__(self, backend: Backend, results: list[Result] | None = None, key: str | None = KEY) -> None:
        self.backend = backend
        self.results = list(DEFAULT_RESULTS if results is None else results)
        self.key = key if backend != "searxng" else None
        self.requests: list[dict[str, Any]] = []
        self.unresponsive: list[list[str]] = []  # SearXNG engines that "timed out"
        self._script: list[Scripted] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(
        self, status: int, body: str | dict[str, Any] = "", *, delay_s: float = 0.0, **headers: str
    ) -> None:
        self._script.append(
            Scripted(status, body, {k.replace("_", "-"): v for k, v in headers.items()}, delay_s)
        )

    async def start(self) -> str:
        app = web.Application()
        if self.backend == "searxng":
            app.router.add_get("/search", self._searxng)
        elif self.backend == "brave":
            app.router.add_get("/res/v1/web/search", self._brave)
        else:
            app.router.add_post("/search", self._tavily)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _record(self, request: web.Request) -> web.Response | None:
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "json": body,
            }
        )
        if self._script:
            step = self._script.pop(0)
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            if isinstance(step.body, dict):
                return web.json_response(step.body, status=step.status, headers=step.headers)
            return web.Response(status=step.status, text=step.body, headers=step.headers)
        return None

    async def _searxng(self, request: web.Request) -> web.Response:
        scripted = await self._record(request)
        if scripted is not None:
            return scripted
        if request.query.get("format") != "json":
            return web.Response(
                status=403, text="<html><body>403 Forbidden</body></html>", content_type="text/html"
            )
        query = request.query.get("q", "")
        results = [
            {
                "url": r.url,
                "title": r.title,
                "content": r.snippet,
                "thumbnail": "",
                "engine": "duckduckgo",
                "template": "default.html",
                "parsed_url": [*urlsplit(r.url), ""],
                "img_src": "",
                "priority": "",
                "engines": ["duckduckgo", "brave"],
                "positions": [i + 1],
                "score": 2.0 / (i + 1),
                "category": "general",
                "publishedDate": r.date,
            }
            for i, r in enumerate(self.results)
        ]
        return web.json_response(
            {
                "query": query,
                "number_of_results": 0,
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [f"{query} tutorial"],
                "unresponsive_engines": self.unresponsive,
            }
        )

    async def _brave(self, request: web.Request) -> web.Response:
        scripted = await self._record(request)
        if scripted is not None:
            return scripted
        if request.headers.get("X-Subscription-Token") != self.key:
            return web.json_response(
                {
                    "type": "ErrorResponse",
                    "error": {
                        "id": str(uuid.uuid4()),
                        "status": 422,
                        "code": "SUBSCRIPTION_TOKEN_INVALID",
                        "detail": "The provided subscription token is invalid.",
                        "meta": {"component": "authentication"},
                    },
                    "time": int(time.time()),
                },
                status=422,
            )
        query = request.query.get("q", "")
        count = int(request.query.get("count", "20"))
        results = [
            {
                "type": "search_result",
                "subtype": "generic",
                "title": r.title,
                "url": r.url,
                "is_source_local": False,
                "is_source_both": False,
                "description": r.snippet,
                **({"page_age": r.date, "age": "March 1, 2026"} if r.date else {}),
                "profile": {"name": _host(r.url), "url": r.url, "long_name": _host(r.url)},
                "language": "en",
                "family_friendly": True,
                "meta_url": {
                    "scheme": urlsplit(r.url).scheme,
                    "netloc": _host(r.url),
                    "hostname": _host(r.url),
                },
            }
            for r in self.results[:count]
        ]
        return web.json_response(
            {
                "query": {"original": query, "show_strict_warning": False, "is_navigational": False},
                "mixed": {
                    "type": "mixed",
                    "main": [{"type": "web", "index": i, "all": False} for i in range(len(results))],
                },
                "type": "search",
                "web": {"type": "search", "results": results, "family_friendly": True},
            }
        )

    async def _tavily(self, request: web.Request) -> web.Response:
        scripted = await self._record(request)
        if scripted is not None:
            return scripted
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response(
                {"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401
            )
        body = self.requests[-1]["json"] or {}
        count = int(body.get("max_results", 5))
        results = [
            {
                "title": r.title,
                "url": r.url,
                "content": r.snippet,
                "score": 0.9 - i / 10,
                "raw_content": None,
                **({"published_date": r.date} if r.date else {}),
            }
            for i, r in enumerate(self.results[:count])
        ]
        return web.json_response(
            {
                "query": body.get("query", ""),
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.42,
            }
        )


def _host(url: str) -> str:
    return urlsplit(url).netloc


class FakeSearchThread:
    """A :class:`FakeSearch` on its own loop in a daemon thread, for sync tests."""

    def __init__(self, backend: Backend, **kwargs: Any) -> None:
        self.server = FakeSearch(backend, **kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=run_until_stopped, args=(self._loop,), name=f"fake-{backend}", daemon=True
        )

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)  # the thread closes the loop
