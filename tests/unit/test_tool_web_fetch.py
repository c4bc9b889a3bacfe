"""``web_fetch`` against a real HTTP server on 127.0.0.1 (content, limits, errors) and the
SSRF guard: loopback, private, link-local/metadata and IPv6 loopback refused, a hostname
resolving to loopback refused, and a redirect from a public host to loopback refused
(that hop answered through httpx's transport seam, so no test touches the internet)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from aiohttp import web

from netclaw.errors import ToolError
from netclaw.tools import ToolContext
from netclaw.tools._web_fetch import web_fetch_tool

CTX = ToolContext("cli:test", "personal")
HTML = """<!doctype html><html><head><title>T</title><script>var secret=1;</script></head>
<body><h1>Release notes</h1><p>Version <b>2.0</b> adds <a href="/docs">docs</a>.</p>
<img src="x.png" alt="a picture"></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=HTML, content_type="text/html")

    async def plain(request: web.Request) -> web.Response:
        return web.Response(text="just text", content_type="text/plain")

    async def data(request: web.Request) -> web.Response:
        return web.json_response({"answer": 42})

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG....", content_type="image/png")

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="y" * 50_000, content_type="text/plain")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="no such page here")

    async def hop(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        raise web.HTTPFound(f"/hop/{n - 1}" if n > 0 else "/plain")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def host(request: web.Request) -> web.Response:
        return web.Response(text=f"host={request.headers.get('Host')}", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/plain", plain)
    app.router.add_get("/data", data)
    app.router.add_get("/binary", binary)
    app.router.add_get("/big", big)
    app.router.add_get("/missing", missing)
    app.router.add_get("/hop/{n}", hop)
    app.router.add_get("/slow", slow)
    app.router.add_get("/host", host)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def fetch(url: str, **options: Any) -> str:
    tool = web_fetch_tool(**{"allow_private_networks": True, **options})
    return await tool.handler({"url": url}, CTX)


async def test_html_becomes_readable_text(site: str) -> None:
    text = await fetch(f"{site}/page")
    assert text.startswith(f"URL: {site}/page (status 200, text/html)")
    assert "# Release notes" in text and "Version **2.0** adds [docs](/docs)." in text
    assert "secret" not in text and "x.png" not in text


async def test_text_json_and_refused_types(site: str) -> None:
    assert (await fetch(f"{site}/plain")).endswith("just text")
    assert '"answer": 42' in await fetch(f"{site}/data")
    with pytest.raises(ToolError, match="image/png, not a text or HTML page"):
        await fetch(f"{site}/binary")
    with pytest.raises(ToolError, match="HTTP 404: no such page here"):
        await fetch(f"{site}/missing")


async def test_limits(site: str) -> None:
    text = await fetch(f"{site}/big", max_bytes=10_000)
    assert "[the page was cut at 10,000 bytes]" in text
    tool = web_fetch_tool(allow_private_networks=True)
    short = await tool.handler({"url": f"{site}/big", "max_chars": 1000}, CTX)
    assert "[text cut at 1,000 of" in short
    with pytest.raises(ToolError, match=r"longer than 0\.5s"):
        await fetch(f"{site}/slow", timeout_s=0.5)


async def test_redirects_are_followed_up_to_the_cap(site: str) -> None:
    text = await fetch(f"{site}/hop/3")
    assert text.startswith(f"URL: {site}/plain") and text.endswith("just text")
    with pytest.raises(ToolError, match="more than 2 redirects"):
        await fetch(f"{site}/hop/5", max_redirects=2)


async def test_the_host_header_names_the_host_not_the_address(site: str) -> None:
    port = site.rsplit(":", 1)[1]

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == "intranet.test" else []

    text = await fetch(f"http://intranet.test:{port}/host", resolve=resolve)
    assert text.endswith(f"host=intranet.test:{port}")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.20/admin", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://evil.test/", "loopback"),  # a name that resolves to loopback
    ],
)
async def test_private_addresses_are_refused(url: str, why: str) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    tool = web_fetch_tool(resolve=resolve)
    with pytest.raises(ToolError, match=why):
        await tool.handler({"url": url}, CTX)


async def test_a_redirect_to_loopback_is_refused() -> None:
    hops: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        hops.append(f"{request.url.host} {request.headers['host']}")
        return httpx.Response(302, headers={"location": "http://127.0.0.1:8080/admin"})

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]  # a public address: the first hop is allowed

    tool = web_fetch_tool(resolve=resolve, transport=httpx.MockTransport(answer))
    with pytest.raises(ToolError, match=r"127\.0\.0\.1.*loopback"):
        await tool.handler({"url": "http://public.test/go"}, CTX)
    assert hops == ["93.184.216.34 public.test"]  # connected to the vetted address; no second hop


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "'url' is required"),
        ({"url": "ftp://example.com/x"}, "only http and https"),
        ({"url": "file:///etc/passwd"}, "only http and https"),
        ({"url": "http://x", "max_chars": 5}, "max_chars"),
    ],
)
async def test_bad_arguments_are_named(args: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await web_fetch_tool().handler(args, CTX)
