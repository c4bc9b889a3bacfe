"""A channel only one node of a cluster may run at a time — Discord allows one gateway
connection per bot, and every connection would get every message. It runs on the node
that holds its lease (the same lease rows as sessions, named ``role:<adapter>``); the
other nodes stand by and try to claim it every few seconds. When the holding node stops
it releases the lease; when it dies the lease expires and another node starts the
channel. A node that finds its lease taken over (it paused past the expiry) stops its
connection, so two never run for long.
"""

from __future__ import annotations

import asyncio
import logging

from adapters.base import AdapterStatus
from adapters.supervisor import AdapterSupervisor
from netclaw.errors import NetclawError, SessionOwnedElsewhere
from netclaw.persistence import Journal
from netclaw.process.runtime import cancel_and_wait

log = logging.getLogger("adapters")


def lease_name(adapter: str) -> str:
    return f"role:{adapter}"


class LeasedSupervisor:
    """Runs ``supervisor`` while this node holds the adapter's lease (same face as
    :class:`AdapterSupervisor`: start, stop, status)."""

    def __init__(self, supervisor: AdapterSupervisor, journal: Journal, retry_s: float) -> None:
        self.supervisor = supervisor
        self._journal = journal
        self._retry_s = retry_s
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._epoch: int | None = None  # held, at this epoch
        self._holder: str | None = None  # the node that holds it, when another does
        self._error = ""

    @property
    def name(self) -> str:
        return self.supervisor.name

    @property
    def held(self) -> bool:
        return self._epoch is not None

    async def start(self) -> bool:
        """Claim now (so the holding node's channel is up before READY); go on in the
        background either way. True: this node runs it, or stands by as it should."""
        claimed = await self._claim()
        if claimed:
            await self.supervisor.start()
        self._task = asyncio.create_task(self._hold(claimed), name=f"lease-{self.name}")
        return True

    def lost(self) -> None:
        """The lease renewal found the lease taken over (on the loop)."""
        self._lost.set()

    async def _claim(self) -> bool:
        try:
            self._epoch = await self._journal.claim(lease_name(self.name))
        except SessionOwnedElsewhere as exc:
            self._holder, self._error = exc.node_id, ""
            return False
        except NetclawError as exc:
            self._holder, self._error = None, str(exc)
            log.warning("adapter %s: cannot claim its lease: %s", self.name, exc)
            return False
        self._holder = None
        self._lost.clear()
        log.info("adapter %s: this node holds its connection", self.name)
        return True

    async def _hold(self, claimed: bool) -> None:
        while True:
            if claimed:
                await self._lost.wait()
                self._epoch = None
                log.warning("adapter %s: another node took its lease over; stopping it here", self.name)
                await self.supervisor.stop()
            await asyncio.sleep(self._retry_s)
            claimed = await self._claim()
            if claimed:
                await self.supervisor.start()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._epoch is not None:
            await self.supervisor.stop()
            self._journal.release(lease_name(self.name), self._epoch)  # the next node need not wait
            self._epoch = None

    def status(self) -> AdapterStatus:
        if self._epoch is not None:
            return self.supervisor.status()
        if self._holder is not None:
            return AdapterStatus("standby", f"node {self._holder} holds the connection")
        return AdapterStatus("standby", self._error or "waiting for its lease")
