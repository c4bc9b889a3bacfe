"""The journal's writer thread, whatever the database: group commit and settling.

A journal puts its writes (appends, snapshot saves, erases) on the writer's queue; the
thread takes everything queued at that moment into ONE transaction (N concurrent
sessions pay for one commit, not N) and settles the batch's futures: an asyncio
future with one ``call_soon_threadsafe`` per loop, a ``concurrent.futures.Future`` (a
session actor waiting) here and now. An erase or a query is ordered after every write
queued before it. While other sessions are mid-turn and appending, a commit may wait a
moment for their appends (:mod:`._commit_delay`). The database specifics — connecting,
staging a batch with its expected-sequence checks, committing it, erasing — are the
subclass's (:mod:`._sqlite`, :mod:`.postgres`).
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
from netclaw.persistence._commit_delay import CommitDelay
from netclaw.persistence._journal import NewEvent, Node, Owner, SessionRow

log = logging.getLogger(__name__)

MAX_BATCH = 512  # writes per transaction; bounds one commit's latency
# After a commit failed because the database was away, the idle writer asks it this often
# whether it is back: health reflects the present even when nothing is written.
PROBE_EVERY_S = 1.0

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

    def __init__(self, name: str, counters: CommitCounters, commit_delay_s: float = 0.0) -> None:
        super().__init__(name=name, daemon=True)
        self.counters = counters
        self._company = CommitDelay(commit_delay_s)  # when a commit waits for more appends
        self.inbox: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._probing = False  # the last commit failed for want of the database: ask it

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

    def unreachable(self, exc: Exception) -> bool:
        """Whether ``exc`` says the database could not be reached (then :meth:`probe` tells
        when it can again)."""
        return False

    def probe(self, conn: Conn) -> None:
        """Reach the database (reconnecting if need be); raises while it cannot be."""
        raise NotImplementedError

    # -- one group commit ----------------------------------------------------------------------

    def transaction(self, conn: Conn) -> contextlib.AbstractContextManager[object]:
        """What a whole group commit runs in: the fence, the sequence checks and the writes.
        (SQLite's is :meth:`write_batch`'s own BEGIN IMMEDIATE: this process is its only writer.)"""
        return contextlib.nullcontext()

    def fence(self, conn: Conn, persistence_ids: Iterable[str]) -> dict[str, JournalError]:
        """The sessions this node may not write (another node owns them), and why."""
        return {}

    def commit(self, conn: Conn, writes: list[Write]) -> None:
        """Check and stage the writes, commit them in one transaction, settle every future."""
        refused: dict[int, JournalError] = {}  # id(write) → why it may not land
        batch = Batch()
        staged: dict[str, int] = {}  # seqs this batch will reach
        started = time.perf_counter()
        try:
            with self.transaction(conn):
                pids = {w.persistence_id for w in writes}
                fenced = self.fence(conn, pids)
                current = self.last_seqs(conn, pids - fenced.keys())
                self._stage(conn, writes, current, fenced, refused, batch, staged)
                if batch.done:
                    self.write_batch(conn, batch)
        except Exception as exc:  # noqa: BLE001 - a failed commit fails its batch, never the writer
            failed = self._failed(exc)
            settle([(w.future, refused.get(id(w), failed)) for w in writes])
            return
        if batch.done:
            self._succeeded(time.perf_counter() - started)
            self.committed(staged)
        results: list[Result] = [(w.future, refused[id(w)]) for w in writes if id(w) in refused]
        results.extend(batch.done)
        settle(results)

    def _stage(
        self,
        conn: Conn,
        writes: list[Write],
        current: dict[str, int],
        fenced: dict[str, JournalError],
        refused: dict[int, JournalError],
        batch: Batch,
        staged: dict[str, int],
    ) -> None:
        now = time.time()
        rows_saved: dict[str, int] = {}  # snapshot transcript rows saved, this batch's included
        for write in writes:
            pid = write.persistence_id
            lost = fenced.get(pid)
            if lost is not None:
                refused[id(write)] = lost
                continue
            seq = staged.get(pid, current.get(pid, 0))
            if isinstance(write, SaveSnapshot):
                problem = self._stage_snapshot(conn, write, seq, rows_saved, batch, now)
                if problem is not None:
                    refused[id(write)] = problem
                continue
            if write.expected_seq != seq:
                refused[id(write)] = SequenceConflict(pid, write.expected_seq, seq)
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
            saved = self.saved_rows(conn, pid)
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
        self._probing = self.unreachable(exc)
        return error

    def _succeeded(self, seconds: float) -> None:
        counters = self.counters
        counters.commits += 1
        self._probing = False
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

    def _probe(self, conn: Conn) -> None:
        """Nothing to write, and the last commit failed for want of the database: is it back?
        Then the node is healthy again without waiting for a write to prove it."""
        try:
            self.probe(conn)
        except Exception:  # noqa: BLE001 - still away: ask again later
            return
        counters = self.counters
        log.warning(
            "the journal's database answers again (after %d failed commit(s))", counters.failed_commits
        )
        counters.failed_commits = 0
        counters.last_failure = None
        self._probing = False

    def _serve(self, conn: Conn) -> None:
        stopping = False
        while not stopping:
            try:
                first = self.inbox.get(timeout=PROBE_EVERY_S) if self._probing else self.inbox.get()
            except queue.Empty:
                self._probe(conn)
                continue
            if first is None:
                return
            writes: list[Write] = []
            item: Item = first
            now = time.monotonic()
            while True:
                self._take(conn, item, writes, now)
                if len(writes) >= MAX_BATCH:
                    break
                try:
                    queued = self.inbox.get_nowait()
                except queue.Empty:
                    break
                if queued is None:
                    stopping = True
                    break
                item = queued
            if writes and not stopping:
                stopping = self._wait_for_company(conn, writes)
            if writes:
                self.commit(conn, writes)

    def _take(self, conn: Conn, item: Item, writes: list[Write], now: float) -> None:
        """One item off the queue: a write joins the batch; a query or an erase runs after
        what was queued before it has landed (a lease released after the session's writes)."""
        if isinstance(item, Query | Erase):
            if writes:
                self.commit(conn, writes)
                writes.clear()
            if isinstance(item, Query):
                self._answer(item, conn)
            else:
                self._company.forget(item.persistence_id)
                self.erase(conn, item)
        else:
            writes.append(item)
            if isinstance(item, Append):
                self._company.arrived(
                    now, item.persistence_id, None if item.row is None else item.row.pending
                )

    def _wait_for_company(self, conn: Conn, writes: list[Write]) -> bool:
        """Hold the commit of ``writes`` a moment while other sessions' appends are likely
        (:mod:`._commit_delay`), taking what comes meanwhile. True if told to stop."""
        company = self._company
        batch = {w.persistence_id for w in writes}
        until = company.until(time.monotonic(), batch)
        if until is None:
            return False
        while writes and len(writes) < MAX_BATCH and company.awaited(batch):
            left = until - time.monotonic()
            if left <= 0:
                break
            try:
                item = self.inbox.get(timeout=left)
            except queue.Empty:
                break
            if item is None:
                return True
            taken = len(writes)
            self._take(conn, item, writes, time.monotonic())
            if len(writes) > taken:
                batch.add(writes[-1].persistence_id)
        return False

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


class WriterJournal:
    """The write side every journal shares: writes go on its writer thread's queue, an
    actor's append without a loop hop, and the commit counters. A subclass opens the
    writer (:meth:`_start_writer`) and adds the database's reads."""

    def __init__(self, on_commit: Callable[[float], None] | None, commit_delay_s: float = 0.0) -> None:
        self.on_commit = on_commit  # seconds one group commit took (metrics); on the writer thread
        self.commit_delay_s = commit_delay_s  # the longest a commit waits for company (._commit_delay)
        self._writer: WriterThread[Any] | None = None
        self._closing = False
        self.commits = 0  # transactions committed (benchmarks report appends per commit)
        self.last_failure: str | None = None  # the latest commit failed (health), until one succeeds
        self.failed_commits = 0  # in the current run of failures
        # Told (on the loop) when another node took over a session this one held.
        self.on_lease_lost: Callable[[str], None] | None = None

    async def _start_writer(self, writer: WriterThread[Any]) -> None:
        """Start ``writer`` and wait until it is connected (JournalError if it cannot be)."""
        writer.start()
        await asyncio.wrap_future(writer.ready)
        self._writer = writer

    async def _stop_writer(self, writer: WriterThread[Any] | None = None) -> None:
        """Stop the writer once what is queued has landed (their callers wait on them)."""
        writer = writer or self._writer
        if writer is not None and writer.is_alive() and not self._closing:
            self._closing = True
            writer.put_stop()
            await asyncio.wrap_future(writer.finished)
        self._writer = None
        self._closing = False

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

    def _put(self, item: Item) -> None:
        if self._writer is None or self._closing or not self._writer.is_alive():
            raise JournalError("the journal is closed")
        self._writer.put(item)

    async def run_on_writer(self, run: Callable[[Any], int]) -> int:
        """Run ``run`` on the writer's connection, in order with the writes (maintenance)."""
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._put(Query(run, future))
        return await asyncio.wrap_future(future)

    # -- ownership: one process writes an embedded journal, so there is nothing to lease ----

    async def claim(self, persistence_id: str) -> int:
        return 0

    def release(self, persistence_id: str, epoch: int) -> None:
        return None

    async def owner(self, persistence_id: str) -> Owner | None:
        return None

    async def nodes(self) -> list[Node]:
        return []

    async def orphans(self, mine: str | None = None) -> list[str]:
        """Sessions with unanswered input that no node holds (left by a node that died);
        the embedded journal's are recovered at start-up instead."""
        return []
