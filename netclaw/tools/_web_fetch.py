"""The ``web_fetch`` tool: a web page as readable text, never a door into the private network.

Every hop (the URL and each redirect, at most ``max_redirects``) is vetted after DNS:
if any address the host resolves to is not a public one (loopback, private, link-local
such as the 169.254.169.254 metadata service, shared, reserved, multicast, unspecified;
IPv4-mapped IPv6 judged as IPv4) the fetch is refused, unless
``allow_private_networks``. The request then goes to the vetted address itself (the URL
rewritten to the IP, ``Host`` and, for https, the TLS server name kept as the original
host), so a second DNS answer cannot swap in another address (DNS rebinding). No proxy
from the environment is used, for the same reason.

HTML becomes text with html2text; text and JSON are returned as they are; other types
are refused naming the type. Size (``max_bytes``) and time (``timeout_s``) are capped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import html2text
import httpx

from netclaw.errors import ToolError
from netclaw.tools._registry import Tool, ToolContext

Resolver = Callable[[str, int], Awaitable[list[str]]]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_MAX_CHARS = 20_000
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/ld+json")
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_USER_AGENT = "netclaw-web-fetch/1 (+https://github.com/netclaw)"


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def refusal(address: IpAddress) -> str | None:
    """Why ``address`` must not be fetched from, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for reason, hit in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local (cloud metadata lives here)", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
    ):
        if hit:
            return reason
    if not address.is_global:
        return "not a public address"
    return None


async def vet_url(url: httpx.URL, resolve: Resolver, *, allow_private: bool) -> str:
    """The address to connect to for ``url``, after checking every address it resolves to."""
    if url.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be fetched, not {url.scheme or 'a relative URL'!r}")
    host = url.host
    if not host:
        raise ToolError(f"{str(url)[:200]!r} has no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise ToolError(f"cannot resolve {host!r}: {exc}") from exc
    if not addresses:
        raise ToolError(f"{host!r} resolves to no address")
    if not allow_private:
        for raw in addresses:
            reason = refusal(ipaddress.ip_address(raw))
            if reason is not None:
                raise ToolError(
                    f"refused {host!r}: it resolves to {raw}, a {reason} address; only public "
                    "addresses can be fetched"
                )
    return addresses[0]


def web_fetch_tool(
    *,
    allow_private_networks: bool = False,
    max_bytes: int = 2_000_000,
    timeout_s: float = 20.0,
    max_redirects: int = 5,
    resolve: Resolver | None = None,
    transport: httpx.AsyncBaseTransport | None = None,  # httpx's seam: tests answer without a network
) -> Tool:
    resolver = resolve or system_resolve

    async def fetch(args: Mapping[str, Any], ctx: ToolContext) -> str:
        raw = args.get("url")
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("'url' is required: an http(s) URL")
        max_chars = args.get("max_chars", DEFAULT_MAX_CHARS)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 100:
            raise ToolError("'max_chars' must be a whole number of at least 100")
        try:
            url = httpx.URL(raw.strip())
        except httpx.InvalidURL as exc:
            raise ToolError(f"{raw[:200]!r} is not a valid URL: {exc}") from exc
        try:
            async with asyncio.timeout(timeout_s):
                final, status, mime, body, cut = await _get(
                    url, resolver, allow_private_networks, max_bytes, max_redirects, transport
                )
        except TimeoutError as exc:
            raise ToolError(f"fetching {raw[:200]} took longer than {timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"fetching {raw[:200]} failed: {type(exc).__name__}: {exc}") from exc
        text = await asyncio.to_thread(_readable, body, mime)
        if cut:
            text += f"\n[the page was cut at {max_bytes:,} bytes]"
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[text cut at {max_chars:,} of {len(text):,} characters]"
        return f"URL: {final} (status {status}, {mime or 'unknown type'})\n\n{text}"

    return Tool(
        "web_fetch",
        "Fetch a web page (http/https) and return it as readable text. Public addresses only.",
        {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "the http(s) URL"},
                "max_chars": {
                    "type": "integer",
                    "minimum": 100,
                    "description": "at most this much text back",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        fetch,
        untrusted=True,  # the page, and its error (an HTTP error shows the start of the page)
    )


async def _get(
    url: httpx.URL,
    resolve: Resolver,
    allow_private: bool,
    max_bytes: int,
    max_redirects: int,
    transport: httpx.AsyncBaseTransport | None,
) -> tuple[str, int, str, bytes, bool]:
    async with httpx.AsyncClient(
        trust_env=False, follow_redirects=False, timeout=None, transport=transport
    ) as client:
        for _hop in range(max_redirects + 1):
            address = await vet_url(url, resolve, allow_private=allow_private)
            target = url.copy_with(host=address)
            host_header = url.host if url.port is None else f"{url.host}:{url.port}"
            extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
            request = client.build_request(
                "GET",
                target,
                headers={
                    "Host": host_header,
                    "User-Agent": _USER_AGENT,
                    "Accept": "text/html, text/*;q=0.9, */*;q=0.5",
                },
                extensions=extensions,
            )
            response = await client.send(request, stream=True)
            try:
                if response.is_redirect:
                    location = response.headers.get("location", "")
                    if not location:
                        raise ToolError(f"{url} answered {response.status_code} without a Location")
                    url = url.join(location)
                    continue
                mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code >= 400:
                    excerpt = (await _read(response, 500))[0].decode("utf-8", "replace")
                    raise ToolError(f"{url} answered HTTP {response.status_code}: {excerpt.strip()[:300]}")
                if mime and not mime.startswith(_TEXT_TYPES):
                    raise ToolError(f"{url} is {mime}, not a text or HTML page; it cannot be shown as text")
                body, cut = await _read(response, max_bytes)
                return str(url), response.status_code, mime, body, cut
            finally:
                await response.aclose()
    raise ToolError(f"more than {max_redirects} redirects; stopped at {url}")


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data.extend(chunk)
        if len(data) > limit:
            return bytes(data[:limit]), True
    return bytes(data), False


def _readable(body: bytes, mime: str) -> str:
    text = body.decode("utf-8", errors="replace")
    if mime in _HTML_TYPES or (
        not mime and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))
    ):
        converter = html2text.HTML2Text()
        converter.ignore_images = True
        converter.body_width = 0  # no hard wraps: the model reads paragraphs
        converter.single_line_break = False
        return converter.handle(text).strip()
    return text
