"""The HTTP transport under the providers' httpx client: aiohttp's connection pool.

httpcore's pool bookkeeping grows with the number of open connections, which capped a
daemon with 100 talking sessions at a few dozen provider calls per second
(bench/turns.py); aiohttp's pool does not. ``httpx-aiohttp`` plugs it in under
httpx's API. Its exception mapping sends every ``aiohttp.ClientConnectionError``
to ``httpx.ConnectTimeout`` — a refused connection or a dropped stream would read
as a timeout — so this module maps aiohttp's errors to the httpx error that says
what happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


def _precise(exc: httpx.HTTPError) -> httpx.HTTPError:
    cause = exc.__cause__
    message = str(exc)
    if isinstance(cause, aiohttp.ClientConnectorError):  # refused, unreachable, DNS
        return httpx.ConnectError(message)
    if isinstance(cause, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
        return httpx.ReadTimeout(message) if not isinstance(exc, httpx.TimeoutException) else exc
    if isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message)
    if isinstance(cause, aiohttp.ClientOSError | aiohttp.ClientConnectionError):
        return httpx.ReadError(message)
    return exc


class _PreciseStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.HTTPError as exc:
            raise _precise(exc) from exc.__cause__

    async def aclose(self) -> None:
        await self._inner.aclose()


class PooledTransport(AiohttpTransport):
    """``AiohttpTransport`` whose errors name what really went wrong."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.HTTPError as exc:
            raise _precise(exc) from exc.__cause__
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _PreciseStream(response.stream)
        return response
