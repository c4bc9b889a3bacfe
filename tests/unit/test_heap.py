"""HeapTrimmer: memory goes back to the system once after a wave of stopped sessions."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
from collections.abc import Callable
from typing import Any

import pytest

from netclaw.process import heap


class _Timer:
    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due, self.callback, self.cancelled = due, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    """The two things the trimmer asks of its loop, on a clock the test moves (no sleeping):
    timers, and work handed to a thread (done at once here)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[_Timer] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self.now + delay, callback)
        self._timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self._timers if not t.cancelled and t.due <= self.now]
        self._timers = [t for t in self._timers if t not in due and not t.cancelled]
        for timer in sorted(due, key=lambda t: t.due):
            timer.callback()

    def run_in_executor(
        self, executor: Any, fn: Callable[..., int], *args: Any
    ) -> concurrent.futures.Future[int]:
        done: concurrent.futures.Future[int] = concurrent.futures.Future()
        done.set_result(fn(*args))
        return done


def _stops(trimmer: heap.HeapTrimmer, count: int) -> None:
    for i in range(count):
        trimmer.session_stopped(f"s{i}")


def test_a_wave_of_stops_trims_once_after_it_is_quiet() -> None:
    quiet = heap.TRIM_QUIET_S
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    loop = ManualLoop()
    trimmer = heap.HeapTrimmer(loop, trim)  # type: ignore[arg-type]
    _stops(trimmer, heap.TRIM_AFTER_STOPS - 1)
    loop.advance(3 * quiet)
    assert calls == [], "trimmed before enough sessions had stopped"
    _stops(trimmer, 1)
    loop.advance(quiet * 0.9)
    _stops(trimmer, 10)  # still the same wave: the quiet period starts again
    loop.advance(quiet * 0.9)
    assert calls == []
    loop.advance(quiet * 0.2)  # quiet for the whole period since the last stop
    assert calls == [0] and trimmer.trims == 1
    loop.advance(3 * quiet)
    assert calls == [0]  # once per wave


def test_the_real_malloc_trim_runs_where_there_is_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    if heap.malloc_trim_function() is None:
        pytest.skip("no glibc malloc_trim on this system")
    monkeypatch.setattr(heap, "TRIM_QUIET_S", 0.01)

    async def scenario() -> int:
        trimmer = heap.HeapTrimmer(asyncio.get_running_loop())
        _stops(trimmer, heap.TRIM_AFTER_STOPS)
        # Until the quiet period's timer started the trim (the trimmer offers no event for it).
        while trimmer.running is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return await trimmer.running

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) in (0, 1)


def test_settling_the_heap_freezes_start_up_and_collects_young_objects_rarely() -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        heap.settle_heap()
        assert gc.get_threshold() == (heap.YOUNG_COLLECTION_EVERY, 1, 1)
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
