"""This node's HTTP client to the others: a session API request proxied to the node that
owns the session, and other input (webhook, chat, reminder) submitted there.

Why forwarding rather than an inbox table the owner is woken for (LISTEN/NOTIFY): the
owner answers the forwarded request only once the message is durable in its journal,
so the 202 a client gets from any node means what it means on one node; every session
call — cancel, approvals, a reply waited for, an SSE stream — is forwarded the same
way, with the owner's own answer; and there is no second durable queue to keep
exactly-once.

A node that does not answer raises :class:`Unreachable`, which says whether sending the
request again elsewhere is safe (it never reached the node, it is idempotent, or the node
said it let the session go); :mod:`._routing` then holds it until the session has a new
node. Timeouts are bounded so a node cut off from the others cannot hold a request until
the client gives up: connecting, waiting for an answer (a turn's length for ``?wait=1``),
and the silence allowed in an event stream (which carries keep-alives).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from netclaw.cluster import protocol
from netclaw.errors import ApiError, SessionOwnedElsewhere, SessionUnavailable
from netclaw.persistence import Owner

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
ANSWER_TIMEOUT_S = 45.0  # a control call's answer (the owner gives up on its session after 30 s)
STREAM_IDLE_S = 35.0  # an event stream sends a keep-alive every 15 s
TURN_MARGIN_S = 60.0  # ?wait=1: the turn's time, and this
TAKE_TIMEOUT_S = 10.0
WATCH_AFTER_S = 1.0  # an answer slower than this is raced with the session's lease
DOWN_FOR_S = 1.0  # a node that refused a connection is not tried again for this long
# The request body, once read (a request forwarded after all, or served after all, needs it again).
_BODY = web.RequestKey("netclaw_body", bytes)

Lookup = Callable[[str], Awaitable[Owner | None]]


class Unreachable(Exception):
    """The node did not answer. ``retry_safe``: nothing was done there, or doing it again
    is harmless (the request is idempotent), so it may go to the session's next node."""

    def __init__(self, node_id: str, why: str, *, retry_safe: bool, moved: bool = False) -> None:
        super().__init__(f"node {node_id} did not answer ({why})")
        self.node_id = node_id
        self.retry_safe = retry_safe
        self.moved = moved  # it answered that the session left it: look again at once


@dataclass(slots=True)
class ForwardCounts:
    """What was forwarded (``/metrics``)."""

    proxied: int = 0  # API requests sent to another node
    submitted: int = 0  # other input sent to another node
    unreachable: int = 0  # sends a node did not answer
    moved: int = 0  # answers that the session had left that node


async def request_body(request: web.Request) -> bytes:
    """The body of a request this node may both forward and serve (kept once read)."""
    body = request.get(_BODY)
    if body is None:
        body = await request.read() if request.body_exists else b""
        request[_BODY] = body
    return body


def keep_body(request: web.Request, body: bytes) -> None:
    """The handler serving a request here read its body: keep it, should the request then
    be forwarded after all (the session left this node meanwhile)."""
    request[_BODY] = body


def kept_body(request: web.Request) -> bytes | None:
    """The body a forwarding attempt already read, for the handler that serves the request
    here after all (None: nobody read it)."""
    return request.get(_BODY)


class Forwarder:
    def __init__(self, node_id: str, token: str, *, turn_timeout_s: float = 300.0) -> None:
        self.node_id = node_id
        self._token = token
        self._turn_timeout_s = turn_timeout_s
        self._client: aiohttp.ClientSession | None = None
        self._down: dict[str, float] = {}  # node → until when it is not tried
        self.counts = ForwardCounts()
        self.lookup: Lookup | None = None  # the session's owner now (set by the routing)

    @property
    def forwarded(self) -> int:
        """Requests sent to another node (tests)."""
        return self.counts.proxied + self.counts.submitted

    def _session(self) -> aiohttp.ClientSession:
        if self._client is None:  # created on the loop, on first use; timeouts per request
            self._client = aiohttp.ClientSession(auto_decompress=False)
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @staticmethod
    def _where(session_id: str, owner: Owner) -> str:
        if owner.url is None:  # it advertises no address: nothing to forward to
            raise SessionOwnedElsewhere(session_id, owner.node_id, None, owner.expires_in)
        return owner.url.rstrip("/")

    def _timeout(self, read_s: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S, sock_read=read_s
        )

    def _check_up(self, owner: Owner) -> None:
        until = self._down.get(owner.node_id)
        if until is not None and time.monotonic() < until:
            raise Unreachable(owner.node_id, "it refused a connection a moment ago", retry_safe=True)

    def _failed(self, owner: Owner, exc: BaseException, *, sent: bool, idempotent: bool) -> Unreachable:
        self.counts.unreachable += 1
        connect = isinstance(exc, aiohttp.ClientConnectorError)
        if connect:
            self._down[owner.node_id] = time.monotonic() + DOWN_FOR_S
        why = f"{type(exc).__name__}: {exc}".rstrip(": ")
        return Unreachable(owner.node_id, why, retry_safe=connect or not sent or idempotent)

    def _headers(self, owner: Owner) -> dict[str, str]:
        return {protocol.FORWARDED_BY: self.node_id, protocol.VERSION: str(protocol.to_speak(owner.protocol))}

    async def proxy(self, request: web.Request, session_id: str, owner: Owner) -> web.StreamResponse:
        """Send ``request`` to the owner and stream its answer back as it comes (an SSE
        stream included). Unreachable when the owner does not answer or let the session go
        (nothing has been answered to the client then)."""
        self._check_up(owner)
        url = self._where(session_id, owner) + request.rel_url.path_qs
        headers = {
            name: request.headers[name] for name in protocol.REQUEST_HEADERS if name in request.headers
        }
        headers.update(self._headers(owner))
        stream = request.path.endswith("/events")
        wait = request.query.get("wait", "0").lower() not in ("0", "false", "no")
        idempotent = request.method in ("GET", "HEAD")
        if request.method == "POST" and request.path.endswith("/messages"):
            # A message with a key is recorded once however often it is sent: give it one,
            # so a send the owner may have taken can go again to the session's next node.
            headers.setdefault("Idempotency-Key", f"auto-{uuid.uuid4().hex}")
            idempotent = True
        read_s = (
            STREAM_IDLE_S if stream else self._turn_timeout_s + TURN_MARGIN_S if wait else ANSWER_TIMEOUT_S
        )
        body = await request_body(request)
        self.counts.proxied += 1
        call = self._session().request(
            request.method, url, headers=headers, data=body or None, timeout=self._timeout(read_s)
        )
        # A move's own answer comes once the lease has left the owner: that is its success.
        watch = not request.path.endswith("/move")
        upstream = await self._answer(session_id, owner, call, idempotent=idempotent, watch_lease=watch)
        async with upstream:
            if upstream.status == 503 and protocol.MOVED in upstream.headers:
                self.counts.moved += 1
                raise Unreachable(owner.node_id, "it let the session go", retry_safe=True, moved=True)
            response = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers={k: upstream.headers[k] for k in protocol.RESPONSE_HEADERS if k in upstream.headers},
            )
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # the owner went away mid-answer
                log.warning("%s: forwarded answer from node %s broke off: %s", session_id, owner.node_id, exc)
                return response
            await response.write_eof()
        return response

    async def _answer(
        self,
        session_id: str,
        owner: Owner,
        call: Awaitable[aiohttp.ClientResponse],
        *,
        idempotent: bool,
        watch_lease: bool = True,
    ) -> aiohttp.ClientResponse:
        """The owner's answer (its status and headers). One slower than a second is raced
        with the session's lease: if the lease leaves the owner (paused past its lease, or
        dead with the connection left open) the request is given up, as unreachable; not
        with ``watch_lease`` False (a move: the lease leaving is its success). The fast
        path costs a timer, not a task."""
        loop = asyncio.get_running_loop()
        watching: list[asyncio.Task[None]] = []
        try:
            async with asyncio.timeout(None) as deadline:

                def watch() -> None:
                    watching.append(loop.create_task(self._lease_leaves(session_id, owner.node_id, deadline)))

                later = loop.call_later(WATCH_AFTER_S, watch) if watch_lease else None
                try:
                    return await call
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # aiohttp's own timeouts too
                    raise self._failed(owner, exc, sent=True, idempotent=idempotent) from exc
                finally:
                    if later is not None:
                        later.cancel()
                    for task in watching:
                        task.cancel()
        except TimeoutError:  # the lease watch expired the deadline: the owner let it go
            self.counts.unreachable += 1
            raise Unreachable(
                owner.node_id,
                "its lease on the session ended while it held the request",
                retry_safe=idempotent,
            ) from None

    async def _lease_leaves(self, session_id: str, node_id: str, deadline: asyncio.Timeout) -> None:
        """Once the session's lease is no longer ``node_id``'s, end the wait for its answer."""
        lookup = self.lookup
        if lookup is None:
            return
        while True:
            with contextlib.suppress(Exception):  # the database is away: keep waiting
                owner = await lookup(session_id)
                if owner is None or owner.node_id != node_id:
                    deadline.reschedule(asyncio.get_running_loop().time())
                    return
            await asyncio.sleep(2.0)

    async def tell_to_take(self, owner: Owner, session_id: str) -> bool:
        """Ask ``owner`` — a node the session's lease was written over to — to recover it
        now; False (logged) when it did not say yes."""
        url = self._where(session_id, owner) + f"/api/cluster/sessions/{session_id}/take"
        headers = {"Authorization": f"Bearer {self._token}", **self._headers(owner)}
        try:
            async with self._session().post(
                url, headers=headers, timeout=self._timeout(TAKE_TIMEOUT_S)
            ) as answer:
                if answer.status < 300:
                    return True
                log.warning("%s: node %s did not take it (HTTP %d)", session_id, owner.node_id, answer.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("%s: cannot tell node %s to take it: %s", session_id, owner.node_id, exc)
        return False

    async def call(self, url: str, method: str = "POST") -> tuple[int, Any]:
        """A cluster call to another node (``/api/cluster/...``): status and JSON answer."""
        headers = {"Authorization": f"Bearer {self._token}", protocol.FORWARDED_BY: self.node_id}
        try:
            async with self._session().request(
                method, url, headers=headers, timeout=self._timeout(ANSWER_TIMEOUT_S)
            ) as answer:
                return answer.status, await answer.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise SessionUnavailable(f"{url} did not answer: {type(exc).__name__}: {exc}") from exc

    async def submit(self, session_id: str, owner: Owner, body: Mapping[str, Any]) -> dict[str, Any]:
        """Submit input (webhook, chat, reminder) on the owner; its JSON answer. An answer
        other than 2xx is raised as the owner's own error."""
        self._check_up(owner)
        url = self._where(session_id, owner) + protocol.SUBMIT_PATH
        headers = {"Authorization": f"Bearer {self._token}", **self._headers(owner)}
        inbound = body.get("inbound")
        idempotent = isinstance(inbound, Mapping) and inbound.get("identity") is not None
        read_s = self._turn_timeout_s + TURN_MARGIN_S if body.get("wait") else ANSWER_TIMEOUT_S
        self.counts.submitted += 1
        call = self._session().post(url, json=body, headers=headers, timeout=self._timeout(read_s))
        answer = await self._answer(session_id, owner, call, idempotent=idempotent)
        try:
            async with answer:
                if answer.status == 503 and protocol.MOVED in answer.headers:
                    self.counts.moved += 1
                    raise Unreachable(owner.node_id, "it let the session go", retry_safe=True, moved=True)
                data = await answer.json(content_type=None)
                status = answer.status
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise self._failed(owner, exc, sent=True, idempotent=idempotent) from exc
        if status >= 300:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            message = str(error.get("message", data))
            if status == 503:  # the owner could not take it now: the same answer as on one node
                raise SessionUnavailable(message)
            raise ApiError(status, str(error.get("code", "forward_failed")), message)
        if not isinstance(data, dict):
            raise Unreachable(owner.node_id, f"unexpected answer {data!r:.80}", retry_safe=idempotent)
        return data
