"""The embedded SQLite journal and snapshot store.

Writes go to the journal's writer thread (:mod:`._writer`: group commit, one fsync for
N concurrent sessions; an actor's append skips the loop) with a plain ``sqlite3``
connection; it relies on no private API of aiosqlite. Reads use an aiosqlite
connection (WAL lets them run beside the writer). The expected-sequence
check runs on the writer thread against an in-memory copy of each session's last
seq — safe because this process is the only writer (the daemon holds a lock on
``data_dir``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from itertools import starmap
from pathlib import Path
from typing import Any

import aiosqlite

from netclaw.errors import JournalError
from netclaw.persistence._journal import (
    SessionPage,
    SessionQuery,
    SessionRow,
    Snapshot,
    StoredEvent,
    UsageKey,
    UsageRow,
    like_pattern,
)
from netclaw.persistence._migrations import apply_migrations, load_migrations
from netclaw.persistence._writer import Batch, Erase, WriterJournal, WriterThread, settle
from netclaw.records import builder

log = logging.getLogger(__name__)

_build_stored = builder(StoredEvent)  # replay's rows, in StoredEvent's field order


def prepare_database(path: Path, *, synchronous: str = "full") -> list[int]:
    """Create the file if needed, switch to WAL, apply migrations. Blocking; start-up only.

    Conversations are private: a new data directory is 0700 and the database 0600 (SQLite
    gives its WAL and shared-memory files the database file's mode)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    new = not path.exists() or path.stat().st_size == 0
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open database {path}: {exc}") from exc
    try:
        if new:
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
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


# A new database's page size. Every commit writes each page it touched whole to the WAL, and
# a turn touches a few pages per session (its rows, its index entries, its session row) for
# about 1 kB of new data: small pages write a quarter of what SQLite's 4 kB default does
# (bench/ab.py). A database made with another size keeps it (changing it means a VACUUM).
PAGE_SIZE = 1024
# Checkpoint when the WAL holds this many bytes (its file stays about this big; reopening
# after a crash reads it in well under a second): the hot pages (index tails, session rows)
# are copied back to the database once per checkpoint however often they changed.
WAL_CHECKPOINT_BYTES = 16 << 20


def _configure(conn: sqlite3.Connection, synchronous: str) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"could not switch the database to WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous={_sync_pragma(synchronous)}")
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA wal_autocheckpoint={max(1000, WAL_CHECKPOINT_BYTES // page_size)}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA foreign_keys=ON")


_USAGE_KEYS: dict[str, str] = {
    "session": "persistence_id",
    "day": "date(ts, 'unixepoch')",
    "model": "COALESCE(json_extract(payload, '$.model'), 'unknown')",
}


class SqliteJournal(WriterJournal):
    """Implements :class:`~netclaw.persistence.Journal` on one SQLite file."""

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "full",
        on_commit: Callable[[float], None] | None = None,
        commit_delay_s: float = 0.0,
    ) -> None:
        super().__init__(on_commit, commit_delay_s)
        self.path = path
        self._synchronous = synchronous
        self._reader: aiosqlite.Connection | None = None

    async def open(self) -> SqliteJournal:
        """Open the reader and start the writer thread. Migrations must have run."""
        writer: _Writer = _Writer(self, self._synchronous)
        try:
            self._reader = await aiosqlite.connect(self.path, isolation_level=None)
            mode = await (await self._reader.execute("PRAGMA journal_mode")).fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                raise JournalError(f"{self.path} is not in WAL mode; run migrations first")
            await self._reader.execute(f"PRAGMA synchronous={_sync_pragma(self._synchronous)}")
            await self._reader.execute("PRAGMA busy_timeout=5000")
            await self._start_writer(writer)
        except JournalError:
            await self._close_after_failed_open(writer)
            raise
        except sqlite3.Error as exc:
            await self._close_after_failed_open(writer)
            raise JournalError(f"cannot open journal {self.path}: {exc}") from exc
        return self

    async def _close_after_failed_open(self, writer: _Writer) -> None:
        await self._stop_writer(writer)
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.close()
            self._reader = None

    async def synchronous_levels(self) -> tuple[int, int]:
        """``PRAGMA synchronous`` of the writer and the reader (2 = FULL, 1 = NORMAL)."""
        if self._reader is None:
            raise JournalError("the journal is closed")
        writer = await self.run_on_writer(lambda conn: int(conn.execute("PRAGMA synchronous").fetchone()[0]))
        reader = await (await self._reader.execute("PRAGMA synchronous")).fetchone()
        return writer, int(reader[0]) if reader else -1

    # -- reads --------------------------------------------------------------------------------

    async def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        if self._reader is None:
            raise JournalError("the journal is closed")
        try:
            # One trip to the reader's thread, not two (execute, then fetchall): a recovery
            # reads twice, and each trip is a thread woken and the loop woken back.
            rows = await self._reader.execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            raise JournalError(f"journal read failed: {exc}") from exc
        return list(rows)

    async def replay(self, persistence_id: str, after_seq: int = 0) -> list[StoredEvent]:
        rows = await self._read(
            "SELECT seq, type, payload, ts FROM events WHERE persistence_id = ? AND seq > ? ORDER BY seq",
            (persistence_id, after_seq),
        )
        # The columns' types hold (INTEGER, TEXT, TEXT, REAL), in StoredEvent's order:
        # recovery reads thousands.
        return list(starmap(_build_stored, rows))

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

    _ROW = f"SELECT {SessionRow.COLUMNS} FROM sessions"

    async def list_sessions(self) -> list[SessionRow]:
        rows = await self._read(self._ROW + " ORDER BY last_activity DESC")
        return [SessionRow.from_row(r) for r in rows]

    async def find_sessions(self, query: SessionQuery) -> SessionPage:
        if query.only is not None and not query.only:
            return SessionPage([], 0, await self._channels())
        where: list[str] = ["1"]
        params: list[Any] = []
        if query.text:
            where.append("(id LIKE ? ESCAPE '\\' OR title LIKE ? ESCAPE '\\')")
            params += [like_pattern(query.text)] * 2
        if query.channel:
            where.append("channel = ?")
            params.append(query.channel)
        # Lists go in as one JSON parameter: no limit on how many ids a filter names.
        if query.only is not None:
            where.append("id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(query.only)))
        if query.excluding:
            where.append("id NOT IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(query.excluding)))
        clause = " WHERE " + " AND ".join(where)
        rows = await self._read(
            self._ROW + clause + " ORDER BY last_activity DESC, id LIMIT ? OFFSET ?",
            (*params, query.limit, query.offset),
        )
        total = await self._read("SELECT COUNT(*) FROM sessions" + clause, tuple(params))
        return SessionPage([SessionRow.from_row(r) for r in rows], int(total[0][0]), await self._channels())

    async def _channels(self) -> list[str]:
        return [str(r[0]) for r in await self._read("SELECT DISTINCT channel FROM sessions ORDER BY channel")]

    async def get_session(self, persistence_id: str) -> SessionRow | None:
        rows = await self._read(self._ROW + " WHERE id = ?", (persistence_id,))
        return SessionRow.from_row(rows[0]) if rows else None

    async def sessions_with_pending_input(self) -> list[str]:
        rows = await self._read("SELECT id FROM sessions WHERE pending > 0 ORDER BY last_activity")
        return [str(r[0]) for r in rows]

    async def sessions_owing_replies(self, channel: str) -> list[str]:
        """Chat sessions of ``channel`` with recorded replies not yet shown (the outbox)."""
        rows = await self._read(
            "SELECT id FROM sessions WHERE channel = ? AND undelivered > 0 ORDER BY last_activity", (channel,)
        )
        return [str(r[0]) for r in rows]

    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]:
        # A turn's totals are in "spent"; turns recorded before it existed have "usage". A
        # compaction's LLM calls are counted too (their rows are no turns).
        key = _USAGE_KEYS[by]
        only = " AND persistence_id IN (SELECT value FROM json_each(?))" if sessions is not None else ""
        params: tuple[Any, ...] = (since if since is not None else 0.0,)
        if sessions is not None:
            params += (json.dumps(list(sessions)),)
        rows = await self._read(
            f"SELECT {key} AS k, SUM(type = 'TurnRecorded'),"
            " SUM(COALESCE(json_extract(payload, '$.spent.input_tokens'),"
            "              json_extract(payload, '$.usage.input_tokens'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.output_tokens'),"
            "              json_extract(payload, '$.usage.output_tokens'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.cache_read_tokens'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.cache_write_tokens'), 0)),"
            " TOTAL(COALESCE(json_extract(payload, '$.cost'), 0)),"
            " SUM(COALESCE(json_extract(payload, '$.spent.speech_ms'), 0))"
            # By time on the index of these events (the planner, not knowing how recent `since`
            # is, would scan the whole journal; the start-up spend seed asks for today only).
            " FROM events INDEXED BY events_spend"
            " WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed', 'ReplySpoken') AND ts >= ?"
            " AND (type = 'TurnRecorded' OR json_extract(payload, '$.spent') IS NOT NULL)"
            f"{only} GROUP BY k ORDER BY k",
            params,
        )
        return [UsageRow.from_row(r) for r in rows]

    async def close(self) -> None:
        await self._stop_writer()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.close()
            self._reader = None


class _Writer(WriterThread[sqlite3.Connection]):
    """The SQLite side of the writer: its connection, and a cache of each session's last
    seq (exact: this process is the only writer, the daemon holds the data_dir lock)."""

    def __init__(self, journal: SqliteJournal, synchronous: str) -> None:
        super().__init__("netclaw-journal-writer", journal, journal.commit_delay_s)
        self.path = journal.path
        self.synchronous = synchronous
        self._last_seq: dict[str, int] = {}

    def connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open {self.path}: {exc}") from exc
        try:
            _configure(conn, self.synchronous)
        except sqlite3.Error as exc:
            conn.close()
            raise JournalError(f"cannot open {self.path}: {exc}") from exc
        except JournalError:
            conn.close()
            raise
        return conn

    def disconnect(self, conn: sqlite3.Connection) -> None:
        conn.close()

    def database_error(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.Error)

    def last_seqs(self, conn: sqlite3.Connection, persistence_ids: Iterable[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for pid in persistence_ids:
            seq = self._last_seq.get(pid)
            if seq is None:
                row = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM events WHERE persistence_id = ?", (pid,)
                ).fetchone()
                seq = self._last_seq[pid] = int(row[0]) if row else 0
            found[pid] = seq
        return found

    def saved_rows(self, conn: sqlite3.Connection, persistence_id: str) -> int:
        row = conn.execute(
            "SELECT COALESCE(MAX(idx) + 1, 0) FROM snapshot_messages WHERE persistence_id = ?",
            (persistence_id,),
        ).fetchone()
        return int(row[0])

    def write_batch(self, conn: sqlite3.Connection, batch: Batch) -> None:
        _write_batch(conn, batch)

    def committed(self, staged: dict[str, int]) -> None:
        self._last_seq.update(staged)  # only once committed: a failed batch leaves it as on disk

    def erase(self, conn: sqlite3.Connection, erase: Erase) -> None:
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
            settle([(erase.future, JournalError(f"erasing {pid} failed: {exc}"))])
            return
        self._last_seq[pid] = 0
        settle([(erase.future, 0)])


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


def _write_batch(conn: sqlite3.Connection, batch: Batch) -> None:
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
