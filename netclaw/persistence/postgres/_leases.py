"""Which node owns each resident session, on the database every node shares.

A node claims a session's lease before it recovers the session; the claim bumps the
lease's epoch, and every journal write of that session is fenced by it (the writer
locks the lease rows in the write's transaction and refuses a write whose epoch is
not the row's: :meth:`Leases.fence`). A lease is renewed by its node while the
session is resident, released (expired at once, its epoch kept) when the session
stops, and taken over by another node only once it has expired. Times are the
database's clock, so nodes whose clocks disagree still agree on expiry.

A lease may also be handed on (a session moved to a named node, :meth:`Leases.hand_on`):
the old holder writes the new holder's name into the row at a new epoch, after its last
write, so no third node can take the session between the two; the new holder's claim
finds its own name there. If it never claims, the lease expires as any other.

The node registry beside it says where a node can be reached (``advertise_url``), what
it runs (version, forwarding protocol: rolling upgrades) and whether it is draining, so
input for a session owned elsewhere can be forwarded there; it also keeps two processes
from running as one node at once. A node joins as draining and says it takes sessions
only once it listens (:meth:`Leases.set_draining`), so no other node hands it a session
it cannot yet be told to take.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from netclaw.errors import JournalError, LeaseLost, SessionOwnedElsewhere
from netclaw.persistence._journal import Lease, Node, Owner, Peer
from netclaw.persistence.postgres._schema import PooledStore

log = logging.getLogger(__name__)

RETRY_S = 1.0  # how soon a renewal that failed is tried again

# Returns the new epoch, and who held the row before and whether they had released it
# (for the takeover counts).
_CLAIM = (
    "WITH prev AS (SELECT node_id, expires_at FROM leases WHERE persistence_id = %s)"
    " INSERT INTO leases AS l (persistence_id, node_id, epoch, expires_at)"
    " VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))"
    " ON CONFLICT (persistence_id) DO UPDATE SET node_id = excluded.node_id,"
    " epoch = l.epoch + 1, expires_at = excluded.expires_at"
    " WHERE l.expires_at < clock_timestamp() OR l.node_id = excluded.node_id"
    " RETURNING l.epoch, (SELECT node_id FROM prev), (SELECT expires_at = 'epoch' FROM prev)"
)
_LEASE = (
    "SELECT l.node_id, n.advertise_url, l.epoch, l.expires_at > clock_timestamp(),"
    " extract(epoch from l.expires_at - clock_timestamp()), COALESCE(n.protocol, 1)"
    " FROM leases l LEFT JOIN nodes n ON n.node_id = l.node_id WHERE l.persistence_id = %s"
)
_NODES = (
    "SELECT n.node_id, n.advertise_url, extract(epoch from n.started_at),"
    " extract(epoch from clock_timestamp() - n.seen_at),"
    " (SELECT COUNT(*) FROM leases l WHERE l.node_id = n.node_id AND l.expires_at > clock_timestamp())"
    " FROM nodes n ORDER BY n.node_id"
)
_HAND_ON = (
    "UPDATE leases SET node_id = %s, epoch = epoch + 1,"
    " expires_at = clock_timestamp() + make_interval(secs => %s)"
    " WHERE persistence_id = %s AND node_id = %s AND epoch = %s"
)
_PEERS = (
    "SELECT n.node_id, n.advertise_url, n.version, n.protocol, n.draining,"
    " extract(epoch from clock_timestamp() - n.seen_at),"
    " (SELECT count(*) FROM leases l WHERE l.node_id = n.node_id"
    "  AND l.expires_at > clock_timestamp() AND l.persistence_id NOT LIKE 'role:%%')"
    " FROM nodes n WHERE n.seen_at > clock_timestamp() - make_interval(secs => %s)"
    " ORDER BY n.node_id"
)
_DRAINING = "UPDATE nodes SET draining = %s WHERE node_id = %s AND incarnation = %s"
_RENEW = (
    "UPDATE leases l SET expires_at = clock_timestamp() + make_interval(secs => %s)"
    " FROM unnest(%s::text[], %s::bigint[]) AS c(pid, epoch)"
    " WHERE l.persistence_id = c.pid AND l.epoch = c.epoch AND l.node_id = %s"
    " RETURNING l.persistence_id"
)
_RELEASE = "UPDATE leases SET expires_at = 'epoch' WHERE persistence_id = %s AND node_id = %s AND epoch = %s"
_FENCE = (
    "SELECT persistence_id, node_id, epoch, expires_at < clock_timestamp()"
    " FROM leases WHERE persistence_id = ANY(%s) FOR SHARE"
)
_NODE_UP = (
    "INSERT INTO nodes AS n (node_id, advertise_url, incarnation, started_at, seen_at, version, protocol, draining)"
    " VALUES (%s, %s, %s, clock_timestamp(), clock_timestamp(), %s, %s, true)"
    " ON CONFLICT (node_id) DO UPDATE SET advertise_url = excluded.advertise_url,"
    " incarnation = excluded.incarnation, started_at = excluded.started_at, seen_at = excluded.seen_at,"
    " version = excluded.version, protocol = excluded.protocol, draining = true"
    " WHERE n.incarnation = excluded.incarnation"
    " OR n.seen_at < clock_timestamp() - make_interval(secs => %s)"
    " RETURNING node_id"
)
_NODE_SEEN = "UPDATE nodes SET seen_at = clock_timestamp() WHERE node_id = %s AND incarnation = %s"
_NODE_DOWN = "UPDATE nodes SET seen_at = 'epoch' WHERE node_id = %s AND incarnation = %s"
_NODE_AGE = "SELECT extract(epoch from clock_timestamp() - seen_at) FROM nodes WHERE node_id = %s"
_RELEASE_ALL = (
    "UPDATE leases l SET expires_at = 'epoch'"
    " FROM unnest(%s::text[], %s::bigint[]) AS c(pid, epoch)"
    " WHERE l.persistence_id = c.pid AND l.epoch = c.epoch AND l.node_id = %s"
)


@dataclass(slots=True)
class LeaseCounts:
    """What this node's leases went through (``/metrics``), counted as it happens."""

    renewals: int = 0  # renewal rounds that reached the database
    renewal_failures: int = 0
    lost: int = 0  # leases found taken over by another node at a renewal
    taken_after_expiry: int = 0  # claims of a lease another node held and let expire (it died)
    taken_after_release: int = 0  # claims of a lease another node gave up (it stopped or moved it)
    handed_on: int = 0  # leases this node wrote over to a named node (a move)


class Leases(PooledStore):
    """This node's leases and its row in the node registry. ``held`` (session → epoch) is
    read by the journal's writer thread to fence writes; the loop changes it."""

    table = "leases"
    what = "the lease store"

    def __init__(
        self,
        dsn: str,
        node_id: str,
        *,
        advertise_url: str | None = None,
        lease_s: float = 15.0,
        version: str | None = None,
        protocol: int = 1,
    ) -> None:
        super().__init__(dsn, size=2)
        self.node_id = node_id
        self.advertise_url = advertise_url
        self.lease_s = lease_s
        self.version = version
        self.protocol = protocol
        self.incarnation = uuid.uuid4().hex
        self.held: dict[str, int] = {}
        # Sessions to hand on to a named node when they stop here (a move), not release, and
        # the writer's answer once that is done.
        self.destined: dict[str, str] = {}
        self.releasing: dict[str, concurrent.futures.Future[int]] = {}
        self.counts = LeaseCounts()
        self.on_lost: Callable[[str], None] | None = None  # a session's lease went elsewhere
        self._renewed_at = time.monotonic()  # the last renewal that reached the database
        self._renewing: asyncio.Task[None] | None = None

    @property
    def renew_every_s(self) -> float:
        return max(self.lease_s / 3, 0.05)

    async def open(self, *, wait_s: float | None = None) -> Leases:
        """Join the cluster as this node. A node row of another process that was seen
        within the lease time is waited for (a crashed run of this node, or a second
        process given the same ``cluster.node_id``): up to ``wait_s``, then JournalError."""
        await self._open()
        limit = time.monotonic() + (self.lease_s + 1 if wait_s is None else wait_s)
        while True:
            rows = await self.fetch(
                _NODE_UP,
                (
                    self.node_id,
                    self.advertise_url,
                    self.incarnation,
                    self.version,
                    self.protocol,
                    self.lease_s,
                ),
            )
            if rows:
                break
            if time.monotonic() >= limit:
                await self.close()
                raise JournalError(
                    f"node id {self.node_id!r} is in use by another running netclaw (it renewed "
                    "its leases within cluster.lease_s); give every node its own cluster.node_id"
                )
            age = await self.fetch(_NODE_AGE, (self.node_id,))
            log.warning(
                "node id %s was alive %.1fs ago (a crashed run, or another process with this id); "
                "waiting for its leases to expire",
                self.node_id,
                float(age[0][0]) if age and age[0][0] is not None else 0.0,
            )
            await asyncio.sleep(min(self.renew_every_s, 1.0))
        self._renewed_at = time.monotonic()
        self._renewing = asyncio.get_running_loop().create_task(self._renew_forever())
        return self

    # -- ownership ------------------------------------------------------------------------------

    async def claim(self, persistence_id: str) -> int:
        """Own the session here; its new epoch. SessionOwnedElsewhere while another node's
        lease on it is live."""
        for _ in range(3):  # the other lease may expire (or be released) between two reads
            rows = await self.fetch(_CLAIM, (persistence_id, persistence_id, self.node_id, self.lease_s))
            if rows:
                epoch, before, released = int(rows[0][0]), rows[0][1], rows[0][2]
                if before is not None and before != self.node_id:
                    if released:
                        self.counts.taken_after_release += 1
                    else:
                        self.counts.taken_after_expiry += 1
                self.held[persistence_id] = epoch
                return epoch
            owner = await self.owner(persistence_id)
            if owner is not None:
                raise SessionOwnedElsewhere(persistence_id, owner.node_id, owner.url, owner.expires_in)
        raise JournalError(f"could not claim the lease of {persistence_id}")

    async def owner(self, persistence_id: str) -> Owner | None:
        """The other node holding a live lease on the session, or None."""
        lease = await self.lease_of(persistence_id)
        if lease is None or not lease.live or lease.node_id == self.node_id:
            return None
        return Owner(lease.node_id, lease.url, lease.expires_in, lease.protocol)

    async def lease_of(self, persistence_id: str) -> Lease | None:
        """The session's lease row as it is now (None: no node ever held it)."""
        rows = await self.fetch(_LEASE, (persistence_id,))
        if not rows:
            return None
        node_id, url, epoch, live, expires_in, protocol = rows[0]
        return Lease(
            str(node_id), str(url) if url else None, int(epoch), bool(live), float(expires_in), int(protocol)
        )

    async def nodes(self) -> list[Node]:
        """Every node that ever joined, with the sessions it holds now."""
        rows = await self.fetch(_NODES)
        return [Node(str(r[0]), r[1], float(r[2]), float(r[3]), int(r[4])) for r in rows]

    def release_on(self, conn: psycopg.Connection[Any], persistence_id: str, epoch: int) -> int:
        """Give the lease up (on the journal's writer connection, after the session's
        queued writes): it expires now, and its epoch stays — or, for a session being moved
        (:attr:`destined`), it is handed on to its new node."""
        if self.held.get(persistence_id) == epoch:
            del self.held[persistence_id]
        to = self.destined.pop(persistence_id, None)
        if to is not None:
            return self.hand_on(conn, persistence_id, epoch, to)
        return conn.execute(_RELEASE, (persistence_id, self.node_id, epoch)).rowcount

    def hand_on(self, conn: psycopg.Connection[Any], persistence_id: str, epoch: int, to: str) -> int:
        """Write the lease over to node ``to`` at a new epoch (live for a lease's time, for it
        to claim): nobody else can take the session meanwhile, and a late write of ours
        would be fenced."""
        changed = conn.execute(_HAND_ON, (to, self.lease_s, persistence_id, self.node_id, epoch)).rowcount
        if changed:
            self.counts.handed_on += 1
            log.info("%s: handed on to node %s", persistence_id, to)
        return changed

    async def handed_on(self, persistence_id: str, timeout_s: float) -> bool:
        """Wait until a session that stopped here for a move has its lease written over to
        its new node (True), or it could not be (False)."""
        future = self.releasing.pop(persistence_id, None)
        if future is None:
            return False
        done: asyncio.Future[int] = asyncio.wrap_future(future)
        try:
            return bool(await asyncio.wait_for(done, timeout_s))
        except (TimeoutError, JournalError, psycopg.Error):
            return False

    # -- the registry ---------------------------------------------------------------------------

    async def peers(self) -> list[Peer]:
        """Every live node (this one included): renewed within a lease's time."""
        rows = await self.fetch(_PEERS, (self.lease_s,))
        return [
            Peer(
                str(r[0]),
                str(r[1]) if r[1] else None,
                str(r[2]) if r[2] else None,
                int(r[3]),
                bool(r[4]),
                float(r[5]),
                int(r[6]),
            )
            for r in rows
        ]

    async def set_draining(self, draining: bool) -> None:
        """Tell the other nodes that this one takes no new sessions (or does again)."""
        await self.execute(_DRAINING, (draining, self.node_id, self.incarnation))

    def fence(self, cur: psycopg.Cursor[Any], persistence_ids: Iterable[str]) -> dict[str, JournalError]:
        """In the writer's transaction: lock the sessions' lease rows (a takeover waits for
        this transaction, and then sees its writes) and say which writes may not land. A
        session this node holds needs the row at its epoch; one it does not hold may be
        written only while nobody else holds it (maintenance, migration, tests)."""
        pids = list(persistence_ids)
        rows = {str(r[0]): r for r in cur.execute(_FENCE, (pids,)).fetchall()}
        refused: dict[str, JournalError] = {}
        for pid in pids:
            epoch = self.held.get(pid)
            row = rows.get(pid)
            if epoch is not None:
                if row is None or row[1] != self.node_id or int(row[2]) != epoch:
                    holder = f"node {row[1]}" if row is not None else "nobody"
                    refused[pid] = LeaseLost(
                        f"session {pid}: this node's lease (epoch {epoch}) was taken over by "
                        f"{holder}; the write is refused and the session stops here"
                    )
            elif row is not None and not row[3] and row[1] != self.node_id:
                refused[pid] = LeaseLost(f"session {pid} is resident on node {row[1]}; the write is refused")
        return refused

    # -- renewal ------------------------------------------------------------------------------

    async def _renew_forever(self) -> None:
        failing = False
        while True:
            # After a failure, sooner: a node is back (and healthy) soon after its database.
            await asyncio.sleep(min(self.renew_every_s, RETRY_S) if failing else self.renew_every_s)
            try:
                await self.renew()
            except JournalError as exc:
                self.counts.renewal_failures += 1
                if not failing:
                    log.warning("cannot renew this node's leases: %s", exc)
                failing = True
            else:
                if failing:
                    log.warning("this node renews its leases again")
                failing = False

    async def renew(self) -> list[str]:
        """Extend every lease this node holds; the sessions whose lease was lost (taken over
        after it expired), each told to ``on_lost``."""
        held = dict(self.held)
        await self.execute(_NODE_SEEN, (self.node_id, self.incarnation))
        kept: set[str] = set()
        if held:
            rows = await self.fetch(_RENEW, (self.lease_s, list(held), list(held.values()), self.node_id))
            kept = {str(r[0]) for r in rows}
        self._renewed_at = time.monotonic()
        self.counts.renewals += 1
        lost = [pid for pid, epoch in held.items() if pid not in kept and self.held.get(pid) == epoch]
        for pid in lost:
            del self.held[pid]
            self.counts.lost += 1
            log.warning("%s: this node's lease was taken over by another node; stopping it here", pid)
            if self.on_lost is not None:
                self.on_lost(pid)
        return lost

    def problem(self) -> str | None:
        """The leases may have expired: this node has not reached the database for longer
        than a lease lasts."""
        silent = time.monotonic() - self._renewed_at
        if self._renewing is not None and silent > self.lease_s:
            return f"this node has not renewed its session leases for {silent:.0f}s"
        return None

    async def stop_renewing(self) -> bool:
        """Stop the renewal task (whether it ran): what a node that died would do, so
        tests can play one."""
        task, self._renewing = self._renewing, None
        if task is None:
            return False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True

    async def close(self) -> None:
        """Leave the cluster: the leases still held expire now, so other nodes need not wait."""
        if await self.stop_renewing():
            held, self.held = dict(self.held), {}
            with contextlib.suppress(JournalError):
                if held:
                    await self.execute(_RELEASE_ALL, (list(held), list(held.values()), self.node_id))
                await self.execute(_NODE_DOWN, (self.node_id, self.incarnation))
        await super().close()
