"""A clock for the scheduler that moves only when a test says so (no sleeping tests).

``advance`` is called from the test's thread; the scheduler waits on the I/O loop, so the
wake-up crosses with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading


class FakeClock:
    def __init__(self, now: float) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick: asyncio.Event | None = None
        self.waits = 0  # how many times the scheduler went to sleep (no busy polling)

    def now(self) -> float:
        with self._lock:
            return self._now

    async def wait(self, until: float | None, wake: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self.waits += 1
        while not wake.is_set() and (until is None or self.now() < until):
            tick = self._tick = asyncio.Event()
            waiting = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(tick.wait())]
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waiting:
                    task.cancel()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
        loop, tick = self._loop, self._tick
        if loop is not None and tick is not None and not loop.is_closed():
            loop.call_soon_threadsafe(tick.set)
