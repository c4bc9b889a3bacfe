"""Where a session's requests are served, and what happens when that node does not answer.

:meth:`Routing.where` decides: here (the session is resident here, or nobody holds it and
this node takes sessions), on the node holding its lease, or — this node draining — on a
live peer chosen by the session id (so concurrent requests for one session agree). A
session leaving this node (a drain, a move) is waited for first, then followed.

:meth:`Routing.route` carries a request out and, when the chosen node does not answer,
holds it (up to ``cluster.hold_s``) instead of answering 503 at once: the session's lease
decides where it goes next — a dead node's lease expires and the session is taken here;
a stopping node's is released or handed on. Only a request that is safe to send again
is held (it never reached the node, it is idempotent, or the node said it let the
session go); the rest are answered 503 with ``Retry-After``. Every request held for one
session waits on one look at its lease, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from netclaw.cluster._forwarder import Forwarder, Unreachable
from netclaw.errors import ApiError, NetclawError, SessionMoved
from netclaw.persistence import Journal, Owner, Peer

log = logging.getLogger(__name__)

T = TypeVar("T")

LOOK_EVERY_S = 0.25  # how often a held request's session lease is looked at
MOVED_PAUSE_S = 0.05  # before looking again for a session that just left a node


class LocalSessions(Protocol):
    """What the routing needs of this node's SessionManager."""

    def is_resident(self, session_id: str) -> bool: ...

    def leaving(self, session_id: str) -> bool: ...

    async def gone(self, session_id: str, timeout_s: float) -> bool: ...


@dataclass(slots=True)
class HoldCounts:
    """Requests held for a session's next node (``/metrics``)."""

    held: int = 0  # requests that waited, and were then served
    held_seconds: float = 0.0
    gave_up: int = 0  # requests answered 503 after waiting ``hold_s``


def unavailable(message: str, retry_after: float, code: str = "session_unavailable") -> ApiError:
    """A 503 that says when to try again."""
    seconds = max(1, round(retry_after))
    return ApiError(503, code, message).with_header("Retry-After", str(seconds))


class Routing:
    def __init__(
        self,
        node_id: str,
        forwarder: Forwarder,
        journal: Journal,
        sessions: LocalSessions,
        *,
        hold_s: float,
    ) -> None:
        self.node_id = node_id
        self.forwarder = forwarder
        self._journal = journal
        self._sessions = sessions
        self.hold_s = hold_s
        self.draining = False  # new sessions go to peers (set by the ClusterNode)
        self.peers: list[Peer] = []  # the registry as last read (by the ClusterNode)
        self.counts = HoldCounts()
        self._looks: dict[tuple[str, str], asyncio.Task[None]] = {}  # (session, node) → one look
        forwarder.lookup = journal.owner

    # -- where ----------------------------------------------------------------------------------

    async def where(self, session_id: str, *, wait_s: float | None = None) -> Owner | None:
        """The node to serve the session's requests: None for this one."""
        if self._sessions.is_resident(session_id):
            if not self._sessions.leaving(session_id):
                return None
            await self._sessions.gone(session_id, self.hold_s if wait_s is None else wait_s)
        owner = await self._journal.owner(session_id)
        if owner is not None or not self.draining:
            return owner
        peer = self.place(session_id)
        if peer is None:
            raise unavailable(
                f"session {session_id}: this node is stopping and no other node is up to take it; "
                "send it again in a moment",
                self.hold_s,
            )
        return peer

    def place(self, session_id: str) -> Owner | None:
        """A live peer that takes new sessions, the same for every request of one session
        (rendezvous hashing over the registry), or None."""
        candidates = [p for p in self.peers if p.node_id != self.node_id and not p.draining and p.url]
        if not candidates:
            return None
        best = max(candidates, key=lambda p: _score(session_id, p.node_id))
        return Owner(best.node_id, best.url, 0.0, best.protocol)

    # -- carrying a request out -------------------------------------------------------------

    async def route(
        self,
        session_id: str,
        send: Callable[[Owner], Awaitable[T]],
        here: Callable[[], Awaitable[T]],
        *,
        hold: bool = True,
    ) -> T:
        """Serve a request ``here`` or ``send`` it to the session's node; hold it while that
        node does not answer and the session has not moved on (see the module docstring).
        ``hold`` False (a read this node can answer too): serve it here instead."""
        started = time.monotonic()
        deadline = started + self.hold_s
        waited = False
        last: Owner | None = None
        while True:
            try:
                owner = await self.where(session_id, wait_s=max(deadline - time.monotonic(), 0.1))
                last = owner or last
                result = await (here() if owner is None else send(owner))
            except Unreachable as exc:
                if not hold:
                    return await here()
                if not exc.retry_safe:
                    raise unavailable(
                        f"session {session_id}: {exc}; it may have taken the request. Send it again "
                        "(with the same Idempotency-Key, if it had one) once the session has a new node",
                        last.expires_in + 1 if last is not None else self.hold_s,
                    ) from exc
                waited = True
                if exc.moved:
                    await asyncio.sleep(MOVED_PAUSE_S)
                else:
                    await self._until_moved(session_id, exc.node_id, deadline)
            except SessionMoved:  # it left this node meanwhile: follow it
                waited = True
                await asyncio.sleep(MOVED_PAUSE_S)
            else:
                if waited:
                    self.counts.held += 1
                    self.counts.held_seconds += time.monotonic() - started
                return result
            if time.monotonic() >= deadline:
                self.counts.gave_up += 1
                node = last.node_id if last is not None else "its node"
                raise unavailable(
                    f"session {session_id} is resident on node {node}, which did not answer for "
                    f"{self.hold_s:g}s and still holds it; send it again later",
                    last.expires_in + 1 if last is not None else self.hold_s,
                )

    async def _until_moved(self, session_id: str, node_id: str, deadline: float) -> None:
        """Until the session's lease leaves ``node_id`` (it expires, is released or handed
        on), or ``deadline``; one look per session and node, however many requests wait."""
        key = (session_id, node_id)
        look = self._looks.get(key)
        if look is None:
            look = asyncio.get_running_loop().create_task(self._look(session_id, node_id, deadline))
            self._looks[key] = look
            look.add_done_callback(lambda _: self._looks.pop(key, None))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(look), max(deadline - time.monotonic(), 0.0))

    async def _look(self, session_id: str, node_id: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                owner = await self._journal.owner(session_id)
            except NetclawError as exc:  # the database is away too: keep looking
                log.debug("%s: cannot look at its lease: %s", session_id, exc)
            else:
                if owner is None or owner.node_id != node_id:
                    return
            await asyncio.sleep(LOOK_EVERY_S)


def _score(session_id: str, node_id: str) -> int:
    digest = hashlib.blake2b(f"{session_id}\0{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
