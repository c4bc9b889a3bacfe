"""The embedded SQLite journal and snapshot store.

One writer task on the I/O loop group-commits: every append waiting when a
transaction starts goes into that transaction, so N concurrent sessions pay
for one fsync, not N. Reads use a second connection (WAL lets them run beside
the writer). The expected-sequence check runs against an in-memory copy of
each session's last seq — safe because this process is the only writer (the
daemon holds a lock on ``data_dir``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from netclaw.errors import JournalError, SequenceConflict
from netclaw.persistence._journal import NewEvent, SessionRow, Snapshot, StoredEvent
from netclaw.persistence._migrations import apply_migrations, load_migrations

log = logging.getLogger(__name__)

_MAX_BATCH = 512  # appends per transaction; bounds one commit's latency


@dataclass(slots=True)
class _Append:
    persistence_id: str
    expected_seq: int
    events: Sequence[NewEvent]
    row: SessionRow | None
    future: asyncio.Future[int]


@dataclass(slots=True)
class _SaveSnapshot:
    persistence_id: str
    seq: int
    state: str
    future: asyncio.Future[int]


_Write = _Append | _SaveSnapshot


@dataclass(slots=True)
class _Batch:
    events: list[tuple[str, int, str, str, float]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    snapshots: list[tuple[str, int, str, float]] = field(default_factory=list)
    done: list[tuple[asyncio.Future[int], int]] = field(default_factory=list)


def prepare_database(path: Path, *, synchronous: str = "full") -> list[int]:
    """Create the file if needed, switch to WAL, apply migrations. Blocking; start-up only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open database {path}: {exc}") from exc
    try:
        _configure(conn, synchronous)
        return apply_migrations(conn, load_migrations())
    except sqlite3.DatabaseError as exc:
        raise JournalError(f"database {path} is not usable: {exc}") from exc
    finally:
        conn.close()


def _configure(conn: sqlite3.Connection, synchronous: str) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"could not switch the database to WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'full' else 'NORMAL'}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA foreign_keys=ON")


class SqliteJournal:
    """Implements :class:`~netclaw.persistence.Journal` on one SQLite file."""

    def __init__(self, path: Path, *, synchronous: str = "full") -> None:
        self.path = path
        self._synchronous = synchronous
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._queue: asyncio.Queue[_Write | None] = asyncio.Queue()  # None: stop
        self._last_seq: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0  # transactions committed (benchmarks report appends per commit)

    async def open(self) -> SqliteJournal:
        """Open both connections and start the writer. Migrations must have run."""
        try:
            self._writer = await aiosqlite.connect(self.path, isolation_level=None)
            self._reader = await aiosqlite.connect(self.path, isolation_level=None)
            for conn in (self._writer, self._reader):
                mode = await (await conn.execute("PRAGMA journal_mode")).fetchone()
                if not mode or str(mode[0]).lower() != "wal":
                    raise JournalError(f"{self.path} is not in WAL mode; run migrations first")
                sync = "FULL" if self._synchronous == "full" else "NORMAL"
                await conn.execute(f"PRAGMA synchronous={sync}")
                await conn.execute("PRAGMA busy_timeout=5000")
        except JournalError:
            await self.close()
            raise
        except sqlite3.Error as exc:
            await self.close()
            raise JournalError(f"cannot open journal {self.path}: {exc}") from exc
        self._task = asyncio.get_running_loop().create_task(self._write_loop(), name="journal-writer")
        return self

    # -- writes -------------------------------------------------------------------------------

    async def append(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(_Append(persistence_id, expected_seq, events, row, future))
        return await future

    async def save_snapshot(self, persistence_id: str, seq: int, state: str) -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(_SaveSnapshot(persistence_id, seq, state, future))
        await future

    def _put(self, write: _Write) -> None:
        if self._task is None or self._task.done() or self._closing:
            raise JournalError("the journal is closed")
        self._queue.put_nowait(write)

    async def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                return
            writes = [first]
            while len(writes) < _MAX_BATCH and not self._queue.empty():
                queued = self._queue.get_nowait()
                if queued is None:
                    stopping = True
                    break
                writes.append(queued)
            try:
                await self._commit(writes)
            except Exception as exc:  # a failed commit fails its batch, not the writer
                log.exception("journal commit failed")
                err = exc if isinstance(exc, JournalError) else JournalError(f"journal write failed: {exc}")
                for write in writes:
                    if not write.future.done():
                        write.future.set_exception(err)

    async def _commit(self, writes: list[_Write]) -> None:
        assert self._writer is not None
        batch = _Batch()
        now = time.time()
        staged: dict[str, int] = {}  # seqs this batch will reach, committed to the cache on success
        for write in writes:
            pid = write.persistence_id
            if isinstance(write, _SaveSnapshot):
                batch.snapshots.append((pid, write.seq, write.state, now))
                batch.done.append((write.future, write.seq))
                continue
            current = staged.get(pid)
            if current is None:
                current = await self._cached_last_seq(pid)
            if write.expected_seq != current:
                write.future.set_exception(SequenceConflict(pid, write.expected_seq, current))
                continue
            seq = current
            for event in write.events:
                seq += 1
                batch.events.append((pid, seq, event.type, event.payload, now))
            staged[pid] = seq
            if write.row is not None:
                r = write.row
                batch.rows.append((r.id, r.channel, r.title, r.turns, r.last_activity, r.pending, seq))
            batch.done.append((write.future, seq))
        if not batch.done:
            return
        try:
            # The whole transaction is one job on aiosqlite's thread: one hop, not four.
            # (`_execute` is aiosqlite's own queue-a-function primitive, stable since 0.17.)
            await self._writer._execute(_write_batch, self._writer._conn, batch)  # type: ignore[no-untyped-call]
        except Exception as exc:
            for pid in staged:  # re-read from disk next time; the cache may be ahead
                self._last_seq.pop(pid, None)
            raise JournalError(f"journal commit failed: {exc}") from exc
        self.commits += 1
        self._last_seq.update(staged)
        for future, seq in batch.done:
            if not future.done():
                future.set_result(seq)

    async def _cached_last_seq(self, persistence_id: str) -> int:
        if (seq := self._last_seq.get(persistence_id)) is None:
            assert self._writer is not None
            cursor = await self._writer.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE persistence_id = ?",
                (persistence_id,),
            )
            found = await cursor.fetchone()
            seq = int(found[0]) if found else 0
            self._last_seq[persistence_id] = seq
        return seq

    # -- reads --------------------------------------------------------------------------------

    async def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        if self._reader is None:
            raise JournalError("the journal is closed")
        try:
            cursor = await self._reader.execute(sql, params)
            rows = await cursor.fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"journal read failed: {exc}") from exc
        return list(rows)

    async def replay(self, persistence_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._read(
            "SELECT seq, type, payload, ts FROM events WHERE persistence_id = ? AND seq > ? ORDER BY seq",
            (persistence_id, after_seq),
        )
        return [StoredEvent(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

    async def last_seq(self, persistence_id: str) -> int:
        rows = await self._read(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE persistence_id = ?", (persistence_id,)
        )
        return int(rows[0][0])

    async def load_snapshot(self, persistence_id: str) -> Snapshot | None:
        rows = await self._read(
            "SELECT seq, state, ts FROM snapshots WHERE persistence_id = ?", (persistence_id,)
        )
        return Snapshot(int(rows[0][0]), str(rows[0][1]), float(rows[0][2])) if rows else None

    _ROW = "SELECT id, channel, title, turns, last_activity, pending, last_seq FROM sessions"

    async def list_sessions(self) -> list[SessionRow]:
        rows = await self._read(self._ROW + " ORDER BY last_activity DESC")
        return [_session_row(r) for r in rows]

    async def get_session(self, persistence_id: str) -> SessionRow | None:
        rows = await self._read(self._ROW + " WHERE id = ?", (persistence_id,))
        return _session_row(rows[0]) if rows else None

    async def sessions_with_pending_input(self) -> list[str]:
        rows = await self._read("SELECT id FROM sessions WHERE pending > 0 ORDER BY last_activity")
        return [str(r[0]) for r in rows]

    async def close(self) -> None:
        if self._task is not None:
            # Queued writes land before the writer stops: their callers are waiting on them.
            self._closing = True
            self._queue.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for conn in (self._writer, self._reader):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._writer = self._reader = None


_INSERT_EVENTS = "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)"
_UPSERT_SESSIONS = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq)"
    " VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq"
)
_UPSERT_SNAPSHOTS = (
    "INSERT INTO snapshots (persistence_id, seq, state, ts) VALUES (?,?,?,?)"
    " ON CONFLICT(persistence_id) DO UPDATE SET seq=excluded.seq,"
    " state=excluded.state, ts=excluded.ts WHERE excluded.seq >= snapshots.seq"
)


def _write_batch(conn: sqlite3.Connection, batch: _Batch) -> None:
    """One transaction; runs on the connection's own thread. Anything that fails
    (even a value sqlite cannot bind) rolls back, so no BEGIN is left open."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if batch.events:
            conn.executemany(_INSERT_EVENTS, batch.events)
        if batch.rows:
            conn.executemany(_UPSERT_SESSIONS, batch.rows)
        if batch.snapshots:
            conn.executemany(_UPSERT_SNAPSHOTS, batch.snapshots)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _session_row(r: sqlite3.Row) -> SessionRow:
    return SessionRow(
        id=str(r[0]),
        channel=str(r[1]),
        title=r[2],
        turns=int(r[3]),
        last_activity=float(r[4]),
        pending=int(r[5]),
        last_seq=int(r[6]),
    )
