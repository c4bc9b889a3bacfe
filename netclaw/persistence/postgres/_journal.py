"""The PostgreSQL journal and snapshot store, for several daemons on one database.

The same shape as the SQLite journal: writes go to a writer thread with its own
connection that group-commits whatever is queued (:mod:`._writer`), a session actor's
append skips the loop, reads go through a small async connection pool on the loop.
Unlike SQLite, this process is not the only writer: the expected-sequence check reads
the sessions' last seqs inside each batch (no cache that another node could make
stale), and the primary key (persistence_id, seq) refuses whatever slips past it.
A connection the server dropped is replaced at the next batch.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
import psycopg_pool

from netclaw.errors import JournalError
from netclaw.persistence._journal import (
    Node,
    Owner,
    SessionPage,
    SessionQuery,
    SessionRow,
    Snapshot,
    StoredEvent,
    UsageKey,
    UsageRow,
    like_pattern,
)
from netclaw.persistence._writer import Batch, Erase, Query, WriterJournal, WriterThread, settle
from netclaw.persistence.postgres._leases import Leases
from netclaw.persistence.postgres._schema import (
    CONNECT_TIMEOUT_S,
    IDLE_CHECK_S,
    new_pool,
    open_pool,
    safe_dsn,
)

log = logging.getLogger(__name__)

_USAGE_KEYS: dict[str, str] = {
    "session": "persistence_id",
    "day": "to_char(to_timestamp(ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "model": "COALESCE(payload::jsonb->>'model', 'unknown')",
}


class PostgresJournal(WriterJournal):
    """Implements :class:`~netclaw.persistence.Journal` on a PostgreSQL database, as one
    node (``node_id``) of those sharing it: a session is claimed (leased) before it is
    recovered, and its writes are fenced by the lease (:mod:`._leases`)."""

    def __init__(
        self,
        dsn: str,
        *,
        node_id: str = "netclaw",
        advertise_url: str | None = None,
        lease_s: float = 15.0,
        on_commit: Callable[[float], None] | None = None,
        commit_delay_s: float = 0.0,
        readers: int = 4,
        version: str | None = None,
        protocol: int = 1,
    ) -> None:
        super().__init__(on_commit, commit_delay_s)
        self.dsn = dsn
        self.leases = Leases(
            dsn, node_id, advertise_url=advertise_url, lease_s=lease_s, version=version, protocol=protocol
        )
        self.leases.on_lost = self._lease_lost
        self._readers = readers
        self._pool: psycopg_pool.AsyncConnectionPool | None = None

    async def open(self, *, join_wait_s: float | None = None) -> PostgresJournal:
        """Join the cluster, open the reader pool and start the writer thread. Migrations
        must have run. ``join_wait_s``: how long to wait for a previous run of this node id
        to go quiet (default: a lease's time)."""
        writer = _PgWriter(self)
        pool = new_pool(self.dsn, "journal-readers", self._readers)
        try:
            await self.leases.open(wait_s=join_wait_s)
            await open_pool(pool, "events", self.dsn)
            await self._start_writer(writer)
        except (psycopg.Error, psycopg_pool.PoolTimeout, JournalError) as exc:
            await self._stop_writer(writer)
            await pool.close()
            await self.leases.close()
            if isinstance(exc, JournalError):
                raise
            raise JournalError(
                f"cannot open the journal on PostgreSQL ({safe_dsn(self.dsn)}): {exc}"
            ) from exc
        self._pool = pool
        return self

    def problem(self) -> str | None:
        return super().problem() or self.leases.problem()

    # -- ownership ----------------------------------------------------------------------------

    async def claim(self, persistence_id: str) -> int:
        return await self.leases.claim(persistence_id)

    def release(self, persistence_id: str, epoch: int) -> None:
        """After the session's queued writes: on the writer's queue (handed on instead, for a
        session being moved: :attr:`Leases.destined`). A journal already closed released
        every lease as it closed."""
        leases = self.leases
        done = _ignored()
        if persistence_id in leases.destined:  # a move waits for the hand-on to land
            leases.releasing[persistence_id] = done
        with contextlib.suppress(JournalError):
            self._put(Query(lambda link: leases.release_on(link.get(), persistence_id, epoch), done))

    async def owner(self, persistence_id: str) -> Owner | None:
        return await self.leases.owner(persistence_id)

    async def nodes(self) -> list[Node]:
        return await self.leases.nodes()

    def _lease_lost(self, persistence_id: str) -> None:
        if self.on_lease_lost is not None:
            self.on_lease_lost(persistence_id)

    async def orphans(self, mine: str | None = None) -> list[str]:
        rows = await self._read(
            "SELECT s.id FROM sessions s LEFT JOIN leases l ON l.persistence_id = s.id"
            " WHERE s.pending > 0 AND (l.persistence_id IS NULL OR l.expires_at < clock_timestamp()"
            " OR l.node_id = %s) ORDER BY s.last_activity",
            (mine,),
        )
        return [str(r[0]) for r in rows]

    # -- reads --------------------------------------------------------------------------------

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self._pool is None:
            raise JournalError("the journal is closed")
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(sql, params)
                return await cursor.fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise JournalError(f"journal read failed: {exc}") from exc

    async def replay(self, persistence_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._read(
            "SELECT seq, type, payload, ts FROM events WHERE persistence_id = %s AND seq > %s ORDER BY seq",
            (persistence_id, after_seq),
        )
        return [StoredEvent(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

    async def last_seq(self, persistence_id: str) -> int:
        rows = await self._read(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE persistence_id = %s", (persistence_id,)
        )
        return int(rows[0][0])

    async def load_snapshot(self, persistence_id: str) -> Snapshot | None:
        if self._pool is None:
            raise JournalError("the journal is closed")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                # One REPEATABLE READ view: the state and the rows it covers, as committed together.
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                head = await (
                    await conn.execute(
                        "SELECT seq, state, ts FROM snapshots WHERE persistence_id = %s", (persistence_id,)
                    )
                ).fetchone()
                if head is None:
                    return None
                rows = await (
                    await conn.execute(
                        "SELECT message FROM snapshot_messages WHERE persistence_id = %s ORDER BY idx",
                        (persistence_id,),
                    )
                ).fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise JournalError(f"journal read failed: {exc}") from exc
        return Snapshot(int(head[0]), str(head[1]), float(head[2]), [str(r[0]) for r in rows])

    _ROW = f"SELECT {SessionRow.COLUMNS} FROM sessions"

    async def list_sessions(self) -> list[SessionRow]:
        rows = await self._read(self._ROW + " ORDER BY last_activity DESC")
        return [SessionRow.from_row(r) for r in rows]

    async def find_sessions(self, query: SessionQuery) -> SessionPage:
        if query.only is not None and not query.only:
            return SessionPage([], 0, await self._channels())
        where: list[str] = ["TRUE"]
        params: list[Any] = []
        if query.text:
            where.append("(id ILIKE %s OR title ILIKE %s)")
            params += [like_pattern(query.text)] * 2
        if query.channel:
            where.append("channel = %s")
            params.append(query.channel)
        if query.only is not None:
            where.append("id = ANY(%s)")
            params.append(list(query.only))
        if query.excluding:
            where.append("NOT (id = ANY(%s))")
            params.append(list(query.excluding))
        clause = " WHERE " + " AND ".join(where)
        rows = await self._read(
            self._ROW + clause + " ORDER BY last_activity DESC, id LIMIT %s OFFSET %s",
            (*params, query.limit, query.offset),
        )
        total = await self._read("SELECT COUNT(*) FROM sessions" + clause, tuple(params))
        return SessionPage([SessionRow.from_row(r) for r in rows], int(total[0][0]), await self._channels())

    async def _channels(self) -> list[str]:
        return [str(r[0]) for r in await self._read("SELECT DISTINCT channel FROM sessions ORDER BY channel")]

    async def get_session(self, persistence_id: str) -> SessionRow | None:
        rows = await self._read(self._ROW + " WHERE id = %s", (persistence_id,))
        return SessionRow.from_row(rows[0]) if rows else None

    async def sessions_with_pending_input(self) -> list[str]:
        rows = await self._read("SELECT id FROM sessions WHERE pending > 0 ORDER BY last_activity")
        return [str(r[0]) for r in rows]

    async def sessions_owing_replies(self, channel: str) -> list[str]:
        rows = await self._read(
            "SELECT id FROM sessions WHERE channel = %s AND undelivered > 0 ORDER BY last_activity",
            (channel,),
        )
        return [str(r[0]) for r in rows]

    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]:
        key = _USAGE_KEYS[by]
        only = " AND persistence_id = ANY(%s)" if sessions is not None else ""
        params: tuple[Any, ...] = (since if since is not None else 0.0,)
        if sessions is not None:
            params += (list(sessions),)
        rows = await self._read(
            f"SELECT {key} AS k, SUM(CASE WHEN type = 'TurnRecorded' THEN 1 ELSE 0 END),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'input_tokens')::bigint,"
            "              (payload::jsonb->'usage'->>'input_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'output_tokens')::bigint,"
            "              (payload::jsonb->'usage'->>'output_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'cache_read_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'cache_write_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->>'cost')::double precision, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'speech_ms')::bigint, 0))"
            " FROM events WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed', 'ReplySpoken') AND ts >= %s"
            " AND (type = 'TurnRecorded' OR payload::jsonb ? 'spent')"
            f"{only} GROUP BY k ORDER BY k",
            params,
        )
        return [UsageRow.from_row(r) for r in rows]

    async def close(self) -> None:
        await self._stop_writer()
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close()
        await self.leases.close()


def _ignored() -> concurrent.futures.Future[int]:
    """A future nobody need wait on (a lease release: the lease expires anyway if it fails;
    only a move waits, to tell the new node once its lease is there)."""
    return concurrent.futures.Future()


class _Link:
    """The writer's connection, replaced when the server dropped it (a restart, a
    network blip). One that sat idle is checked first (:data:`IDLE_CHECK_S`), so a
    restart while nothing was written costs no batch; one that breaks under a batch fails
    that batch, and the next one reconnects."""

    def __init__(self, dsn: str, lease_s: float) -> None:
        self.dsn = dsn
        # A node stopped inside a write transaction (SIGSTOP, a stalled VM) holds its row
        # locks, and the node taking its expired lease over would wait on them: the server
        # ends such a transaction once it sat idle for a lease's time (its writes would be
        # fenced by then anyway).
        self._idle_ms = max(int(lease_s * 1000), 1000)
        self._conn: psycopg.Connection[Any] | None = None
        self._used = 0.0

    def get(self) -> psycopg.Connection[Any]:
        conn = self._conn
        now = time.monotonic()
        if conn is not None and not conn.broken and now - self._used > IDLE_CHECK_S:
            try:
                conn.execute("")
            except psycopg.Error:
                log.info("the journal's connection went stale while idle; reconnecting")
        self._used = now
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            self._conn = None
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            conn.execute(f"SET idle_in_transaction_session_timeout = {self._idle_ms}")
            self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# A batch's writes as multi-row statements: (the statement up to VALUES, what follows the
# rows, the row's width). For why not executemany, see :func:`batch_statements`.
_INSERT_EVENTS = ("INSERT INTO events (persistence_id, seq, type, payload, ts)", "", 5)
_UPSERT_SESSIONS = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq, undelivered)",
    " ON CONFLICT (id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq, undelivered=excluded.undelivered",
    8,
)
_UPSERT_SNAPSHOTS = (
    "INSERT INTO snapshots (persistence_id, seq, state, ts)",
    " ON CONFLICT (persistence_id) DO UPDATE SET seq=excluded.seq,"
    " state=excluded.state, ts=excluded.ts WHERE excluded.seq >= snapshots.seq",
    4,
)
_UPSERT_SNAPSHOT_MESSAGES = (
    "INSERT INTO snapshot_messages (persistence_id, idx, message)",
    " ON CONFLICT (persistence_id, idx) DO UPDATE SET message = excluded.message",
    3,
)
_MAX_PARAMS = 30_000  # per statement (the protocol's limit is 65,535)

Row = tuple[Any, ...]


def batch_statements(batch: Batch) -> list[tuple[str, list[Any]]]:
    """The statements that write ``batch`` (in a transaction), each with its parameters.

    Multi-row statements, not ``executemany``: psycopg runs an ``executemany`` in pipeline
    mode, and after one the server does not arm its idle-in-transaction timeout (``_Link``)
    until the next plain statement. A node stopped in that window (SIGSTOP, a stalled VM)
    held its row locks, and the node taking its expired lease over waited on them for good.
    After each of these the server waits with the timeout armed.

    One statement may not upsert a row twice, so an upsert keeps what doing them one by one
    would have left: a session's last row, a snapshot's newest seq, a transcript row's last
    text."""
    latest: dict[str, Row] = {}
    for row in batch.snapshots:  # WHERE excluded.seq >= snapshots.seq: the newest stays
        kept = latest.get(row[0])
        if kept is None or row[1] >= kept[1]:
            latest[row[0]] = row
    statements: list[tuple[str, list[Any]]] = []
    for (head, tail, width), rows in (
        (_INSERT_EVENTS, batch.events),
        (_UPSERT_SESSIONS, list({r[0]: r for r in batch.rows}.values())),
        (_UPSERT_SNAPSHOTS, list(latest.values())),
        (_UPSERT_SNAPSHOT_MESSAGES, list({(r[0], r[1]): r for r in batch.messages}.values())),
    ):
        one = "(" + ",".join(["%s"] * width) + ")"
        per = _MAX_PARAMS // width
        for at in range(0, len(rows), per):
            chunk: Sequence[Row] = rows[at : at + per]
            values = ",".join([one] * len(chunk))
            statements.append((f"{head} VALUES {values}{tail}", [v for r in chunk for v in r]))
    return statements


class _PgWriter(WriterThread[_Link]):
    def __init__(self, journal: PostgresJournal) -> None:
        super().__init__("netclaw-journal-writer", journal, journal.commit_delay_s)
        self.dsn = journal.dsn
        self.leases = journal.leases

    def connect(self) -> _Link:
        link = _Link(self.dsn, self.leases.lease_s)
        try:
            link.get()
        except psycopg.Error as exc:
            raise JournalError(
                f"cannot open the journal on PostgreSQL ({safe_dsn(self.dsn)}): {exc}"
            ) from exc
        return link

    def disconnect(self, conn: _Link) -> None:
        conn.close()

    def database_error(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.Error)

    def unreachable(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.OperationalError)

    def probe(self, conn: _Link) -> None:
        conn.get().execute("SELECT 1")

    def transaction(self, conn: _Link) -> contextlib.AbstractContextManager[object]:
        # The fence's row locks, the sequence checks and the writes: one transaction.
        return conn.get().transaction()

    def fence(self, conn: _Link, persistence_ids: Iterable[str]) -> dict[str, JournalError]:
        with conn.get().cursor() as cur:
            return self.leases.fence(cur, persistence_ids)

    def last_seqs(self, conn: _Link, persistence_ids: Iterable[str]) -> dict[str, int]:
        rows = (
            conn.get()
            .execute(
                "SELECT persistence_id, MAX(seq) FROM events WHERE persistence_id = ANY(%s)"
                " GROUP BY persistence_id",
                (list(persistence_ids),),
            )
            .fetchall()
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def saved_rows(self, conn: _Link, persistence_id: str) -> int:
        row = (
            conn.get()
            .execute(
                "SELECT COALESCE(MAX(idx) + 1, 0) FROM snapshot_messages WHERE persistence_id = %s",
                (persistence_id,),
            )
            .fetchone()
        )
        return int(row[0]) if row else 0

    def write_batch(self, conn: _Link, batch: Batch) -> None:
        with conn.get().cursor() as cur:  # inside :meth:`transaction`
            for statement, params in batch_statements(batch):
                cur.execute(statement, params)

    def erase(self, conn: _Link, erase: Erase) -> None:
        pid = erase.persistence_id
        try:
            db = conn.get()
            with db.transaction():
                db.execute("DELETE FROM events WHERE persistence_id = %s", (pid,))
                db.execute("DELETE FROM snapshots WHERE persistence_id = %s", (pid,))
                db.execute("DELETE FROM snapshot_messages WHERE persistence_id = %s", (pid,))
                db.execute("DELETE FROM sessions WHERE id = %s", (pid,))
                db.execute("DELETE FROM webhook_deliveries WHERE session_id = %s", (pid,))
                db.execute("DELETE FROM reminders WHERE session_id = %s", (pid,))
        except psycopg.Error as exc:
            settle([(erase.future, JournalError(f"erasing {pid} failed: {exc}"))])
            return
        settle([(erase.future, 0)])
