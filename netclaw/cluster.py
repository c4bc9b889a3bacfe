"""Several nodes on one database: what reaches a node for a session another node owns is
forwarded there over HTTP.

Why forwarding rather than an inbox table the owner is woken for (LISTEN/NOTIFY): the
owner answers the forwarded request only once the message is durable in its journal,
so the 202 a client gets from any node means what it means on one node; every session
call — cancel, approvals, a reply waited for, an SSE stream — is forwarded the same
way, with the owner's own answer; and there is no second durable queue to keep
exactly-once. The price is that the owner must be reachable: if it is not (it died,
its lease not yet expired), the answer is 503 with how long until the lease expires,
and a retry then recovers the session on whichever node it reaches.

Nodes authenticate to each other with the control token every node shares
(``gateway.control_token_env``); a forwarded request says which node forwarded it and
is never forwarded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from netclaw.errors import ApiError, NetclawError, SessionOwnedElsewhere, SessionUnavailable
from netclaw.persistence import Journal, Owner

log = logging.getLogger(__name__)

FORWARDED_BY = "X-Netclaw-Forwarded-By"  # the node that forwarded the request
SUBMIT_PATH = "/api/cluster/messages"  # input that did not come through the session API
# Passed on as they are; hop-by-hop and length headers are the client library's.
_REQUEST_HEADERS = ("Authorization", "Content-Type", "Accept", "Idempotency-Key", "Last-Event-ID")
_RESPONSE_HEADERS = ("Content-Type", "Cache-Control", "Retry-After", "Location")
CONNECT_TIMEOUT_S = 5.0


def forwarded(request: web.Request) -> bool:
    """Whether another node forwarded this request here (it is then served here)."""
    return FORWARDED_BY in request.headers


class Forwarder:
    """This node's client to the others: proxies API requests, submits other input."""

    def __init__(self, node_id: str, token: str) -> None:
        self.node_id = node_id
        self._token = token
        self._client: aiohttp.ClientSession | None = None
        self.forwarded = 0  # requests sent to another node (tests, metrics)

    def _session(self) -> aiohttp.ClientSession:
        if self._client is None:  # created on the loop, on first use
            timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S, sock_read=None)
            self._client = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
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

    def _unreachable(self, session_id: str, owner: Owner, exc: BaseException) -> SessionUnavailable:
        return SessionUnavailable(
            f"session {session_id} is resident on node {owner.node_id}, which did not answer "
            f"({type(exc).__name__}: {exc}); send it again in {max(owner.expires_in, 1.0):.0f}s, "
            "when its lease has expired and another node takes the session over"
        )

    async def proxy(self, request: web.Request, session_id: str, owner: Owner) -> web.StreamResponse:
        """Send ``request`` to the owner and stream its answer back as it comes (an SSE
        stream included)."""
        url = self._where(session_id, owner) + request.rel_url.path_qs
        headers = {name: request.headers[name] for name in _REQUEST_HEADERS if name in request.headers}
        headers[FORWARDED_BY] = self.node_id
        body = await request.read() if request.body_exists else None
        self.forwarded += 1
        try:
            upstream = await self._session().request(request.method, url, headers=headers, data=body)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise self._unreachable(session_id, owner, exc) from exc
        async with upstream:
            response = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers={k: upstream.headers[k] for k in _RESPONSE_HEADERS if k in upstream.headers},
            )
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (aiohttp.ClientError, OSError) as exc:  # the owner went away mid-answer
                log.warning("%s: forwarded answer from node %s broke off: %s", session_id, owner.node_id, exc)
                return response
            await response.write_eof()
        return response

    async def submit(self, session_id: str, owner: Owner, body: Mapping[str, Any]) -> dict[str, Any]:
        """Submit input (webhook, chat, reminder) on the owner; its JSON answer. An answer
        other than 2xx is raised as the owner's own error."""
        url = self._where(session_id, owner) + SUBMIT_PATH
        headers = {"Authorization": f"Bearer {self._token}", FORWARDED_BY: self.node_id}
        self.forwarded += 1
        try:
            async with self._session().post(url, json=body, headers=headers) as answer:
                data = await answer.json(content_type=None)
                status = answer.status
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise self._unreachable(session_id, owner, exc) from exc
        if status >= 300:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            message = str(error.get("message", data))
            if status == 503:  # the owner could not take it now: the same answer as on one node
                raise SessionUnavailable(message)
            raise ApiError(status, str(error.get("code", "forward_failed")), message)
        if not isinstance(data, dict):
            raise self._unreachable(session_id, owner, ValueError(f"unexpected answer {data!r}"))
        return data


async def rescue_orphans(journal: Journal, warm: Callable[[str], None], every_s: float) -> None:
    """Forever: recover here the sessions a node that died left with unanswered input,
    once their leases expired (every node looks; the first claim wins, the others' stop
    quietly). Acknowledged input is never left waiting for its next message."""
    while True:
        await asyncio.sleep(every_s)
        try:
            orphans = await journal.orphans()
        except NetclawError as exc:
            log.warning("cannot look for sessions left by a failed node: %s", exc)
            continue
        for session_id in orphans:
            log.info("%s: recovering it here: its node is gone and it owes replies", session_id)
            warm(session_id)
