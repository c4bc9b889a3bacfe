"""The ``web_search`` tool: a query in, titles, URLs, snippets (and dates where given) out,
from the backend ``tools.web_search`` names (:mod:`._search_backends`).

- **Caps.** At most ``max_results`` results (the model may ask for fewer), each snippet
  cut at ``max_snippet_chars``, only http(s) URLs, duplicates dropped; the answer read is
  capped too (a backend cannot flood the prompt).
- **Errors** are tool errors the model reads and a person understands: a refused key,
  a rate limit (with the wait the backend asked for), a plan limit, a backend that is
  down, slow or not answering JSON.
- **Where it connects.** The backend's URL is the operator's configuration, like a
  provider's ``base_url``: it may be a self-hosted SearXNG on a private address, and it
  is not vetted by the SSRF rules. The model chooses only the query. What it then fetches
  of the results goes through ``web_fetch``, whose SSRF rules apply as always; redirects
  from the backend are not followed (a redirect is an error naming where it pointed).
- The results are text from outside the conversation, and so are errors that quote what
  the backend said: the registry labels every result untrusted (``netclaw/security/trust.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from netclaw.config import WebSearchConfig
from netclaw.config.credentials import where_to_put
from netclaw.errors import ConfigError, ToolError
from netclaw.tools._registry import Tool, ToolContext
from netclaw.tools._search_backends import Backend, Hit, backend_for

MAX_ANSWER_BYTES = 2_000_000
MAX_QUERY_CHARS = 400
MAX_TITLE_CHARS = 200
MAX_URL_CHARS = 2000
ASK_EXTRA = 5  # results asked for beyond those shown (Brave and Tavily give at most 20)


def web_search_tool(
    config_of: Callable[[], WebSearchConfig],
    *,
    transport: httpx.AsyncBaseTransport | None = None,  # httpx's seam (tests)
) -> Tool:
    """``web_search`` with the backend ``config_of()`` names (read per call)."""

    async def search(args: Mapping[str, Any], ctx: ToolContext) -> str:
        config = config_of()
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' is required: what to search the web for")
        query = " ".join(query.split())
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"'query' is {len(query)} characters; at most {MAX_QUERY_CHARS}")
        wanted = args.get("max_results", config.max_results)
        if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
            raise ToolError("'max_results' must be a whole number of at least 1")
        count = min(wanted, config.max_results)
        backend = backend_for(config.backend, config.url)
        key = _key(config, backend)
        try:
            async with asyncio.timeout(config.timeout_s):
                # A few more than shown: results without an http(s) URL or repeated are dropped.
                status, data = await _ask(backend, query, min(count + ASK_EXTRA, 20), key, transport)
        except TimeoutError as exc:
            raise ToolError(
                f"web search: {backend.name} did not answer within {config.timeout_s:g}s; try again later"
            ) from exc
        except httpx.HTTPError as exc:
            raise ToolError(
                f"web search is unavailable: {backend.name} at {backend.url} cannot be reached "
                f"({type(exc).__name__}: {exc}); the person running netclaw should check it"
            ) from exc
        try:
            hits = backend.hits(data)
        except (ValueError, AttributeError, TypeError) as exc:
            raise ToolError(
                f"web search: {backend.name} answered HTTP {status} with JSON not in its search format ({exc})"
            ) from exc
        return _render(query, backend, _capped(hits, count, config.max_snippet_chars), backend.notes(data))

    return Tool(
        "web_search",
        "Search the web: titles, URLs and snippets. Read a result with web_fetch.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to search for"},
                "max_results": {"type": "integer", "minimum": 1, "description": "at most this many results"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        search,
        untrusted=True,  # the results, and errors (they quote what the backend said)
    )


def _key(config: WebSearchConfig, backend: Backend) -> str | None:
    try:
        key = config.api_key()
    except ConfigError as exc:
        raise ToolError(f"web search: {exc}") from exc
    if key is None and backend.needs_key:
        name = config.api_key_env or "(tools.web_search.api_key_env)"
        raise ToolError(
            f"web search is not set up: the {backend.name} API key is missing; the person running "
            f"netclaw should {where_to_put(name)}"
        )
    return key


async def _ask(
    backend: Backend, query: str, count: int, key: str | None, transport: httpx.AsyncBaseTransport | None
) -> tuple[int, Any]:
    async with httpx.AsyncClient(follow_redirects=False, timeout=None, transport=transport) as client:
        request = backend.request(client, query, count, key)
        response = await client.send(request, stream=True)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > MAX_ANSWER_BYTES:
                    raise ToolError(
                        f"web search: {backend.name}'s answer is larger than {MAX_ANSWER_BYTES:,} bytes"
                    )
        finally:
            await response.aclose()
    try:
        data: Any = json.loads(bytes(body))
    except ValueError:
        data = None
    if response.status_code >= 300 or data is None:
        raise ToolError(_failure(backend, response, data, bytes(body)))
    return response.status_code, data


def _failure(backend: Backend, response: httpx.Response, data: Any, body: bytes) -> str:
    """What went wrong, said so that the model knows whether to try again and a person
    knows what to fix."""
    status = response.status_code
    detail = backend.error_detail(data) or _excerpt(body, response)
    said = f"HTTP {status}" + (f": {detail}" if detail else "")
    name = backend.name
    if 300 <= status < 400:
        where = response.headers.get("location", "nowhere")
        return f"web search: {name} at {backend.url} redirects ({said}) to {where[:200]}; set tools.web_search.url to the final address"
    if status == 429:
        wait = response.headers.get("retry-after")
        when = f"in {wait} s" if wait and wait.isdigit() else "later"
        return f"web search is rate-limited by {name} ({said}); try again {when}, not at once"
    if backend.bad_key(status, data):
        return (
            f"web search: {name} refused the API key ({said}); it is wrong, revoked or lacks the "
            "plan for this API. Searching again will not help: tell the person running netclaw"
        )
    if name == "searxng" and status == 403:
        return (
            f"web search: SearXNG refused the JSON format ({said}); the instance must list `json` "
            "under search.formats in its settings.yml"
        )
    if name == "tavily" and status in (432, 433):
        return f"web search: tavily's plan or usage limit is reached ({said}); searching again will not help"
    if status >= 500:
        return f"web search: {name} is failing ({said}); it may be down or overloaded, try again later"
    if status < 300:
        return f"web search: {name} answered HTTP {status} with something that is not JSON: {_excerpt(body, response)}"
    return f"web search: {name} refused the search ({said})"


def _excerpt(body: bytes, response: httpx.Response) -> str:
    if "html" in response.headers.get("content-type", ""):
        return ""  # an HTML error page says nothing the status does not
    return " ".join(body[:300].decode("utf-8", "replace").split())


def _capped(hits: list[Hit], count: int, snippet_chars: int) -> list[Hit]:
    kept: list[Hit] = []
    seen: set[str] = set()
    for hit in hits:
        url = hit.url.strip()
        if not url.startswith(("http://", "https://")) or len(url) > MAX_URL_CHARS or url in seen:
            continue
        seen.add(url)
        snippet = hit.snippet if len(hit.snippet) <= snippet_chars else hit.snippet[: snippet_chars - 1] + "…"
        kept.append(Hit(hit.title[:MAX_TITLE_CHARS] or url, url, snippet, hit.date))
        if len(kept) == count:
            break
    return kept


def _render(query: str, backend: Backend, hits: list[Hit], notes: list[str]) -> str:
    if not hits:
        lines = [f"No results for {query!r} ({backend.name})."]
    else:
        lines = [f"Results for {query!r} ({backend.name}, {len(hits)}):"]
        for n, hit in enumerate(hits, 1):
            lines.append(f"{n}. {hit.title}\n   {hit.url}")
            text = f"({hit.date}) {hit.snippet}" if hit.date else hit.snippet
            if text:
                lines.append(f"   {text}")
    lines.extend(f"[{note}]" for note in notes)
    return "\n".join(lines)
