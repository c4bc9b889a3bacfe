"""The channels a daemon runs, kept up: :class:`Channels`.

Each enabled adapter is checked first (a misconfigured one is disabled and reported; the
others run), then started under an :class:`~adapters.supervisor.AdapterSupervisor` that
keeps it up — a channel only one node of a cluster may run (its declaration's
``one_node``: Discord's one gateway connection) under its lease
(:class:`~adapters.leased.LeasedSupervisor`) — and stopped in reverse order. What each is
doing (:meth:`Channels.statuses`) is what ``/healthz``, ``/metrics`` and systemd's
``STATUS=`` show.

The daemon holds one; it runs on the I/O loop (the check runs at start-up, before the
loop serves anything).
"""

from __future__ import annotations

import logging

from aiohttp import web

from adapters.base import Adapter, AdapterStatus
from adapters.leased import LeasedSupervisor
from adapters.registry import channel_named
from adapters.supervisor import AdapterSupervisor
from netclaw.persistence import Journal

log = logging.getLogger("adapters")


def one_node(name: str) -> bool:
    """Does only one node of a cluster run channel ``name`` at a time (Discord: one
    gateway connection per bot)? Its sessions then stay on that node."""
    channel = channel_named(name)
    return channel is not None and channel.one_node


class Channels:
    def __init__(self) -> None:
        self.adapters: list[Adapter] = []  # checked and started (or starting)
        self._disabled: dict[str, AdapterStatus] = {}  # failed their check (misconfigured)
        # Keep the started ones up; a one-node channel runs where this node holds its lease.
        self._supervisors: dict[str, AdapterSupervisor | LeasedSupervisor] = {}

    def check(self, candidates: list[Adapter]) -> None:
        """Keep the candidates whose ``check`` passes; the others are disabled, with why."""
        for adapter in candidates:
            try:
                adapter.check()
            except Exception as exc:  # noqa: BLE001 - one misconfigured channel must not stop the daemon
                log.error("adapter %s disabled: %s", adapter.name, exc)
                self._disabled[adapter.name] = AdapterStatus("disabled", str(exc))
                continue
            self.adapters.append(adapter)

    def routes(self) -> list[web.RouteDef]:
        """The HTTP routes the channels serve (webhooks)."""
        return [route for adapter in self.adapters for route in adapter.routes()]

    def running(self, name: str) -> bool:
        """Is the channel ``name`` among those that passed their check?"""
        return any(a.name == name for a in self.adapters)

    async def start(self, leases: Journal | None = None, *, retry_s: float = 0.0) -> None:
        """Start each channel under its supervisor. With ``leases`` (several nodes share the
        journal), a one-node channel runs only while this node holds its lease, claimed
        again every ``retry_s`` when another node holds it."""
        for adapter in self.adapters:
            supervisor: AdapterSupervisor | LeasedSupervisor = AdapterSupervisor(adapter)
            if leases is not None and one_node(adapter.name):
                supervisor = LeasedSupervisor(AdapterSupervisor(adapter), leases, retry_s)
            self._supervisors[adapter.name] = supervisor
            if not await supervisor.start():
                log.error("adapter %s failed to start: %s", adapter.name, supervisor.status().detail)

    async def stop(self) -> None:
        """Stop every channel, the last started first."""
        for adapter in reversed(self.adapters):
            supervisor = self._supervisors.pop(adapter.name, None)
            try:
                await (supervisor.stop() if supervisor is not None else adapter.stop())
            except Exception:
                log.exception("adapter %s did not stop cleanly", adapter.name)
        self.adapters = []

    def lease_lost(self, name: str) -> bool:
        """Another node took the lease ``name`` over: True when it was a channel's (which
        then stops its connection), False when it is none of theirs."""
        supervisor = self._supervisors.get(name.removeprefix("role:"))
        if name.startswith("role:") and isinstance(supervisor, LeasedSupervisor):
            supervisor.lost()
            return True
        return False

    async def leave_one_node(self) -> None:
        """Draining: a channel only one node runs (Discord) goes to another node now."""
        for name, supervisor in self._supervisors.items():
            if isinstance(supervisor, LeasedSupervisor):
                log.info("draining: letting adapter %s's connection go to another node", name)
                await supervisor.stop()

    async def rejoin_one_node(self) -> None:
        for supervisor in self._supervisors.values():
            if isinstance(supervisor, LeasedSupervisor):
                await supervisor.start()

    def statuses(self) -> dict[str, dict[str, str]]:
        """Each channel's state (and why, when it is not running), disabled ones included."""
        statuses = {
            a.name: (
                self._supervisors[a.name].status() if a.name in self._supervisors else a.status()
            ).to_json()
            for a in self.adapters
        }
        statuses.update({name: status.to_json() for name, status in self._disabled.items()})
        return statuses
