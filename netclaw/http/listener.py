"""The HTTP listeners' defences against slow, greedy and malformed clients.

- **Request heads have a deadline.** aiohttp's keep-alive timer runs from the moment a
  connection opens, so a connection that does not finish a request head within
  ``HEAD_TIMEOUT_S`` (or idles that long between requests) is closed.
- **Connections are capped** below the process's file-descriptor limit. At the cap, the
  oldest connection that has not yet sent a whole request head (a slow-loris) is closed
  to make room, taken first from the client address holding the most connections; only
  when every connection is a real request is the newcomer refused.
  So ``/healthz`` and the API keep answering while hundreds of connections dawdle.
- **Malformed requests** that aiohttp rejects before any handler runs (a bad request
  line, headers too long, broken chunking) are answered in the JSON error shape with one
  short log line, not a plain-text page and a traceback; so is an unknown ``Expect``
  (417), which aiohttp answers before any middleware runs.
- **Clients that hang up** at any point — mid-head, while told "100 Continue", before,
  during or after the answer's head — cost at most one DEBUG line, never a traceback.

Request bodies have their own deadline: :func:`netclaw.http.web.read_body`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
from http import HTTPStatus
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from netclaw.errors import DaemonError
from netclaw.http.web import client_gone, error_response, http_code

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 15.0  # a whole request head (and the idle time between keep-alive requests)
MAX_CONNECTIONS = 512
RESERVED_FDS = 64  # the journal, the provider's pool, MCP servers, chat platforms (~25 when idle)
# asyncio accepts up to a backlog's worth of connections on every turn of the loop, and
# each reaches the guard only two turns later; a connection the guard closes gives its
# descriptor back a turn later still. So under a flood, descriptors in flight can equal the
# admitted ones: the cap is half of what the process may open beyond its own needs.
BACKLOG = 16


def connection_limit(configured: int = MAX_CONNECTIONS) -> int:
    """``configured``, but never so many that accepting them exhausts file descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, (soft - RESERVED_FDS) // 2))


class ConnectionGuard:
    """The connections of one listener, oldest first, and per client address."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[GuardedConnection, None] = {}  # insertion order: oldest first
        self._by_address: dict[str, dict[GuardedConnection, None]] = {}
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: GuardedConnection) -> bool:
        if len(self._open) >= self.limit:
            idle = self._idle_victim()
            if idle is None:
                self.refused += 1
                log.warning("HTTP connection limit (%d) reached: refusing a connection", self.limit)
                return False
            self.evicted += 1
            log.warning(
                "HTTP connection limit (%d) reached: closing the oldest connection that sent no request",
                self.limit,
            )
            self.release(idle)  # now: its descriptor is given back only on a later turn
            idle.close()
        self._open[conn] = None
        self._by_address.setdefault(conn.address, {})[conn] = None
        return True

    def _idle_victim(self) -> GuardedConnection | None:
        """The oldest connection without a whole request head, taken from the address that
        holds the most connections (the greedy client pays first), else from anyone."""
        greediest = max(self._by_address.values(), key=len, default={})
        for pool in (greediest, self._open):
            found = next((c for c in pool if not c.proven), None)
            if found is not None:
                return found
        return None

    def release(self, conn: GuardedConnection) -> None:
        if conn not in self._open:
            return
        del self._open[conn]
        pool = self._by_address[conn.address]
        del pool[conn]
        if not pool:
            del self._by_address[conn.address]


class GuardedConnection(asyncio.Protocol):
    """One connection: aiohttp's handler behind a check that it is a real request."""

    def __init__(self, inner: RequestHandler, guard: ConnectionGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.proven = False  # a whole request head arrived (not a slow-loris)
        self._tail = b""
        self._transport: asyncio.Transport | None = None
        self._admitted = False
        self.address = ""

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not registered as asyncio.Transport subclasses).
        self._transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.guard.admit(self):
            transport.close()
            return
        self._admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if not self.proven:
            seen = self._tail + data
            self.proven = b"\r\n\r\n" in seen
            self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> None:
        if self._admitted:
            self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        if self._admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class JsonErrorHandler(RequestHandler):
    """aiohttp's per-connection handler, answering its own rejections as JSON (a 417 for
    an unknown ``Expect``, a 400 for bad framing), and quiet about clients that hang up."""

    def log_exception(self, *args: Any, **kw: Any) -> None:
        # A body that cannot be decoded, met while aiohttp drains what a handler left unread
        # (the answer is already out): the client's fault, one line, no traceback.
        exc = kw.get("exc_info")
        if isinstance(exc, web.RequestPayloadError | HttpProcessingError):
            log.info("dropped an unreadable request body: %s", str(exc).replace("\n", " ").strip())
            return
        log.error(*args, **kw)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        if isinstance(exc, ConnectionError) and client_gone(request):
            # The client hung up (before, during or after the answer's head, or while told
            # "100 Continue"): nothing to answer, and nothing wrong here.
            log.debug("%s %s: the client hung up (%s)", request.method, request.path, exc)
            raise ConnectionError("the client hung up") from exc
        if status >= 500:
            log.error("error answering %s %s", request.method, request.path, exc_info=exc)
        else:
            # aiohttp's message spans lines (the bytes it choked on, a caret): one line here.
            log.info(
                "refused a malformed request from %s: %s",
                request.remote,
                " ".join(str(message or exc).split()),
            )
        if request.writer.output_size > 0:
            raise ConnectionError("the response already started; cannot send an error")
        text = message or HTTPStatus(status).phrase
        if status >= 500:
            text = "internal error; see the daemon log"
        response = error_response(status, http_code(status), text)
        response.force_close()
        return response

    async def finish_response(
        self, request: BaseRequest, resp: StreamResponse, start_time: float | None
    ) -> tuple[StreamResponse, bool]:
        # An HTTPException raised before the application's middleware (aiohttp's own
        # handling of ``Expect``) would go out as text/plain: the JSON shape instead.
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            log.info("refused a request from %s: %s %s", request.remote, resp.status, resp.text)
            text = resp.text if resp.text and not resp.text.startswith(f"{resp.status}:") else resp.reason
            json_resp = error_response(resp.status, http_code(resp.status), text)
            json_resp.force_close()
            resp = json_resp
        return await super().finish_response(request, resp, start_time)


class GuardedSite(web.TCPSite):
    """A TCP site whose connections go through a :class:`ConnectionGuard` and a
    :class:`JsonErrorHandler`."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, limit: int) -> None:
        super().__init__(runner, host, port)
        self.guard = ConnectionGuard(limit)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {"keepalive_timeout": HEAD_TIMEOUT_S, "access_log": None}

        def connection() -> GuardedConnection:
            return GuardedConnection(JsonErrorHandler(server, loop=loop, **options), self.guard)

        self._server = await loop.create_server(
            connection, self._host, self._port, backlog=BACKLOG, reuse_address=self._reuse_address
        )


def check_free(host: str, port: int, key: str) -> None:
    """Refuse a port another process listens on before the daemon makes anything (its data
    directory, its token): DaemonError as :func:`listen` would say it, later. The real bind
    is still :func:`listen`'s (this is a courtesy, not a reservation)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # an unknown host: listen() says so
    for family, kind, proto, _, address in infos[:1]:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio binds it
            try:
                probe.bind(address)
            except OSError as exc:
                raise DaemonError(
                    f"cannot listen on {host}:{port}: {exc.strerror} (is another netclaw running? change {key})"
                ) from exc


async def listen(app: web.Application, host: str, port: int, key: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port behind the defences; the runner and the bound port."""
    # handler_cancellation: a client that disconnects (an SSE subscriber) ends its
    # handler at once, so its subscription is removed without waiting for a write.
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, handler_cancellation=True, shutdown_timeout=5.0
    )
    await runner.setup()
    site = GuardedSite(runner, host, port, limit=connection_limit())
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise DaemonError(
            f"cannot listen on {host}:{port}: {exc.strerror} (is another netclaw running? change {key})"
        ) from exc
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
