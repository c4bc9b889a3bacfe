"""The HTTP transport under the providers' httpx client: aiohttp's connection pool.

httpcore's pool bookkeeping grows with the number of open connections, which capped a
daemon with 100 talking sessions at a few dozen provider calls per second
(bench/turns.py); aiohttp's pool does not. ``httpx-aiohttp`` plugs it in under
httpx's API. Its exception mapping sends every ``aiohttp.ClientConnectionError``
to ``httpx.ConnectTimeout`` — a refused connection or a dropped stream would read
as a timeout — so this module maps aiohttp's errors to the httpx error that says
what happened. A response body is read from aiohttp's buffer directly (:class:`_Body`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import AiohttpResponseStream, map_aiohttp_exceptions


def _named(cause: BaseException | None, message: str) -> httpx.HTTPError | None:
    """The httpx error that says what the aiohttp error ``cause`` was (None: no better)."""
    if isinstance(cause, aiohttp.ClientConnectorError):  # refused, unreachable, DNS
        return httpx.ConnectError(message)
    if isinstance(cause, aiohttp.ServerTimeoutError | TimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message)
    if isinstance(cause, aiohttp.ClientOSError | aiohttp.ClientConnectionError):
        return httpx.ReadError(message)
    return None


def _precise(exc: httpx.HTTPError) -> httpx.HTTPError:
    if isinstance(exc, httpx.TimeoutException) and isinstance(exc.__cause__, TimeoutError):
        return exc  # httpx-aiohttp already said which timeout (connect, pool, read)
    return _named(exc.__cause__, str(exc)) or exc


class _Body(httpx.AsyncByteStream):
    """A response body as aiohttp holds it: whatever has arrived, each time it is read.
    One iterator between the reader and aiohttp's buffer, where httpx-aiohttp's and an
    error-mapping one stacked two: an answer streams dozens of events, and each layer
    cost each of them a few microseconds."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while chunk := await content.readany():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise (_named(exc, str(exc)) or httpx.ReadError(str(exc))) from exc

    async def aclose(self) -> None:
        with map_aiohttp_exceptions():  # as httpx-aiohttp's own stream closes it
            await self._response.__aexit__(None, None, None)


class PooledTransport(AiohttpTransport):
    """``AiohttpTransport`` whose errors name what really went wrong, and a POST that
    takes its body as it is (:meth:`post`)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.HTTPError as exc:
            raise _precise(exc) from exc.__cause__
        stream = response.stream
        assert isinstance(stream, AiohttpResponseStream)
        response.stream = _Body(stream._aiohttp_response)  # noqa: SLF001 - what it wraps
        return response

    async def post(self, request: httpx.Request, headers: Mapping[str, str], body: bytes) -> httpx.Response:
        """``request``'s POST (its URL and timeouts; its body is not read) with ``body`` and
        ``headers``, as :meth:`handle_async_request` sends one: a model call's, without an
        httpx request made around its body each time (its headers merged, its length
        computed: a twelfth of the CPU a model call spent on the loop). For a transport
        made as the providers make it: no proxy, no SNI name of its own."""
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        timeout = request.extensions.get("timeout", {})
        try:
            with map_aiohttp_exceptions():
                response = await self.client.request(
                    "POST",
                    str(request.url),
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    auto_decompress=False,
                    compress=False,
                    timeout=aiohttp.ClientTimeout(
                        sock_connect=timeout.get("connect"),
                        sock_read=timeout.get("read"),
                        connect=timeout.get("pool"),
                    ),
                ).__aenter__()
        except httpx.HTTPError as exc:
            raise _precise(exc) from exc.__cause__
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions=extensions,
        )
