"""The web search backends behind ``web_search``: SearXNG's JSON API, the Brave Search API
and Tavily. Each says how to ask (:meth:`request`) and how to read the answer
(:meth:`hits`, :meth:`error_detail`) in its own wire format; everything else — sending,
errors, caps, the text the model gets — is shared (:mod:`._web_search`).

- SearXNG: ``GET {url}/search?q=…&format=json`` → ``{"results": [{"url", "title",
  "content", "publishedDate"}], "unresponsive_engines": [[engine, reason]], …}``. No key;
  JSON must be enabled in the instance's ``settings.yml`` (``search.formats``), else 403.
- Brave: ``GET {url}/res/v1/web/search?q=…&count=N`` with ``X-Subscription-Token`` →
  ``{"web": {"results": [{"title", "url", "description", "page_age", "age"}]}}``; errors
  ``{"type": "ErrorResponse", "error": {"code", "detail", "status"}}`` (a bad key is 422
  ``SUBSCRIPTION_TOKEN_INVALID`` or 401, the rate limit 429 ``RATE_LIMITED``).
- Tavily: ``POST {url}/search`` with ``Authorization: Bearer`` and ``{"query",
  "max_results"}`` → ``{"results": [{"title", "url", "content", "published_date"}]}``;
  errors ``{"detail": {"error": …}}`` (401 bad key, 429 rate limit, 432/433 plan limits).
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import httpx

BackendName = Literal["searxng", "brave", "tavily"]
DEFAULT_URLS: dict[str, str] = {
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
}
_TAG = re.compile(r"<[^<>]{0,200}>")


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str
    date: str | None = None


def clean(text: object) -> str:
    """A title or snippet as plain text: highlight tags (Brave's ``<strong>``) and entities
    gone, whitespace folded."""
    if not isinstance(text, str):
        return ""
    return " ".join(html.unescape(_TAG.sub("", text)).split())


def _date(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return value.strip()[:25] or None


def _hits(results: object, where: str, snippet: str, *dates: str) -> list[Hit]:
    """The hits in a list of result objects: the snippet and the first date found under
    the keys each backend names (ValueError when ``results`` is not a list)."""
    if not isinstance(results, list):
        raise ValueError(f"no '{where}' list")
    return [
        Hit(
            clean(r.get("title")),
            str(r.get("url", "")),
            clean(r.get(snippet)),
            next((d for d in (_date(r.get(k)) for k in dates) if d), None),
        )
        for r in results
        if isinstance(r, dict)
    ]


class Backend(ABC):
    """One search API: how to ask it, and how to read what it answers."""

    name: ClassVar[BackendName]
    needs_key: ClassVar[bool] = True

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    @abstractmethod
    def request(self, client: httpx.AsyncClient, query: str, count: int, key: str | None) -> httpx.Request:
        """The request for ``count`` results of ``query``."""

    @abstractmethod
    def hits(self, data: Any) -> list[Hit]:
        """The results in an answer (ValueError, TypeError: not this backend's format)."""

    def error_detail(self, data: Any) -> str | None:
        """The backend's own words in an error answer, when it has some."""
        return None

    def bad_key(self, status: int, data: Any) -> bool:
        """Does this answer mean the key is wrong?"""
        return status in (401, 403)

    def notes(self, data: Any) -> list[str]:
        """What else the model should know about an answer (engines that failed)."""
        return []


class Searxng(Backend):
    name = "searxng"
    needs_key = False

    def request(self, client: httpx.AsyncClient, query: str, count: int, key: str | None) -> httpx.Request:
        headers = {"Accept": "application/json"}
        if key:  # an instance behind a proxy that wants a bearer token
            headers["Authorization"] = f"Bearer {key}"
        return client.build_request(
            "GET", f"{self.url}/search", params={"q": query, "format": "json"}, headers=headers
        )

    def hits(self, data: Any) -> list[Hit]:
        results = data.get("results") if isinstance(data, dict) else None
        return _hits(results, "results", "content", "publishedDate")

    def bad_key(self, status: int, data: Any) -> bool:
        return status == 401  # 403 is the JSON format not enabled in its settings.yml

    def notes(self, data: Any) -> list[str]:
        failed = data.get("unresponsive_engines") if isinstance(data, dict) else None
        if not isinstance(failed, list) or not failed:
            return []
        named = [f"{e[0]} ({e[1]})" if isinstance(e, list) and len(e) >= 2 else str(e) for e in failed[:10]]
        return [f"engines that did not answer: {', '.join(named)}"]


class Brave(Backend):
    name = "brave"

    def request(self, client: httpx.AsyncClient, query: str, count: int, key: str | None) -> httpx.Request:
        return client.build_request(
            "GET",
            f"{self.url}/res/v1/web/search",
            params={"q": query, "count": str(count)},
            headers={"Accept": "application/json", "X-Subscription-Token": key or ""},
        )

    def hits(self, data: Any) -> list[Hit]:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        web = data.get("web") or {}
        results = web.get("results", []) if isinstance(web, dict) else None
        return _hits(results, "web.results", "description", "page_age", "age")

    def error_detail(self, data: Any) -> str | None:
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            return None
        parts = [str(error[k]) for k in ("code", "detail") if error.get(k)]
        return ": ".join(parts) or None

    def bad_key(self, status: int, data: Any) -> bool:
        if status in (401, 403):
            return True
        error = data.get("error") if isinstance(data, dict) else None
        return isinstance(error, dict) and "TOKEN" in str(error.get("code", "")).upper()


class Tavily(Backend):
    name = "tavily"

    def request(self, client: httpx.AsyncClient, query: str, count: int, key: str | None) -> httpx.Request:
        return client.build_request(
            "POST",
            f"{self.url}/search",
            json={"query": query, "max_results": count, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {key or ''}", "Accept": "application/json"},
        )

    def hits(self, data: Any) -> list[Hit]:
        results = data.get("results") if isinstance(data, dict) else None
        return _hits(results, "results", "content", "published_date")

    def error_detail(self, data: Any) -> str | None:
        detail = data.get("detail") if isinstance(data, dict) else None
        if isinstance(detail, dict):
            detail = detail.get("error")
        return str(detail) if detail else None


BACKENDS: dict[str, type[Backend]] = {"searxng": Searxng, "brave": Brave, "tavily": Tavily}


def backend_for(name: str, url: str | None) -> Backend:
    """The backend ``name`` at ``url`` (its public API when None)."""
    return BACKENDS[name](url or DEFAULT_URLS[name])
