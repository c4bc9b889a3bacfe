"""HeapTrimmer: memory goes back to the system once after a wave of stopped sessions."""

from __future__ import annotations

import asyncio

import pytest

from netclaw import heap


async def _stops(trimmer: heap.HeapTrimmer, count: int) -> None:
    for i in range(count):
        trimmer.session_stopped(f"s{i}")


def test_a_wave_of_stops_trims_once_after_it_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "TRIM_QUIET_S", 0.05)
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    async def scenario() -> heap.HeapTrimmer:
        trimmer = heap.HeapTrimmer(asyncio.get_running_loop(), trim)
        await _stops(trimmer, heap.TRIM_AFTER_STOPS - 1)
        await asyncio.sleep(0.15)
        assert calls == [], "trimmed before enough sessions had stopped"
        await _stops(trimmer, 1)
        await asyncio.sleep(0.02)
        await _stops(trimmer, 10)  # still the same wave: the quiet period starts again
        await asyncio.sleep(0.02)
        assert calls == []
        await asyncio.sleep(0.15)
        return trimmer

    trimmer = asyncio.run(scenario())
    assert calls == [0] and trimmer.trims == 1


def test_the_real_malloc_trim_runs_where_there_is_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    if heap.malloc_trim_function() is None:
        pytest.skip("no glibc malloc_trim on this system")
    monkeypatch.setattr(heap, "TRIM_QUIET_S", 0.01)

    async def scenario() -> int:
        trimmer = heap.HeapTrimmer(asyncio.get_running_loop())
        await _stops(trimmer, heap.TRIM_AFTER_STOPS)
        await asyncio.sleep(0.05)
        assert trimmer.running is not None
        return await trimmer.running

    assert asyncio.run(scenario()) in (0, 1)
