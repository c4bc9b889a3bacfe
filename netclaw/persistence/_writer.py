"""The journal's writer thread, whatever the database: group commit and settling.

A journal puts its writes (appends, snapshot saves, erases) on the writer's queue; the
thread takes everything queued at that moment into ONE transaction (N concurrent
sessions pay for one commit, not N) and settles the batch's futures: an asyncio
future with one ``call_soon_threadsafe`` per loop, a ``concurrent.futures.Future`` (a
session actor waiting) here and now. An erase is ordered after every write queued
before it. The database specifics — connecting, staging a batch with its
expected-sequence checks, committing it, erasing — are the subclass's
(:mod:`._sqlite`, :mod:`.postgres`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from netclaw.errors import JournalError, SequenceConflict
from netclaw.persistence._journal import NewEvent, SessionRow

log = logging.getLogger(__name__)

MAX_BATCH = 512  # writes per transaction; bounds one commit's latency

# An append awaited on a loop, or waited for by a thread (a session actor).
AnyFuture = asyncio.Future[int] | concurrent.futures.Future[int]
Result = tuple[AnyFuture, int | BaseException]

Conn = TypeVar("Conn")


@dataclass(slots=True)
class Append:
    persistence_id: str
    expected_seq: int
    events: Sequence[NewEvent]
    row: SessionRow | None
    future: AnyFuture


@dataclass(slots=True)
class SaveSnapshot:
    persistence_id: str
    seq: int
    state: str
    messages: Sequence[str]
    first: int  # the transcript index of messages[0]
    future: asyncio.Future[int]


@dataclass(slots=True)
class Erase:
    persistence_id: str
    future: asyncio.Future[int]


@dataclass(slots=True)
class Query:
    """Something run on the writer's own connection (diagnostics, maintenance)."""

    run: Callable[[Any], int]
    future: concurrent.futures.Future[int]


Write = Append | SaveSnapshot
Item = Write | Erase | Query


@dataclass(slots=True)
class Batch:
    """One transaction's rows, staged and checked, and the futures it settles."""

    events: list[tuple[str, int, str, str, float]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # sessions, in SessionRow's order
    snapshots: list[tuple[str, int, str, float]] = field(default_factory=list)
    messages: list[tuple[str, int, str]] = field(default_factory=list)  # snapshot transcript rows
    done: list[tuple[AnyFuture, int]] = field(default_factory=list)


class CommitCounters(Protocol):
    """What a journal reports of its commits (health, metrics, benchmarks)."""

    commits: int
    last_failure: str | None
    failed_commits: int
    on_commit: Callable[[float], None] | None


class WriterThread(threading.Thread, Generic[Conn]):
    """Owns the write connection; commits whatever is queued, one transaction at a time.
    Subclasses: :meth:`connect`, :meth:`last_seqs`, :meth:`saved_rows`,
    :meth:`write_batch`, :meth:`erase`, :meth:`disconnect`, :meth:`database_error`."""

    def __init__(self, name: str, counters: CommitCounters) -> None:
        super().__init__(name=name, daemon=True)
        self.counters = counters
        self.inbox: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()

    # -- the database's part ------------------------------------------------------------------

    def connect(self) -> Conn:
        """Open the write connection (JournalError when it cannot be)."""
        raise NotImplementedError

    def last_seqs(self, conn: Conn, persistence_ids: Iterable[str]) -> dict[str, int]:
        """Each session's last seq as the database has it (absent: 0)."""
        raise NotImplementedError

    def saved_rows(self, conn: Conn, persistence_id: str) -> int:
        """How many snapshot transcript rows of the session are saved (they are contiguous)."""
        raise NotImplementedError

    def write_batch(self, conn: Conn, batch: Batch) -> None:
        """One transaction; rolled back whole when anything in it fails."""
        raise NotImplementedError

    def committed(self, staged: dict[str, int]) -> None:
        """The batch landed: these sessions' last seqs now (a cache may keep them)."""

    def erase(self, conn: Conn, erase: Erase) -> None:
        raise NotImplementedError

    def disconnect(self, conn: Conn) -> None:
        raise NotImplementedError

    def database_error(self, exc: Exception) -> bool:
        """Whether ``exc`` is the database's (a failed statement), not a bug of ours."""
        return False

    # -- one group commit ----------------------------------------------------------------------

    def commit(self, conn: Conn, writes: list[Write]) -> None:
        """Check and stage the writes, commit them in one transaction, settle every future."""
        try:
            current = self.last_seqs(conn, {w.persistence_id for w in writes})
        except Exception as exc:
            if not self.database_error(exc):
                raise
            failed = JournalError(f"journal read failed: {exc}")
            settle([(w.future, failed) for w in writes])
            return
        refused: list[Result] = []
        batch = Batch()
        now = time.time()
        staged: dict[str, int] = {}  # seqs this batch will reach
        rows_saved: dict[str, int] = {}  # snapshot transcript rows saved, this batch's included
        for write in writes:
            pid = write.persistence_id
            seq = staged.get(pid, current.get(pid, 0))
            if isinstance(write, SaveSnapshot):
                problem = self._stage_snapshot(conn, write, seq, rows_saved, batch, now)
                if problem is not None:
                    refused.append((write.future, problem))
                continue
            if write.expected_seq != seq:
                refused.append((write.future, SequenceConflict(pid, write.expected_seq, seq)))
                continue
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
        results: list[Result] = list(batch.done)
        if batch.done:
            started = time.perf_counter()
            try:
                self.write_batch(conn, batch)
            except Exception as exc:  # noqa: BLE001 - a failed commit fails its batch, never the writer
                results = [(future, self._failed(exc)) for future, _ in batch.done]
            else:
                self._succeeded(time.perf_counter() - started)
                self.committed(staged)
        settle(refused + results)

    def _stage_snapshot(
        self,
        conn: Conn,
        write: SaveSnapshot,
        last_seq: int,
        rows_saved: dict[str, int],
        batch: Batch,
        now: float,
    ) -> JournalError | None:
        """Add a snapshot (its state and new transcript rows) to the batch, or say why not."""
        pid = write.persistence_id
        if write.seq > last_seq:  # of events that are not there (a session erased meanwhile)
            return JournalError(f"snapshot of {pid} at {write.seq} is ahead of its journal")
        saved = rows_saved.get(pid)
        if saved is None:
            try:
                saved = self.saved_rows(conn, pid)
            except Exception as exc:
                if not self.database_error(exc):
                    raise
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

    def _failed(self, exc: Exception) -> JournalError:
        counters = self.counters
        if counters.last_failure is None:  # the first of a run: say it plainly, once
            log.error(
                "journal commit failed (%s); new input is refused (503) until a commit "
                "succeeds; nothing acknowledged before is affected",
                exc,
                exc_info=not self.database_error(exc),
            )
        counters.failed_commits += 1
        error = JournalError(f"journal commit failed: {exc}")
        counters.last_failure = str(error)
        return error

    def _succeeded(self, seconds: float) -> None:
        counters = self.counters
        counters.commits += 1
        if counters.last_failure is not None:
            log.warning("journal commits again, after %d failed commit(s)", counters.failed_commits)
            counters.failed_commits = 0
        counters.last_failure = None
        if counters.on_commit is not None:
            counters.on_commit(seconds)

    # -- the loop ------------------------------------------------------------------------------

    def put(self, item: Item) -> None:
        self.inbox.put(item)

    def put_stop(self) -> None:
        """Stop once what is queued has landed."""
        self.inbox.put(None)

    def run(self) -> None:
        conn: Conn | None = None
        try:
            try:
                conn = self.connect()
            except JournalError as exc:
                self.ready.set_exception(exc)
                return
            self.ready.set_result(None)
            self._serve(conn)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    self.disconnect(conn)
            self._fail_leftovers()
            self.finished.set_result(None)

    def _serve(self, conn: Conn) -> None:
        stopping = False
        while not stopping:
            first = self.inbox.get()
            if first is None:
                return
            writes: list[Write] = []
            item: Item | None = first
            while True:
                if isinstance(item, Query):
                    self._answer(item, conn)
                elif isinstance(item, Erase):
                    if writes:  # what was queued before the erase lands first
                        self.commit(conn, writes)
                        writes = []
                    self.erase(conn, item)
                elif item is not None:
                    writes.append(item)
                if len(writes) >= MAX_BATCH:
                    break
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
            if writes:
                self.commit(conn, writes)

    def _answer(self, query: Query, conn: Conn) -> None:
        try:
            query.future.set_result(query.run(conn))
        except Exception as exc:  # noqa: BLE001 - whatever it was, the asker hears of it
            if not self.database_error(exc):
                query.future.set_exception(exc)
            else:
                query.future.set_exception(JournalError(f"journal query failed: {exc}"))

    def _fail_leftovers(self) -> None:
        """The writer is gone: nothing queued may wait forever."""
        error = JournalError("the journal is closed")
        leftovers: list[Result] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Query):
                item.future.set_exception(error)
            elif item is not None:
                leftovers.append((item.future, error))
        settle(leftovers)


def settle(results: Sequence[Result]) -> None:
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
