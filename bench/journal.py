"""Journal append throughput with durability on, next to a raw sqlite3 group-commit ceiling.

Both sides write the same thing to a fresh database on the same disk, with WAL and
synchronous=FULL: per append one ``events`` row (payload 200-800 chars of JSON) plus the
``sessions`` row upsert the actors always send beside it.

* journal: ``SqliteJournal.append`` (its own writer thread, group commit) called by N
  asyncio tasks, one append at a time each, awaiting each.
* raw: a plain ``sqlite3`` connection in one thread that takes everything queued and writes
  it with one BEGIN IMMEDIATE / executemany / COMMIT per batch, fed by the same N asyncio
  tasks (each batch's futures are resolved with one ``call_soon_threadsafe``). It is the
  same design minus the journal's machinery, so its batch sizes are comparable.

Also (info lines): the same with N *threads* as callers, each blocking on every append the
way a session actor does (``append_threadsafe(...).result()``: no loop hop), and one writer
appending sequentially (where every append pays a full fsync).

Run from the repo root: ``python bench/journal.py [--sessions 100] [--seconds 3] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _common as c
from _common import add_quick, apply_quick, figure, info, log

from netclaw.persistence import NewEvent, SessionRow, SqliteJournal, prepare_database

INSERT_EVENT = "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)"
UPSERT_SESSION = (
    "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq)"
    " VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET channel=excluded.channel,"
    " title=excluded.title, turns=excluded.turns, last_activity=excluded.last_activity,"
    " pending=excluded.pending, last_seq=excluded.last_seq"
)


def make_payloads(count: int = 256, seed: int = 7) -> list[str]:
    """JSON payloads shaped like InputAdmitted events, 200-800 characters of text."""
    rng = random.Random(seed)
    words = "the of and to in is it you that was for on are with as his they be at one have this".split()
    out = []
    for i in range(count):
        size = rng.randint(200, 800)
        text = ""
        while len(text) < size:
            text += rng.choice(words) + " "
        message = {"id": f"u_{i:020d}", "role": "user", "content": text[:size], "ts": 1.7e9 + i}
        out.append(json.dumps({"message": message}, separators=(",", ":")))
    return out


PAYLOADS = make_payloads()


@dataclass
class Result:
    appends: int
    commits: int
    elapsed: float

    @property
    def rate(self) -> float:
        return self.appends / self.elapsed

    @property
    def per_commit(self) -> float:
        return self.appends / max(1, self.commits)


def fresh_db(directory: Path, name: str) -> Path:
    path = directory / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    prepare_database(path, synchronous="full")
    return path


def row_for(pid: str, n: int) -> SessionRow:
    return SessionRow(id=pid, channel="api", title="bench", turns=n, last_activity=time.time(), pending=0)


# --------------------------------------------------------------------------- the raw ceiling


class RawWriter:
    """One thread, one sqlite3 connection, one transaction per drained queue."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.commits = 0
        self.thread = threading.Thread(target=self._run, name="raw-writer", daemon=True)
        self.thread.start()

    def put(self, item: tuple) -> None:
        self.queue.put(item)

    def _run(self) -> None:
        q, conn = self.queue, self.conn
        stopping = False
        while not stopping:
            first = q.get()
            if first is None:
                break
            items = [first]
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                items.append(item)
            now = time.time()
            events = [(pid, seq, "InputAdmitted", payload, now) for pid, seq, payload, _, _ in items]
            rows = [(pid, "api", "bench", seq, now, 0, seq) for pid, seq, _, _, _ in items]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT_EVENT, events)
            conn.executemany(UPSERT_SESSION, rows)
            conn.execute("COMMIT")
            self.commits += 1
            notify: Callable[[list[tuple]], None] = items[0][3]
            notify(items)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(10)
        self.conn.close()


def _resolve_all(items: list[tuple]) -> None:
    for *_, fut in items:
        if not fut.done():
            fut.set_result(None)


async def raw_async(path: Path, sessions: int, seconds: float) -> Result:
    loop = asyncio.get_running_loop()
    writer = RawWriter(path)

    def notify(items: list[tuple]) -> None:  # from the writer thread: one hop per batch
        loop.call_soon_threadsafe(_resolve_all, items)

    async def append(pid: str, seq: int, payload: str) -> None:
        fut = loop.create_future()
        writer.put((pid, seq, payload, notify, fut))
        await fut

    try:
        for i in range(sessions):  # warm-up: one append per session
            await append(f"s{i}", 1, PAYLOADS[i % len(PAYLOADS)])
        commits0 = writer.commits
        deadline = time.perf_counter() + seconds

        async def one(i: int) -> int:
            pid, seq, n = f"s{i}", 1, 0
            while time.perf_counter() < deadline:
                seq += 1
                await append(pid, seq, PAYLOADS[(i + seq) % len(PAYLOADS)])
                n += 1
            return n

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(sessions)))
        elapsed = time.perf_counter() - t0
        return Result(sum(counts), writer.commits - commits0, elapsed)
    finally:
        writer.close()


def raw_threads(path: Path, sessions: int, seconds: float) -> Result:
    """Raw writer with thread callers, each blocking on an Event (like an actor blocks)."""
    writer = RawWriter(path)

    def notify(items: list[tuple]) -> None:
        for *_, ev in items:
            ev.set()

    def append(pid: str, seq: int, payload: str) -> None:
        ev = threading.Event()
        writer.put((pid, seq, payload, notify, ev))
        ev.wait()

    try:
        for i in range(sessions):
            append(f"s{i}", 1, PAYLOADS[i % len(PAYLOADS)])
        return _run_threads(sessions, seconds, append, lambda: writer.commits)
    finally:
        writer.close()


def _run_threads(
    sessions: int, seconds: float, append: Callable[[str, int, str], None], commits: Callable[[], int]
) -> Result:
    counts = [0] * sessions
    start = threading.Barrier(sessions + 1)
    box: dict[str, float] = {}

    def one(i: int) -> None:
        pid, seq = f"s{i}", 1
        start.wait()
        deadline = box["deadline"]
        while time.perf_counter() < deadline:
            seq += 1
            append(pid, seq, PAYLOADS[(i + seq) % len(PAYLOADS)])
            counts[i] += 1

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    commits0 = commits()
    box["deadline"] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return Result(sum(counts), commits() - commits0, elapsed)


# --------------------------------------------------------------------------- the journal


async def journal_async(path: Path, sessions: int, seconds: float) -> Result:
    journal = await SqliteJournal(path, synchronous="full").open()
    try:
        for i in range(sessions):  # warm-up: also fills the journal's last-seq cache
            await journal.append(
                f"s{i}", 0, [NewEvent("InputAdmitted", PAYLOADS[i % len(PAYLOADS)])], row_for(f"s{i}", 1)
            )
        commits0 = journal.commits
        deadline = time.perf_counter() + seconds

        async def one(i: int) -> int:
            pid, seq, n = f"s{i}", 1, 0
            while time.perf_counter() < deadline:
                payload = PAYLOADS[(i + seq) % len(PAYLOADS)]
                seq = await journal.append(pid, seq, [NewEvent("InputAdmitted", payload)], row_for(pid, seq))
                n += 1
            return n

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(sessions)))
        elapsed = time.perf_counter() - t0
        return Result(sum(counts), journal.commits - commits0, elapsed)
    finally:
        await journal.close()


def journal_threads(path: Path, sessions: int, seconds: float) -> Result:
    """The journal on its own loop thread; N threads call it as actors do (block on each)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="journal-loop", daemon=True)
    thread.start()
    opening = SqliteJournal(path, synchronous="full").open()
    journal = asyncio.run_coroutine_threadsafe(opening, loop).result(30)
    seqs: dict[str, int] = {}

    def append(pid: str, seq: int, payload: str) -> None:
        expected = seqs.get(pid, 0)
        events = [NewEvent("InputAdmitted", payload)]
        seqs[pid] = journal.append_threadsafe(pid, expected, events, row_for(pid, seq)).result(30)

    try:
        for i in range(sessions):
            append(f"s{i}", 1, PAYLOADS[i % len(PAYLOADS)])
        return _run_threads(sessions, seconds, append, lambda: journal.commits)
    finally:
        asyncio.run_coroutine_threadsafe(journal.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100, help="concurrent writers (default 100)")
    parser.add_argument("--seconds", type=float, default=3.0, help="per concurrent measurement")
    parser.add_argument("--single-seconds", type=float, default=1.5, help="per single-writer measurement")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions; the median is reported")
    parser.add_argument("--no-threads", action="store_true", help="skip the thread-caller variants")
    parser.add_argument("--dir", default=None, help="where the temporary databases go (same disk matters)")
    add_quick(parser, sessions=10, seconds=0.5, single_seconds=0.3, rounds=1, no_threads=True)
    args = apply_quick(parser.parse_args())

    runs: dict[str, list[Result]] = {}
    n, secs, single = args.sessions, args.seconds, args.single_seconds
    cases: list[tuple[str, Callable[[Path], Result]]] = [
        ("raw", lambda p: asyncio.run(raw_async(p, n, secs))),
        ("journal", lambda p: asyncio.run(journal_async(p, n, secs))),
        ("raw_single", lambda p: asyncio.run(raw_async(p, 1, single))),
        ("journal_single", lambda p: asyncio.run(journal_async(p, 1, single))),
    ]
    if not args.no_threads:
        cases += [
            ("raw_threads", lambda p: raw_threads(p, n, secs)),
            ("journal_threads", lambda p: journal_threads(p, n, secs)),
        ]
    load_before = c.machine_load()
    with c.temp_dir("netclaw-bench-journal-", args.dir) as tmp:
        for r in range(args.rounds):
            order = cases if r % 2 == 0 else list(reversed(cases))  # alternate to spread drift
            for name, fn in order:
                res = fn(fresh_db(tmp, name))
                runs.setdefault(name, []).append(res)
                log(
                    f"round {r + 1} {name:16s} {res.rate:8.0f} appends/s  {res.per_commit:6.1f} appends/commit"
                )

    def med(name: str) -> Result:
        results = sorted(runs[name], key=lambda x: x.rate)
        return results[len(results) // 2]

    raw, jr = med("raw"), med("journal")
    ratio = jr.rate / raw.rate
    info("raw_appends_per_s", raw.rate, "appends/s", f"{n} asyncio writers, median of {args.rounds}")
    info("raw_appends_per_commit", raw.per_commit, "appends/commit")
    info("journal_appends_per_commit", jr.per_commit, "appends/commit")
    info("journal_vs_raw_ratio", ratio * 100, "%")
    rs, js = med("raw_single"), med("journal_single")
    info("raw_single_writer_appends_per_s", rs.rate, "appends/s", "1 session, sequential")
    info(
        "journal_single_writer_appends_per_s",
        js.rate,
        "appends/s",
        f"1 session, sequential; {js.rate / rs.rate * 100:.0f}% of raw",
    )
    if not args.no_threads:
        rt, jt = med("raw_threads"), med("journal_threads")
        info(
            "raw_threads_appends_per_s",
            rt.rate,
            "appends/s",
            f"{n} blocking threads; {rt.per_commit:.1f} appends/commit",
        )
        info(
            "journal_threads_appends_per_s",
            jt.rate,
            "appends/s",
            f"{n} actor-like threads; {jt.per_commit:.1f} appends/commit; {jt.rate / rt.rate * 100:.0f}% of raw_threads",
        )
    info("machine_load", f"{load_before} at start, {c.machine_load()} at end", note="1-min loadavg / cores")
    figure("journal_appends_per_s", jr.rate, "appends/s", ">= 50% of raw", ratio >= 0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
