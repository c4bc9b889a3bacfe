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

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
import psycopg_pool

from netclaw.errors import JournalError
from netclaw.persistence._journal import NewEvent, SessionRow, Snapshot, StoredEvent, UsageKey, UsageRow
from netclaw.persistence._writer import (
    Append,
    Batch,
    Erase,
    Query,
    SaveSnapshot,
    Write,
    WriterThread,
    settle,
)
from netclaw.persistence.postgres._schema import CONNECT_TIMEOUT_S, new_pool, open_pool, safe_dsn

log = logging.getLogger(__name__)

_USAGE_KEYS: dict[str, str] = {
    "session": "persistence_id",
    "day": "to_char(to_timestamp(ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "model": "COALESCE(payload::jsonb->>'model', 'unknown')",
}


class PostgresJournal:
    """Implements :class:`~netclaw.persistence.Journal` on a PostgreSQL database."""

    def __init__(
        self, dsn: str, *, on_commit: Callable[[float], None] | None = None, readers: int = 4
    ) -> None:
        self.dsn = dsn
        self.on_commit = on_commit  # seconds one group commit took (metrics); on the writer thread
        self._readers = readers
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._writer: _PgWriter | None = None
        self._closing = False
        self.commits = 0
        self.last_failure: str | None = None
        self.failed_commits = 0

    async def open(self) -> PostgresJournal:
        """Open the reader pool and start the writer thread. Migrations must have run."""
        writer = _PgWriter(self)
        pool = new_pool(self.dsn, "journal-readers", self._readers)
        try:
            await open_pool(pool, "events", self.dsn)
            writer.start()
            await asyncio.wrap_future(writer.ready)
        except (psycopg.Error, psycopg_pool.PoolTimeout, JournalError) as exc:
            if writer.is_alive():
                writer.put_stop()
                await asyncio.wrap_future(writer.finished)
            await pool.close()
            if isinstance(exc, JournalError):
                raise
            raise JournalError(
                f"cannot open the journal on PostgreSQL ({safe_dsn(self.dsn)}): {exc}"
            ) from exc
        self._pool = pool
        self._writer = writer
        return self

    @property
    def is_open(self) -> bool:
        return self._writer is not None and not self._closing

    def problem(self) -> str | None:
        """Why the journal cannot take writes now (``/healthz``), or None."""
        if self._writer is None or self._closing:
            return "the journal is closed"
        if not self._writer.is_alive():
            return "the journal's writer thread has stopped"
        if self.last_failure is not None:
            return f"the last journal commit failed ({self.last_failure})"
        return None

    # -- writes -------------------------------------------------------------------------------

    async def append(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(Append(persistence_id, expected_seq, events, row, future))
        return await future

    def append_threadsafe(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> concurrent.futures.Future[int]:
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        try:
            self._put(Append(persistence_id, expected_seq, events, row, future))
        except JournalError as exc:
            future.set_exception(exc)
        return future

    async def save_snapshot(
        self, persistence_id: str, seq: int, state: str, messages: Sequence[str] = (), first: int = 0
    ) -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(SaveSnapshot(persistence_id, seq, state, messages, first, future))
        await future

    async def erase(self, persistence_id: str) -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(Erase(persistence_id, future))
        await future

    def _put(self, item: Write | Erase) -> None:
        if self._writer is None or self._closing or not self._writer.is_alive():
            raise JournalError("the journal is closed")
        self._writer.put(item)

    async def run_on_writer(self, run: Callable[[psycopg.Connection[Any]], int]) -> int:
        """Run ``run`` on the writer's connection, in order with the writes (maintenance)."""
        if self._writer is None:
            raise JournalError("the journal is closed")
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._writer.put(Query(lambda link: run(link.get()), future))
        return await asyncio.wrap_future(future)

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

    _ROW = "SELECT id, channel, title, turns, last_activity, pending, last_seq, undelivered FROM sessions"

    async def list_sessions(self) -> list[SessionRow]:
        rows = await self._read(self._ROW + " ORDER BY last_activity DESC")
        return [_session_row(r) for r in rows]

    async def get_session(self, persistence_id: str) -> SessionRow | None:
        rows = await self._read(self._ROW + " WHERE id = %s", (persistence_id,))
        return _session_row(rows[0]) if rows else None

    async def sessions_with_pending_input(self) -> list[str]:
        rows = await self._read("SELECT id FROM sessions WHERE pending > 0 ORDER BY last_activity")
        return [str(r[0]) for r in rows]

    async def sessions_owing_replies(self, channel: str) -> list[str]:
        rows = await self._read(
            "SELECT id FROM sessions WHERE channel = %s AND undelivered > 0 ORDER BY last_activity",
            (channel,),
        )
        return [str(r[0]) for r in rows]

    async def usage(self, by: UsageKey, since: float | None = None) -> list[UsageRow]:
        key = _USAGE_KEYS[by]
        rows = await self._read(
            f"SELECT {key} AS k, COUNT(*),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'input_tokens')::bigint,"
            "              (payload::jsonb->'usage'->>'input_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'output_tokens')::bigint,"
            "              (payload::jsonb->'usage'->>'output_tokens')::bigint, 0)),"
            " SUM(COALESCE((payload::jsonb->'spent'->>'cache_read_tokens')::bigint, 0))"
            " FROM events WHERE type = 'TurnRecorded' AND ts >= %s GROUP BY k ORDER BY k",
            (since if since is not None else 0.0,),
        )
        return [UsageRow(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    async def close(self) -> None:
        writer = self._writer
        if writer is not None and not self._closing:
            self._closing = True  # queued writes land before the writer stops
            writer.put_stop()
            await asyncio.wrap_future(writer.finished)
        self._writer = None
        self._closing = False
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close()


_ONE_WRITER_LOCK = 0x6E6574636C6177 + 1  # held by the one node that writes this journal


class _Link:
    """The writer's connection, replaced when the server dropped it (a restart, a
    network blip): the batch that found it broken fails, the next one reconnects.

    Until sessions are leased per node, one node writes a database: the connection
    holds a session advisory lock, and a second node's writer cannot get it (nor can
    this one, after a reconnect, if another node took over meanwhile)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def get(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            self._conn = None
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            locked = conn.execute("SELECT pg_try_advisory_lock(%s)", (_ONE_WRITER_LOCK,)).fetchone()
            if not locked or not locked[0]:
                conn.close()
                raise JournalError(
                    f"another netclaw node is writing to this database ({safe_dsn(self.dsn)}); "
                    "one node per database until cluster leases are in place"
                )
            self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_INSERT_EVENTS = "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (%s,%s,%s,%s,%s)"
_UPSERT_SESSIONS = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq, undelivered)"
    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq, undelivered=excluded.undelivered"
)
_UPSERT_SNAPSHOTS = (
    "INSERT INTO snapshots (persistence_id, seq, state, ts) VALUES (%s,%s,%s,%s)"
    " ON CONFLICT (persistence_id) DO UPDATE SET seq=excluded.seq,"
    " state=excluded.state, ts=excluded.ts WHERE excluded.seq >= snapshots.seq"
)
_UPSERT_SNAPSHOT_MESSAGES = (
    "INSERT INTO snapshot_messages (persistence_id, idx, message) VALUES (%s,%s,%s)"
    " ON CONFLICT (persistence_id, idx) DO UPDATE SET message = excluded.message"
)


class _PgWriter(WriterThread[_Link]):
    def __init__(self, journal: PostgresJournal) -> None:
        super().__init__("netclaw-journal-writer", journal)
        self.dsn = journal.dsn

    def connect(self) -> _Link:
        link = _Link(self.dsn)
        try:
            link.get()  # JournalError as it is: another node holds the journal
        except psycopg.Error as exc:
            raise JournalError(
                f"cannot open the journal on PostgreSQL ({safe_dsn(self.dsn)}): {exc}"
            ) from exc
        return link

    def disconnect(self, conn: _Link) -> None:
        conn.close()

    def database_error(self, exc: Exception) -> bool:
        return isinstance(exc, psycopg.Error | JournalError)  # JournalError: the lock (see _Link)

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
        db = conn.get()
        with db.transaction(), db.cursor() as cur:
            if batch.events:
                cur.executemany(_INSERT_EVENTS, batch.events)
            if batch.rows:
                cur.executemany(_UPSERT_SESSIONS, batch.rows)
            if batch.snapshots:
                cur.executemany(_UPSERT_SNAPSHOTS, batch.snapshots)
            if batch.messages:
                cur.executemany(_UPSERT_SNAPSHOT_MESSAGES, batch.messages)

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


def _session_row(r: Sequence[Any]) -> SessionRow:
    return SessionRow(
        id=str(r[0]),
        channel=str(r[1]),
        title=r[2],
        turns=int(r[3]),
        last_activity=float(r[4]),
        pending=int(r[5]),
        last_seq=int(r[6]),
        undelivered=int(r[7]),
    )
