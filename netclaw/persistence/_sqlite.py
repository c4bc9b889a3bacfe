"""The embedded SQLite journal and snapshot store.

Writes go to a writer thread the journal owns, with a plain ``sqlite3`` connection:
``append`` (on the I/O loop) puts its write on a thread-safe queue and awaits a
future; the thread takes everything queued at that moment into ONE transaction
(group commit: N concurrent sessions pay for one fsync, not N) and settles the
batch's futures with one ``call_soon_threadsafe`` per loop. That is one hop each
way per commit, and it relies on no private API of aiosqlite. A session actor's
append (``append_threadsafe``) skips the loop: its write goes on the same queue
and its ``concurrent.futures.Future`` is settled by the writer thread itself. Reads use an
aiosqlite connection (WAL lets them run beside the writer). The expected-sequence
check runs on the writer thread against an in-memory copy of each session's last
seq — safe because this process is the only writer (the daemon holds a lock on
``data_dir``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from netclaw.errors import JournalError, SequenceConflict
from netclaw.persistence._journal import NewEvent, SessionRow, Snapshot, StoredEvent, UsageKey, UsageRow
from netclaw.persistence._migrations import apply_migrations, load_migrations

log = logging.getLogger(__name__)

_MAX_BATCH = 512  # writes per transaction; bounds one commit's latency

# An append awaited on a loop, or waited for by a thread (a session actor).
_Future = asyncio.Future[int] | concurrent.futures.Future[int]


@dataclass(slots=True)
class _Append:
    persistence_id: str
    expected_seq: int
    events: Sequence[NewEvent]
    row: SessionRow | None
    future: _Future


@dataclass(slots=True)
class _SaveSnapshot:
    persistence_id: str
    seq: int
    state: str
    messages: Sequence[str]
    first: int  # the transcript index of messages[0]
    future: asyncio.Future[int]


@dataclass(slots=True)
class _Erase:
    persistence_id: str
    future: asyncio.Future[int]


_Write = _Append | _SaveSnapshot


@dataclass(slots=True)
class _Batch:
    events: list[tuple[str, int, str, str, float]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    snapshots: list[tuple[str, int, str, float]] = field(default_factory=list)
    messages: list[tuple[str, int, str]] = field(default_factory=list)  # snapshot transcript rows
    done: list[tuple[_Future, int]] = field(default_factory=list)


def prepare_database(path: Path, *, synchronous: str = "full") -> list[int]:
    """Create the file if needed, switch to WAL, apply migrations. Blocking; start-up only.

    Conversations are private: a new data directory is 0700 and the database 0600 (SQLite
    gives its WAL and shared-memory files the database file's mode)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open database {path}: {exc}") from exc
    try:
        _configure(conn, synchronous)
        return apply_migrations(conn, load_migrations())
    except sqlite3.DatabaseError as exc:
        # Never recreated or repaired silently: it holds every conversation.
        raise JournalError(
            f"database {path} is not usable: {exc}. It may be damaged: check it with "
            f"sqlite3 {path} 'PRAGMA integrity_check', restore it from a backup, or move it "
            "aside to start with an empty one (its conversations are then gone from netclaw)"
        ) from exc
    finally:
        conn.close()


def _configure(conn: sqlite3.Connection, synchronous: str) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"could not switch the database to WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous={_sync_pragma(synchronous)}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA foreign_keys=ON")


_USAGE_KEYS: dict[str, str] = {
    "session": "persistence_id",
    "day": "date(ts, 'unixepoch')",
    "model": "COALESCE(json_extract(payload, '$.model'), 'unknown')",
}


class SqliteJournal:
    """Implements :class:`~netclaw.persistence.Journal` on one SQLite file."""

    def __init__(
        self, path: Path, *, synchronous: str = "full", on_commit: Callable[[float], None] | None = None
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self.on_commit = on_commit  # seconds one group commit took (metrics); on the writer thread
        self._reader: aiosqlite.Connection | None = None
        self._writer: _Writer | None = None
        self._closing = False
        self.commits = 0  # transactions committed (benchmarks report appends per commit)
        self.last_failure: str | None = None  # the latest commit failed (health), until one succeeds
        self.failed_commits = 0  # in the current run of failures

    async def open(self) -> SqliteJournal:
        """Open the reader and start the writer thread. Migrations must have run."""
        writer = _Writer(self, self._synchronous)
        try:
            self._reader = await aiosqlite.connect(self.path, isolation_level=None)
            mode = await (await self._reader.execute("PRAGMA journal_mode")).fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                raise JournalError(f"{self.path} is not in WAL mode; run migrations first")
            await self._reader.execute(f"PRAGMA synchronous={_sync_pragma(self._synchronous)}")
            await self._reader.execute("PRAGMA busy_timeout=5000")
            writer.start()
            await asyncio.wrap_future(writer.ready)
        except JournalError:
            await self._close_after_failed_open(writer)
            raise
        except sqlite3.Error as exc:
            await self._close_after_failed_open(writer)
            raise JournalError(f"cannot open journal {self.path}: {exc}") from exc
        self._writer = writer
        return self

    async def _close_after_failed_open(self, writer: _Writer) -> None:
        if writer.is_alive():
            writer.inbox.put(None)
            await asyncio.wrap_future(writer.finished)
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.close()
            self._reader = None

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
        self._put(_Append(persistence_id, expected_seq, events, row, future))
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
            self._put(_Append(persistence_id, expected_seq, events, row, future))
        except JournalError as exc:
            future.set_exception(exc)
        return future

    async def save_snapshot(
        self, persistence_id: str, seq: int, state: str, messages: Sequence[str] = (), first: int = 0
    ) -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._put(_SaveSnapshot(persistence_id, seq, state, messages, first, future))
        await future

    async def erase(self, persistence_id: str) -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._writer is None or self._closing or not self._writer.is_alive():
            raise JournalError("the journal is closed")
        self._writer.inbox.put(_Erase(persistence_id, future))
        await future

    def _put(self, write: _Write) -> None:
        if self._writer is None or self._closing or not self._writer.is_alive():
            raise JournalError("the journal is closed")
        self._writer.inbox.put(write)

    async def synchronous_levels(self) -> tuple[int, int]:
        """``PRAGMA synchronous`` of the writer and the reader (2 = FULL, 1 = NORMAL)."""
        if self._writer is None or self._reader is None:
            raise JournalError("the journal is closed")
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._writer.inbox.put(
            _Query(lambda conn: int(conn.execute("PRAGMA synchronous").fetchone()[0]), future)
        )
        reader = await (await self._reader.execute("PRAGMA synchronous")).fetchone()
        return await asyncio.wrap_future(future), int(reader[0]) if reader else -1

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
        heads = await self._read(
            "SELECT seq, state, ts FROM snapshots WHERE persistence_id = ?", (persistence_id,)
        )
        if not heads:
            return None
        # Read after the state: the rows it covers were committed with it or before, and rows
        # are only ever added (a newer snapshot's extra rows are ignored by the state's count).
        rows = await self._read(
            "SELECT message FROM snapshot_messages WHERE persistence_id = ? ORDER BY idx", (persistence_id,)
        )
        head = heads[0]
        return Snapshot(int(head[0]), str(head[1]), float(head[2]), [str(r[0]) for r in rows])

    _ROW = "SELECT id, channel, title, turns, last_activity, pending, last_seq, undelivered FROM sessions"

    async def list_sessions(self) -> list[SessionRow]:
        rows = await self._read(self._ROW + " ORDER BY last_activity DESC")
        return [_session_row(r) for r in rows]

    async def get_session(self, persistence_id: str) -> SessionRow | None:
        rows = await self._read(self._ROW + " WHERE id = ?", (persistence_id,))
        return _session_row(rows[0]) if rows else None

    async def sessions_with_pending_input(self) -> list[str]:
        rows = await self._read("SELECT id FROM sessions WHERE pending > 0 ORDER BY last_activity")
        return [str(r[0]) for r in rows]

    async def sessions_owing_replies(self, channel: str) -> list[str]:
        """Chat sessions of ``channel`` with recorded replies not yet shown (the outbox)."""
        rows = await self._read(
            "SELECT id FROM sessions WHERE channel = ? AND undelivered > 0 ORDER BY last_activity", (channel,)
        )
        return [str(r[0]) for r in rows]

    async def usage(self, by: UsageKey, since: float | None = None) -> list[UsageRow]:
        # A turn's totals are in "spent"; turns recorded before it existed have "usage".
        key = _USAGE_KEYS[by]
        rows = await self._read(
            f"SELECT {key} AS k, COUNT(*),"
            " SUM(COALESCE(json_extract(payload, '$.spent.input_tokens'),"
            "              json_extract(payload, '$.usage.input_tokens'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.output_tokens'),"
            "              json_extract(payload, '$.usage.output_tokens'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.cache_read_tokens'), 0))"
            " FROM events WHERE type = 'TurnRecorded' AND ts >= ? GROUP BY k ORDER BY k",
            (since if since is not None else 0.0,),
        )
        return [UsageRow(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    async def close(self) -> None:
        writer = self._writer
        if writer is not None and not self._closing:
            # Queued writes land before the writer stops: their callers are waiting on them.
            self._closing = True
            writer.inbox.put(None)
            await asyncio.wrap_future(writer.finished)
        self._writer = None
        self._closing = False
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.close()
            self._reader = None


@dataclass(slots=True)
class _Query:
    """A read on the writer's own connection (diagnostics)."""

    run: Callable[[sqlite3.Connection], int]
    future: concurrent.futures.Future[int]


class _Writer(threading.Thread):
    """Owns the write connection; commits whatever is queued, one transaction at a time."""

    def __init__(self, journal: SqliteJournal, synchronous: str) -> None:
        super().__init__(name="netclaw-journal-writer", daemon=True)
        self.journal = journal
        self.synchronous = synchronous
        self.inbox: queue.SimpleQueue[_Write | _Erase | _Query | None] = queue.SimpleQueue()
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._last_seq: dict[str, int] = {}

    def run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            try:
                conn = sqlite3.connect(self.journal.path, isolation_level=None, check_same_thread=False)
                _configure(conn, self.synchronous)
            except (sqlite3.Error, JournalError) as exc:
                self.ready.set_exception(
                    exc
                    if isinstance(exc, JournalError)
                    else JournalError(f"cannot open {self.journal.path}: {exc}")
                )
                return
            self.ready.set_result(None)
            self._serve(conn)
        finally:
            if conn is not None:
                conn.close()
            self._fail_leftovers()
            self.finished.set_result(None)

    def _serve(self, conn: sqlite3.Connection) -> None:
        stopping = False
        while not stopping:
            first = self.inbox.get()
            if first is None:
                return
            writes: list[_Write] = []
            item: _Write | _Erase | _Query | None = first
            while True:
                if isinstance(item, _Query):
                    _answer(item, conn)
                elif isinstance(item, _Erase):
                    if writes:  # what was queued before the erase lands first
                        self._commit(conn, writes)
                        writes = []
                    self._erase(conn, item)
                elif item is not None:
                    writes.append(item)
                if len(writes) >= _MAX_BATCH:
                    break
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
            if writes:
                self._commit(conn, writes)

    def _commit(self, conn: sqlite3.Connection, writes: list[_Write]) -> None:
        """One transaction for the batch; its futures are settled on their loops."""
        conflicts: list[tuple[_Future, int | BaseException]] = []
        batch = _Batch()
        now = time.time()
        staged: dict[str, int] = {}  # seqs this batch will reach, cached only once committed
        rows_saved: dict[str, int] = {}  # snapshot transcript rows saved, this batch's included
        for write in writes:
            pid = write.persistence_id
            current = staged.get(pid)
            if current is None:
                try:
                    current = self._cached_last_seq(conn, pid)
                except sqlite3.Error as exc:
                    conflicts.append((write.future, JournalError(f"journal read failed: {exc}")))
                    continue
            if isinstance(write, _SaveSnapshot):
                refused = _stage_snapshot(conn, write, current, rows_saved, batch, now)
                if refused is not None:
                    conflicts.append((write.future, refused))
                continue
            if write.expected_seq != current:
                conflicts.append((write.future, SequenceConflict(pid, write.expected_seq, current)))
                continue
            seq = current
            for event in write.events:
                seq += 1
                batch.events.append((pid, seq, event.type, event.payload, now))
            staged[pid] = seq
            if write.row is not None:
                r = write.row
                batch.rows.append(
                    (r.id, r.channel, r.title, r.turns, r.last_activity, r.pending, seq, r.undelivered)
                )
            batch.done.append((write.future, seq))
        results: list[tuple[_Future, int | BaseException]] = list(batch.done)
        if batch.done:
            started = time.perf_counter()
            try:
                _write_batch(conn, batch)
            except Exception as exc:  # a failed commit fails its batch, never the writer
                if self.journal.last_failure is None:  # the first of a run: say it plainly, once
                    log.error(
                        "journal commit failed (%s); new input is refused (503) until a commit "
                        "succeeds; nothing acknowledged before is affected",
                        exc,
                        exc_info=not isinstance(exc, sqlite3.Error),
                    )
                self.journal.failed_commits += 1
                error = JournalError(f"journal commit failed: {exc}")
                self.journal.last_failure = str(error)
                results = [(future, error) for future, _ in batch.done]
            else:
                self.journal.commits += 1
                if self.journal.last_failure is not None:
                    log.warning(
                        "journal commits again, after %d failed commit(s)", self.journal.failed_commits
                    )
                    self.journal.failed_commits = 0
                self.journal.last_failure = None
                self._last_seq.update(staged)
                if self.journal.on_commit is not None:
                    self.journal.on_commit(time.perf_counter() - started)
        _settle(conflicts + results)

    def _erase(self, conn: sqlite3.Connection, erase: _Erase) -> None:
        pid = erase.persistence_id
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM events WHERE persistence_id = ?", (pid,))
                conn.execute("DELETE FROM snapshots WHERE persistence_id = ?", (pid,))
                conn.execute("DELETE FROM snapshot_messages WHERE persistence_id = ?", (pid,))
                conn.execute("DELETE FROM sessions WHERE id = ?", (pid,))
                conn.execute("DELETE FROM webhook_deliveries WHERE session_id = ?", (pid,))
                conn.execute("DELETE FROM reminders WHERE session_id = ?", (pid,))
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            _settle([(erase.future, JournalError(f"erasing {pid} failed: {exc}"))])
            return
        self._last_seq[pid] = 0
        _settle([(erase.future, 0)])

    def _cached_last_seq(self, conn: sqlite3.Connection, persistence_id: str) -> int:
        seq = self._last_seq.get(persistence_id)
        if seq is None:
            found = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE persistence_id = ?", (persistence_id,)
            ).fetchone()
            seq = int(found[0]) if found else 0
            self._last_seq[persistence_id] = seq
        return seq

    def _fail_leftovers(self) -> None:
        """The writer is gone: nothing queued may wait forever."""
        error = JournalError("the journal is closed")
        leftovers: list[tuple[_Future, int | BaseException]] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Query):
                item.future.set_exception(error)
            elif item is not None:
                leftovers.append((item.future, error))
        _settle(leftovers)


def _answer(query: _Query, conn: sqlite3.Connection) -> None:
    try:
        query.future.set_result(query.run(conn))
    except sqlite3.Error as exc:
        query.future.set_exception(JournalError(f"journal query failed: {exc}"))


def _settle(results: list[tuple[_Future, int | BaseException]]) -> None:
    """Resolve futures on their own loops: one callback per loop for the whole batch; a
    thread's future here and now."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int | BaseException]]] = {}
    for future, result in results:
        if isinstance(future, concurrent.futures.Future):
            _resolve_now(future, result)
        else:
            by_loop.setdefault(future.get_loop(), []).append((future, result))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: list[tuple[asyncio.Future[int], int | BaseException]]) -> None:
    for future, result in items:
        if future.done():  # the caller gave up (cancelled)
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


def _resolve_now(future: concurrent.futures.Future[int], result: int | BaseException) -> None:
    if not future.set_running_or_notify_cancel():  # the caller gave up (cancelled)
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _sync_pragma(synchronous: str) -> str:
    return "FULL" if synchronous == "full" else "NORMAL"


_INSERT_EVENTS = "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)"
_UPSERT_SESSIONS = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq, undelivered)"
    " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq, undelivered=excluded.undelivered"
)
_UPSERT_SNAPSHOTS = (
    "INSERT INTO snapshots (persistence_id, seq, state, ts) VALUES (?,?,?,?)"
    " ON CONFLICT(persistence_id) DO UPDATE SET seq=excluded.seq,"
    " state=excluded.state, ts=excluded.ts WHERE excluded.seq >= snapshots.seq"
)


_UPSERT_SNAPSHOT_MESSAGES = (
    "INSERT OR REPLACE INTO snapshot_messages (persistence_id, idx, message) VALUES (?,?,?)"
)


def _stage_snapshot(
    conn: sqlite3.Connection,
    write: _SaveSnapshot,
    last_seq: int,
    rows_saved: dict[str, int],
    batch: _Batch,
    now: float,
) -> JournalError | None:
    """Add a snapshot (its state and new transcript rows) to the batch, or say why not."""
    pid = write.persistence_id
    if write.seq > last_seq:  # of events that are not there (a session erased meanwhile)
        return JournalError(f"snapshot of {pid} at {write.seq} is ahead of its journal")
    saved = rows_saved.get(pid)
    if saved is None:
        try:
            saved = _snapshot_rows(conn, pid)
        except sqlite3.Error as exc:
            return JournalError(f"journal read failed: {exc}")
    if write.first > saved:  # an earlier snapshot's rows never landed: the writer sends all again
        return JournalError(
            f"snapshot of {pid} starts at transcript row {write.first}, but only {saved} are saved"
        )
    batch.snapshots.append((pid, write.seq, write.state, now))
    batch.messages.extend((pid, write.first + i, m) for i, m in enumerate(write.messages))
    rows_saved[pid] = max(saved, write.first + len(write.messages))
    batch.done.append((write.future, write.seq))
    return None


def _snapshot_rows(conn: sqlite3.Connection, pid: str) -> int:
    """How many transcript rows of ``pid``'s snapshots are saved (they are contiguous)."""
    row = conn.execute(
        "SELECT COALESCE(MAX(idx) + 1, 0) FROM snapshot_messages WHERE persistence_id = ?", (pid,)
    ).fetchone()
    return int(row[0])


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
        if batch.messages:
            conn.executemany(_UPSERT_SNAPSHOT_MESSAGES, batch.messages)
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
        undelivered=int(r[7]),
    )
