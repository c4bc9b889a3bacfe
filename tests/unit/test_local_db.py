"""A channel's own SQLite file (adapters.chat.LocalDb): every statement on one thread of
its own, so a close never runs beside a query. Two threads on one connection (a query
whose waiter was cancelled still running while ``close`` runs elsewhere) killed a test
worker with a segmentation fault: the Telegram channel stopped mid-post."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from adapters.chat import LocalDb, PostedMessages

SLOW = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 3000000) SELECT count(*) FROM c"
)


def _setup(db: sqlite3.Connection) -> int:
    db.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    return 7


async def test_a_close_waits_for_a_query_whose_waiter_was_cancelled(tmp_path: Path) -> None:
    store = LocalDb(tmp_path / "x.db", "test store")
    assert await store.open(_setup) == 7
    started, finished = threading.Event(), threading.Event()

    def slow(db: sqlite3.Connection) -> None:
        started.set()
        time.sleep(0.3)  # the query's own time, on the file's thread
        db.execute("INSERT INTO t VALUES (1)")
        finished.set()

    waiter = asyncio.ensure_future(store.run(slow))
    assert await asyncio.to_thread(started.wait, 10)
    waiter.cancel()
    await store.close()
    assert finished.is_set(), "closed while the cancelled query still ran"
    with sqlite3.connect(tmp_path / "x.db") as db:
        assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)
    with pytest.raises(RuntimeError, match="the test store is not open"):
        await store.run(lambda db: None)


def test_a_close_behind_a_long_statement_does_not_crash_the_process(tmp_path: Path) -> None:
    """The crash itself, in a child process: SQLite's own long statement, its waiter
    cancelled, then the close (as a channel's stop does)."""
    script = textwrap.dedent(
        f"""
        import asyncio
        from pathlib import Path
        from adapters.chat import LocalDb

        async def main() -> None:
            store = LocalDb(Path({str(tmp_path / "y.db")!r}), "slow store")
            await store.open(lambda db: None)
            waiter = asyncio.ensure_future(store.run(lambda db: db.execute({SLOW!r}).fetchone()))
            await asyncio.sleep(0.05)
            waiter.cancel()
            await store.close()
            print("survived")

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "survived", (done.returncode, done.stderr)


async def test_posted_messages_close_while_posts_are_cancelled(tmp_path: Path) -> None:
    posted = PostedMessages(tmp_path / "posted.db")
    await posted.open()
    waiters = [asyncio.ensure_future(posted.remember(f"k{i}", "chat", str(i))) for i in range(50)]
    await asyncio.sleep(0)
    for waiter in waiters[25:]:
        waiter.cancel()
    await posted.close()
    await posted.open()
    assert await posted.find("k0", "chat") == "0"
    await posted.close()
