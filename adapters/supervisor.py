"""Keeping a channel up: an adapter that fails to start, or whose connection is lost for
good, is started again with capped exponential backoff (:class:`~netclaw.retry.Backoff`),
forever (a DNS blip at boot or a platform outage must not silence the bot until someone
restarts the daemon).

The supervisor also owns the one log line per connect and disconnect: it watches the
adapter's status and logs each change of state. It runs on the I/O loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from adapters.base import Adapter, AdapterStatus
from netclaw.process.runtime import cancel_and_wait
from netclaw.retry import Backoff

log = logging.getLogger("adapters")

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0
JITTER = 0.2  # several daemons (or adapters) do not retry in lockstep
WATCH_EVERY_S = 2.0
# States the adapter itself recovers from (a reconnect in progress) versus ones that need
# the supervisor to start it afresh.
_DEAD = frozenset({"failed", "stopped"})


class AdapterSupervisor:
    def __init__(
        self,
        adapter: Adapter,
        *,
        first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S,
        watch_every_s: float = WATCH_EVERY_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.adapter = adapter
        self.backoff = Backoff(first_s=first_retry_s, max_s=max_retry_s, jitter=JITTER)
        self.watch_every_s = watch_every_s
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._error = ""
        self._next_attempt: float | None = None  # monotonic time of the next start, when retrying
        self._attempts = 0
        self._last_state: str | None = None

    @property
    def name(self) -> str:
        return self.adapter.name

    async def start(self) -> bool:
        """The first attempt, awaited (so a healthy channel is up before READY); then the
        supervision goes on in the background. True when the first attempt worked."""
        up = await self._attempt()
        if not up:  # retrying from now on, also in /healthz before the task first runs
            self._next_attempt = time.monotonic() + self.backoff.first_s
        self._task = asyncio.create_task(self._supervise(), name=f"supervise-{self.name}")
        return up

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._next_attempt = None
        self._running = False
        # Also when a start was cut short by the cancel: whatever it opened is closed.
        await self.adapter.stop()

    def status(self) -> AdapterStatus:
        if self._next_attempt is not None:
            wait = max(0.0, self._next_attempt - time.monotonic())
            return AdapterStatus("retrying", f"{self._error}; attempt {self._attempts + 1} in {wait:.0f}s")
        return self.adapter.status()

    async def _attempt(self) -> bool:
        self._attempts += 1
        try:
            await self.adapter.start()
        except Exception as exc:  # noqa: BLE001 - any failure to start is retried
            self._error = str(exc) or type(exc).__name__
            with contextlib.suppress(Exception):
                await self.adapter.stop()
            return False
        self._running = True
        self._attempts = 0
        return True

    async def _supervise(self) -> None:
        failures = 0  # failed restarts in a row (after the first failure it waits first_s)
        while True:
            if not self._running:
                wait = self.backoff.delay(failures)
                self._next_attempt = time.monotonic() + wait
                log.warning("adapter %s: %s; starting it again in %.0fs", self.name, self._error, wait)
                self._last_state = "retrying"
                await self._sleep(wait)
                self._next_attempt = None
                up = await self._attempt()
                failures = 0 if up else failures + 1
                continue
            self._note_state()
            await self._sleep(self.watch_every_s)
            if self.adapter.status().state in _DEAD:
                # Lost for good (the platform library gave up): start it afresh.
                self._error = self.adapter.status().detail or "the connection ended"
                self._running = False
                with contextlib.suppress(Exception):
                    await self.adapter.stop()

    def _note_state(self) -> None:
        """One log line per change of a running adapter's state: connected, reconnecting."""
        status = self.adapter.status()
        if status.state == self._last_state:
            return
        self._last_state = status.state
        detail = f" ({status.detail})" if status.detail else ""
        if status.state == "running":
            log.info("adapter %s: connected%s", self.name, detail)
        else:
            log.warning("adapter %s: %s%s", self.name, status.state, detail)
