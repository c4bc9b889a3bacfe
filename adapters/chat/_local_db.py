"""A channel's own small SQLite file, used from the event loop: one mechanism for the
stores that keep what a platform cannot tell later (posted messages, Teams' conversation
references, email's threads).

Every statement runs on one thread of the file's own, in the order it was asked for. A
connection used from two threads at once (a query whose waiter was cancelled still
running on one worker while ``close`` runs on another) is a use-after-free in SQLite's
C code: the process dies of a segmentation fault. On one thread, a close queued behind
such a query runs after it, and nothing else ever touches the connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class LocalDb:
    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self._name = name  # in messages and the thread's name
        self._db: sqlite3.Connection | None = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    async def open(self, setup: Callable[[sqlite3.Connection], T]) -> T:
        """Open the file (WAL, autocommit) and run ``setup`` on it (schema, clean-up, what
        to load); its result."""
        if self._thread is not None:
            raise RuntimeError(f"the {self._name} is open already")
        thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=self._name.replace(" ", "-"))
        self._thread = thread

        def connect() -> T:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None)  # made and used on this thread only
            db.execute("PRAGMA journal_mode=WAL")
            self._db = db
            return setup(db)

        try:
            return await asyncio.wrap_future(thread.submit(connect))
        except BaseException:
            await self.close()
            raise

    @property
    def is_open(self) -> bool:
        return self._thread is not None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` on the file's thread, after everything asked before it."""
        thread = self._thread
        if thread is None:
            raise RuntimeError(f"the {self._name} is not open")
        return await asyncio.wrap_future(thread.submit(lambda: work(self._connection())))

    async def close(self) -> None:
        """Close after whatever is queued or running (a cancelled waiter's query included)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return

        def close() -> None:
            db, self._db = self._db, None
            if db is not None:
                db.close()

        try:
            await asyncio.wrap_future(thread.submit(close))
        finally:
            thread.shutdown(wait=False)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"the {self._name} is closed")
        return self._db
