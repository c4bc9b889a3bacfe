"""An adapter that fails to start, or loses its connection for good, is started again
with capped backoff, for as long as it takes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web

from adapters.base import AdapterStatus
from adapters.supervisor import AdapterSupervisor
from netclaw.errors import AdapterError


class Flaky:
    """Fails its first ``failures`` starts; ``lose()`` ends its connection for good."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.starts = 0
        self.stops = 0
        self._status = AdapterStatus("stopped")

    def check(self) -> None:
        pass

    def routes(self) -> list[web.RouteDef]:
        return []

    async def probe(self) -> str:
        return ""

    async def start(self) -> None:
        self.starts += 1
        if self.starts <= self.failures:
            self._status = AdapterStatus("failed", f"cannot resolve slack.com (attempt {self.starts})")
            raise AdapterError(self._status.detail)
        self._status = AdapterStatus("running")

    async def stop(self) -> None:
        self.stops += 1
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    def lose(self) -> None:
        self._status = AdapterStatus("failed", "the gateway gave up")


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll the adapter's state: nothing signals a change of it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_a_failed_start_is_retried_until_it_works(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="adapters")
    adapter = Flaky(failures=3)
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0.001)

    supervisor = AdapterSupervisor(
        adapter, first_retry_s=1.0, max_retry_s=3.0, watch_every_s=0.01, sleep=sleep
    )
    assert await supervisor.start() is False
    status = supervisor.status()
    assert status.state == "retrying" and "cannot resolve slack.com (attempt 1)" in status.detail
    await until(lambda: supervisor.status().state == "running")
    assert adapter.starts == 4
    backoff = delays[:3]
    # 1, 2, then capped at 3 (each ±20% jitter).
    assert 0.8 <= backoff[0] <= 1.2 and 1.6 <= backoff[1] <= 2.4 and 2.4 <= backoff[2] <= 3.6
    assert caplog.text.count("starting it again") == 3 and "adapter flaky: connected" in caplog.text
    await supervisor.stop()
    assert adapter.status().state == "stopped"


async def test_a_connection_lost_for_good_is_started_afresh() -> None:
    adapter = Flaky(failures=0)
    supervisor = AdapterSupervisor(adapter, first_retry_s=0.01, watch_every_s=0.01)
    assert await supervisor.start() is True
    adapter.lose()
    await until(lambda: adapter.starts == 2 and supervisor.status().state == "running")
    assert adapter.stops >= 1  # the dead connection was closed before the new start
    await supervisor.stop()


async def test_stop_while_retrying_ends_the_retries() -> None:
    adapter = Flaky(failures=1000)
    supervisor = AdapterSupervisor(adapter, first_retry_s=0.01, max_retry_s=0.02)
    await supervisor.start()
    await until(lambda: adapter.starts >= 3)
    await supervisor.stop()
    starts = adapter.starts
    await asyncio.sleep(0.1)  # absence is the behaviour here: five retry periods pass without a start
    assert adapter.starts == starts
