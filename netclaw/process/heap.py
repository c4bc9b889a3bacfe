"""The process heap: settle it after start-up, give memory back after a wave of sessions.

CPython frees a stopped session's objects, but glibc keeps the freed pages in its arenas
(one per thread that allocated, up to 8 per core) until asked to return them, so a
daemon that had 1,000 sessions resident an hour ago would still look that big.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_AFTER_STOPS = 100  # sessions stopped since the last trim before one is worth it
TRIM_QUIET_S = 2.0  # ... and no session stopped for this long (the wave is over)
# Allocations (net of frees) of tracked objects between young-generation collections.
# CPython's 700 suits programs that make reference cycles; a turn makes none (bench: not
# one unreachable object in 1,785 turns at 100 sessions), so each collection only walked
# survivors to free nothing, every few turns (bench/turns.py, bench/ab.py).
# tests/integration/test_garbage.py holds turns to making no cycles. A session that stops
# does leave cycles, in the older generations by then: those are looked at on every young
# collection (thresholds 1 and 1; CPython's own rule still runs a full one only when the
# long-lived objects grew by a quarter), about as often in allocations as CPython's default
# does, so 10,000 sessions passivating leave the heap as they did (bench/scale.py: 234 and
# 212 MB against 230 and 208; with 10 and 10, 338 and 279).
YOUNG_COLLECTION_EVERY = 10_000


def settle_heap() -> None:
    """After start-up, in the serving process only: collect once, then move what start-up
    made (modules, settings, clients, the tokenizer's tables) out of the collector's sight
    (``gc.freeze``). A long-lived daemon's full collections then walk only what turns make,
    which is where the rare 20-36 ms pauses behind the p99 came from. From then on the
    young generation is collected every :data:`YOUNG_COLLECTION_EVERY` allocations, and the
    older ones looked at with it."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, 1, 1)


def malloc_trim_function() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim  # glibc only
    except (OSError, AttributeError, TypeError):
        return None
    return trim


class HeapTrimmer:
    """Counts stopped sessions (on the loop); once a wave of them is over, returns the
    freed memory to the system (``malloc_trim``) on a worker thread. Without glibc
    (musl, macOS) it does nothing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, trim: Callable[[int], int] | None = None) -> None:
        self._loop = loop
        self._trim = trim or malloc_trim_function()
        self._stops = 0
        self._timer: asyncio.TimerHandle | None = None
        self.running: asyncio.Future[int] | None = None  # the last trim
        self.trims = 0

    def session_stopped(self, session_id: str) -> None:
        if self._trim is None:
            return
        self._stops += 1
        if self._stops < TRIM_AFTER_STOPS:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(TRIM_QUIET_S, self._start)

    def _start(self) -> None:
        self._timer = None
        if self._trim is None or (self.running is not None and not self.running.done()):
            return
        self._stops = 0
        self.trims += 1
        self.running = self._loop.run_in_executor(None, self._trim, 0)
        log.debug("returning freed memory to the system")

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
