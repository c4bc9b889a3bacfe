"""Channels: each turns one platform's events into gateway messages and renders the
session's outputs back there.

A channel is declared by its package (:class:`adapters.channel.Channel`, found through the
``netclaw.channels`` entry points by :mod:`adapters.registry`): its config section, its
adapter, what the platform can do. netclaw's own — webhooks, Slack, Discord — are declared
the same way as any installed package's. Importing this package loads the declarations
and registers their sections with :mod:`netclaw.config` (every entry point that loads the
configuration imports it first); it stays light — an adapter and its platform library are
imported only when built.

``build_adapters`` makes the ones the config enables. Adapters depend on the gateway,
never the reverse; the daemon starts them after the sessions and before the HTTP API.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.base import Adapter, AdapterStatus
from adapters.channel import Capabilities, Channel
from adapters.registry import Installed, channel_named, installed_channels
from netclaw.config import Settings, channel_section

if TYPE_CHECKING:
    from netclaw.gateway import ChatInput

log = logging.getLogger(__name__)

__all__ = [
    "Adapter",
    "AdapterStatus",
    "Capabilities",
    "Channel",
    "Installed",
    "build_adapters",
    "channel_named",
    "installed_channels",
]

installed_channels()  # registers every channel's section


def enabled_channels(settings: Settings) -> list[Installed]:
    """The installed channels whose section asks them to run (broken ones included; a
    second package offering a name already taken is only reported, never built)."""
    found: dict[str, Installed] = {}
    for installed in installed_channels():
        section = channel_section(settings, installed.name)
        if section is not None and section.active():
            found.setdefault(installed.name, installed)  # the first of a name: the one loaded
    return list(found.values())


def build_adapters(settings: Settings, gateway: ChatInput) -> list[Adapter]:
    """The enabled adapters, not yet checked or started. Platform libraries are imported
    only for enabled adapters, so a missing optional library (or a broken channel
    package) disables just that one."""
    return [_build(installed, settings, gateway) for installed in enabled_channels(settings)]


def _build(installed: Installed, settings: Settings, gateway: ChatInput) -> Adapter:
    channel = installed.channel
    if channel is None:
        return _Broken(installed.name, installed.error)
    try:
        adapter = channel.factory()(settings, gateway)
    except Exception as exc:  # an adapter that cannot even be built is reported, not fatal
        log.exception("adapter %s cannot be loaded", channel.name)
        hint = f" ({channel.requires})" if channel.requires else ""
        return _Broken(channel.name, f"cannot load: {type(exc).__name__}: {exc}{hint}")
    return adapter


class _Broken:
    """Stands in for an adapter that failed to load, so it shows up as failed in /healthz."""

    def __init__(self, name: str, detail: str) -> None:
        self.name = name
        self._detail = detail

    def check(self) -> None:
        from netclaw.errors import AdapterError

        raise AdapterError(self._detail)

    def routes(self) -> list:  # type: ignore[type-arg]
        return []

    async def probe(self) -> str:
        self.check()
        return ""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def status(self) -> AdapterStatus:
        return AdapterStatus("failed", self._detail)
