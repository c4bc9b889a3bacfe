"""This node as a member of the cluster: its view of the others, draining, moving a session
to a named node, and evening out the resident sessions.

- **The view.** The registry (live nodes: version, protocol, draining, live leases) is
  read every ``lease_s / 3`` and kept for routing, health and the rebalancer.
- **Drain** (SIGTERM, or ``netclaw cluster drain NODE``). The node stops taking sessions
  (the others see ``draining`` in the registry; what reaches it goes to a live peer),
  and every resident session is handed off to the least loaded peer: an idle one at
  once, a busy one when its turn has finished — within ``drain_s``, after which a stop
  goes on and cuts what is left, as before. Alone, it only lets running turns finish
  (new input is answered 503 with ``Retry-After``).
- **Move** (``POST /api/sessions/{id}/move?to=NODE``). The owner hands the session off
  with its lease destined for the target (written over to it after the session's last
  write, so no third node takes it meanwhile) and tells the target to take it now.
- **Rebalance.** Every ``rebalance_every_s``, a node above the even share moves its own
  excess to the nodes below it (:mod:`.balance`), idle sessions first, at most
  ``rebalance_batch`` at a time. A restarted node starts empty and is filled this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import Metric

from netclaw.cluster import Forwarder, LeaseCountsView, NodeCounts, Routing, cluster_families, protocol
from netclaw.cluster.balance import plan_moves, spread
from netclaw.config import ClusterConfig
from netclaw.errors import ApiError, NetclawError
from netclaw.persistence import Lease, Owner, Peer
from netclaw.sessions import Phase, SessionManager

log = logging.getLogger(__name__)

MOVE_WAIT_S = 10.0  # how long a move asked over the API waits for a busy session's turn
HAND_ON_WAIT_S = 10.0  # for the lease to be written over to the new node (after the last write)


class Registry(Protocol):
    """The lease store's registry side (:class:`netclaw.persistence.postgres.Leases`)."""

    node_id: str
    version: str | None
    protocol: int
    held: dict[str, int]
    destined: dict[str, str]

    @property
    def counts(self) -> LeaseCountsView: ...

    async def peers(self) -> list[Peer]: ...

    async def set_draining(self, draining: bool) -> None: ...

    async def lease_of(self, persistence_id: str) -> Lease | None: ...

    async def handed_on(self, persistence_id: str, timeout_s: float) -> bool: ...


@dataclass(frozen=True, slots=True)
class MoveResult:
    session_id: str
    to: str
    moved: bool  # False: still finishing its turn; it moves when the turn ends


class ClusterNode:
    def __init__(
        self,
        config: ClusterConfig,
        registry: Registry,
        manager: SessionManager,
        routing: Routing,
        *,
        pinned: Callable[[str], bool] = lambda _: False,
        on_drain: Callable[[], Awaitable[None]] | None = None,
        on_resume: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.node_id = registry.node_id
        self._registry = registry
        self._manager = manager
        self.routing = routing
        self.forwarder: Forwarder = routing.forwarder
        self._pinned = pinned  # sessions the rebalancer leaves here (a channel only this node runs)
        self._on_drain = on_drain
        self._on_resume = on_resume
        self.draining = False
        self.counts = NodeCounts()
        self._moving: dict[str, asyncio.Task[bool]] = {}
        self._task: asyncio.Task[None] | None = None
        self._rebalanced_at = time.monotonic()
        self._announced = False  # told the registry this node takes sessions

    # -- the view -------------------------------------------------------------------------------

    @property
    def peers(self) -> list[Peer]:
        return self.routing.peers

    async def start(self) -> None:
        """This node listens now: say it takes sessions (it joined the registry draining)."""
        await self._announce()
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="cluster-node")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for moving in list(self._moving.values()):
            moving.cancel()

    async def _announce(self) -> None:
        if self.draining or self._announced:
            return
        try:
            await self._registry.set_draining(False)
            self._announced = True
        except NetclawError as exc:  # the database is away: the watch tries again
            log.debug("cannot tell the other nodes this one takes sessions: %s", exc)

    async def refresh(self) -> list[Peer]:
        try:
            self.routing.peers = await self._registry.peers()
        except NetclawError as exc:
            log.debug("cannot read the node registry: %s", exc)
        return self.routing.peers

    async def _watch(self) -> None:
        every = max(self.config.lease_s / 3, 0.05)
        while True:
            await asyncio.sleep(every)
            await self._announce()
            await self.refresh()
            if time.monotonic() - self._rebalanced_at >= self.config.rebalance_every_s:
                self._rebalanced_at = time.monotonic()
                try:
                    self.rebalance_once()
                except Exception:  # a bug here must not end the view's refresh
                    log.exception("rebalancing failed")

    def _takers(self) -> dict[str, Peer]:
        """Live nodes that take sessions, reachable for forwarding."""
        return {p.node_id: p for p in self.peers if not p.draining and p.url}

    # -- moving one session -----------------------------------------------------------------

    def move(self, session_id: str, to: str, *, reason: str) -> asyncio.Task[bool]:
        """Hand the session off to node ``to``; the task ends True once ``to`` was told to
        take it (False when the session was not resident here or the hand-off failed)."""
        moving = self._moving.get(session_id)
        if moving is not None:
            return moving
        task = asyncio.get_running_loop().create_task(self._move(session_id, to, reason))
        self._moving[session_id] = task
        task.add_done_callback(lambda _: self._moving.pop(session_id, None))
        return task

    async def _move(self, session_id: str, to: str, reason: str) -> bool:
        peer = self._takers().get(to)
        if peer is None:
            self.counts.moves_failed += 1
            return False
        self._registry.destined[session_id] = to
        gone = self._manager.hand_off(session_id)
        if gone is None:  # not resident here (any more)
            self._registry.destined.pop(session_id, None)
            return False
        await gone
        if not await self._registry.handed_on(session_id, HAND_ON_WAIT_S):
            # Released instead (or the database is away): whichever node it reaches next takes it.
            log.warning("%s: its lease could not be handed on to node %s", session_id, to)
            self.counts.moves_failed += 1
            return False
        log.info("%s: moved to node %s (%s)", session_id, to, reason)
        self.counts.moves[reason] += 1
        await self._tell_to_take(peer, session_id)
        return True

    async def _tell_to_take(self, peer: Peer, session_id: str) -> None:
        """The lease is written over to ``peer``: tell it to recover the session now (its
        queued input runs there, and its next request finds it resident). If it never
        does, the lease expires and any node takes the session."""
        await self.forwarder.tell_to_take(Owner(peer.node_id, peer.url, 0.0, peer.protocol), session_id)

    async def move_by_request(self, session_id: str, to: str) -> MoveResult:
        """``POST /api/sessions/{id}/move?to=NODE`` on the session's owner (or on any node
        when nobody holds it)."""
        if to == self.node_id and self._manager.is_resident(session_id):
            return MoveResult(session_id, to, True)
        peer = self._takers().get(to) or (await self._fresh_takers()).get(to)
        if peer is None:
            known = ", ".join(sorted(self._takers())) or "none"
            raise ApiError(
                409, "node_unavailable", f"node {to!r} is not a live node taking sessions (live: {known})"
            )
        if not self._manager.is_resident(session_id):
            lease = await self._registry.lease_of(session_id)
            if lease is not None and lease.live and lease.node_id != self.node_id:
                raise ApiError(
                    409,
                    "owned_elsewhere",
                    f"session {session_id} is resident on node {lease.node_id}; ask it",
                )
            await self._tell_to_take(peer, session_id)
            return MoveResult(session_id, to, True)
        task = self.move(session_id, to, reason="api")
        try:
            moved = await asyncio.wait_for(asyncio.shield(task), MOVE_WAIT_S)
        except TimeoutError:
            return MoveResult(session_id, to, False)
        if not moved:
            raise ApiError(409, "not_moved", f"session {session_id} could not be handed off to {to}")
        return MoveResult(session_id, to, True)

    async def _fresh_takers(self) -> dict[str, Peer]:
        await self.refresh()
        return self._takers()

    def take(self, session_id: str) -> None:
        """Another node handed the session on to this one: recover it now."""
        self._manager.warm(session_id)

    # -- drain ------------------------------------------------------------------------------

    async def drain(self, *, stopping: bool) -> dict[str, Any]:
        """Hand every resident session off and take no new ones (see the module docstring).
        Returns how many moved and which were still here after ``drain_s``."""
        if self.draining and not stopping:
            return {"node_id": self.node_id, "draining": True, "moved": 0, "left": self._here()}
        takers = {n: p for n, p in (await self._fresh_takers()).items() if n != self.node_id}
        if not takers and not stopping:
            raise ApiError(
                409, "no_other_node", "no other live node takes sessions: draining this one would leave none"
            )
        self._set_draining(True)
        self.counts.drains += 1
        with contextlib.suppress(NetclawError):  # the others learn it from the registry
            await self._registry.set_draining(True)
        if self._on_drain is not None:
            await self._on_drain()
        sessions = [sid for sid, _ in self._manager.by_last_use()]
        placed = spread(sessions, {n: p.sessions for n, p in takers.items()})
        log.info(
            "draining: handing %d session(s) off to %s",
            len(sessions),
            ", ".join(sorted(takers)) or "nobody (alone: running turns finish, then the leases go)",
        )
        waits: list[Awaitable[Any]] = []
        for session_id in sessions:
            to = placed.get(session_id)
            if to is not None:
                waits.append(self.move(session_id, to, reason="drain"))
            else:
                gone = self._manager.hand_off(session_id)
                if gone is not None:
                    waits.append(gone)
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits], timeout=self.config.drain_s)
        left = self._here()
        if left:
            log.warning("drain: %d session(s) still busy after %gs: %s", len(left), self.config.drain_s, left)
        if stopping and takers and self.config.drain_linger_s > 0:
            # What still reaches this node goes to the others, until load balancers have seen
            # /healthz say "draining" and send nothing more.
            await asyncio.sleep(self.config.drain_linger_s)
        return {"node_id": self.node_id, "draining": True, "moved": len(sessions) - len(left), "left": left}

    async def resume(self) -> dict[str, Any]:
        """Take sessions again (after a drain by hand)."""
        if self.draining:
            self._set_draining(False)
            with contextlib.suppress(NetclawError):
                await self._registry.set_draining(False)
            if self._on_resume is not None:
                await self._on_resume()
            log.info("taking sessions again")
        return {"node_id": self.node_id, "draining": False}

    def _set_draining(self, draining: bool) -> None:
        self.draining = self.routing.draining = self._manager.draining = draining

    def _here(self) -> list[str]:
        return sorted(self._manager.resident())

    # -- rebalancing ------------------------------------------------------------------------

    def rebalance_once(self) -> int:
        """One round: start moving this node's excess to the nodes below the share; how
        many moves started."""
        if self.draining or not self.config.rebalance:
            return 0
        takers = self._takers()
        if self.node_id not in takers or len(takers) < 2:
            return 0
        loads = {n: p.sessions for n, p in takers.items()}
        loads[self.node_id] = max(0, loads[self.node_id] - len(self._moving))
        limit = self.config.rebalance_batch - len(self._moving)
        plan = plan_moves(loads, self.node_id, limit)
        if not plan:
            return 0
        candidates = self._movable()
        started = 0
        for to, count in sorted(plan.items()):
            for _ in range(count):
                if not candidates:
                    break
                self.move(candidates.pop(0), to, reason="rebalance")
                started += 1
        if started:
            log.info("rebalancing: moving %d session(s) (%s)", started, plan)
        return started

    def _movable(self) -> list[str]:
        """Idle sessions first (least recently used first), then busy ones (they move when
        their turn ends); none already moving, none pinned here."""
        order = {Phase.READY: 0, Phase.PROCESSING: 1, Phase.COMPACTING: 1}
        found = [
            (order[phase], i, sid)
            for i, (sid, phase) in enumerate(self._manager.by_last_use())
            if phase in order and sid not in self._moving and not self._pinned(sid)
        ]
        return [sid for _, _, sid in sorted(found)]

    # -- what it shows ----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``/healthz``'s ``cluster`` section."""
        return {
            "node_id": self.node_id,
            "version": self._registry.version,
            "protocol": protocol.CURRENT,
            "state": "draining" if self.draining else "active",
            "leases": len(self._registry.held),
            "peers": [p.to_json() for p in self.peers if p.node_id != self.node_id],
        }

    def status(self) -> dict[str, Any]:
        """``GET /api/cluster``: every live node as the registry has it."""
        return {
            "node_id": self.node_id,
            "draining": self.draining,
            "nodes": [p.to_json() for p in self.peers],
        }

    async def owner(self, session_id: str) -> dict[str, Any]:
        """``GET /api/sessions/{id}/owner``."""
        lease = await self._registry.lease_of(session_id)
        here = self._manager.is_resident(session_id)
        live = lease is not None and lease.live
        return {
            "session_id": session_id,
            "node_id": lease.node_id if live and lease is not None else None,
            "url": lease.url if live and lease is not None else None,
            "epoch": lease.epoch if lease is not None else None,
            "expires_in": round(lease.expires_in, 2) if live and lease is not None else None,
            "resident_here": here,
            "asked": self.node_id,
        }

    def metric_families(self) -> Iterable[Metric]:
        """``/metrics``: the cluster's counters (read at scrape time)."""
        return cluster_families(
            leases=self._registry.counts,
            forwards=self.forwarder.counts,
            holds=self.routing.counts,
            node=self.counts,
            peers=self.peers,
            held=len(self._registry.held),
            version=self._registry.version,
            draining=self.draining,
        )
