"""Channel adapters: each turns platform events into gateway messages.

``build_adapters`` makes the ones the config enables. Adapters depend on the gateway,
never the reverse; the daemon starts them after the sessions and before the HTTP API.

Each channel declares its own section of netclaw.json beside its code
(``<channel>/_config.py``); importing this package registers them with
:mod:`netclaw.config`, which composes them (the core never imports an adapter). Every
entry point that loads the configuration imports this package first; it stays light —
the adapters themselves are imported only when built.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.base import Adapter, AdapterStatus
from adapters.discord_bot import DiscordConfig
from adapters.slack import SlackConfig
from adapters.webhook import WebhooksConfig
from netclaw.config import Settings, register_channel_sections

if TYPE_CHECKING:
    from netclaw.gateway import ChatInput

log = logging.getLogger(__name__)

__all__ = ["CHANNEL_SECTIONS", "Adapter", "AdapterStatus", "build_adapters"]

CHANNEL_SECTIONS = (WebhooksConfig, SlackConfig, DiscordConfig)
register_channel_sections(*CHANNEL_SECTIONS)


def build_adapters(settings: Settings, gateway: ChatInput) -> list[Adapter]:
    """The enabled adapters, not yet checked or started. Platform libraries are imported
    only for enabled adapters, so a missing optional library disables just that one."""
    found: list[Adapter] = []
    if WebhooksConfig.of(settings).routes:
        from adapters.webhook import WebhookAdapter

        found.append(WebhookAdapter(settings, gateway))
    if settings.slack.enabled:
        found.append(_optional("adapters.slack", "SlackAdapter", "slack", settings, gateway))
    if settings.discord.enabled:
        found.append(_optional("adapters.discord_bot", "DiscordAdapter", "discord", settings, gateway))
    return found


def _optional(module: str, cls: str, name: str, settings: Settings, gateway: ChatInput) -> Adapter:
    try:
        imported = __import__(module, fromlist=[cls])
        adapter: Adapter = getattr(imported, cls)(settings, gateway)
    except Exception as exc:  # an adapter that cannot even be built is reported, not fatal
        log.exception("adapter %s cannot be loaded", name)
        return _Broken(name, f"cannot load: {type(exc).__name__}: {exc}")
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
