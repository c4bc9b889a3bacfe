"""A clock for the scheduler that moves only when a test says so (no sleeping tests).

``advance`` is called from the test's thread; the scheduler waits on the I/O loop, so the
wake-up crosses with ``call_soon_threadsafe``. :meth:`FakeClock.settled` says when the
scheduler has looked at the time the test set last and gone back to sleep: whatever was due
then has been handed on, and what was not due has not (a test waits for that, not a while).
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
        self._parked_at: float | None = None  # the time the scheduler went to sleep at; None: awake
        self.waits = 0  # how many times the scheduler went to sleep (no busy polling)

    def now(self) -> float:
        with self._lock:
            return self._now

    def settled(self) -> bool:
        """The scheduler is asleep, having seen the current time (nothing due is left)."""
        with self._lock:
            return self._parked_at == self._now

    async def wait(self, until: float | None, wake: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self.waits += 1
        try:
            while not wake.is_set():
                with self._lock:  # with advance(): a move lands either before this look or on this tick
                    if until is not None and self._now >= until:
                        return
                    tick = self._tick = asyncio.Event()
                    self._parked_at = self._now
                waiting = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(tick.wait())]
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in waiting:
                        task.cancel()
        finally:
            with self._lock:
                self._parked_at = None

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            loop, tick = self._loop, self._tick
        if loop is not None and tick is not None and not loop.is_closed():
            loop.call_soon_threadsafe(tick.set)
