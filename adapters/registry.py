"""The installed channels: every :class:`~adapters.channel.Channel` named under the
``netclaw.channels`` entry points, loaded once per process.

netclaw's own channels (webhooks, Slack, Discord) are entry points of the netclaw
distribution like any other package's; run from a source tree that was never installed
they are found by their module paths instead (:data:`BUILT_IN`). A channel that cannot be
loaded — its import fails, it names something that is not a Channel, its name is taken,
its section clashes — is kept as a :class:`Installed` with the reason: ``netclaw
channels``, ``netclaw doctor`` and ``/healthz`` report it, and its section of netclaw.json
is accepted as it is written (so one broken package never stops the daemon or the CLI).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar

from pydantic import ConfigDict

from adapters.channel import ENTRY_POINT_GROUP, Channel
from netclaw.config import ChannelSection, register_channel_sections, registered_channels

log = logging.getLogger("adapters")

# netclaw's own channels, in the order they start; also their entry points' values.
BUILT_IN = {
    "webhooks": "adapters.webhook:CHANNEL",
    "slack": "adapters.slack:CHANNEL",
    "discord": "adapters.discord_bot:CHANNEL",
    "telegram": "adapters.telegram:CHANNEL",
    "matrix": "adapters.matrix:CHANNEL",
    "teams": "adapters.teams:CHANNEL",
    "email": "adapters.email:CHANNEL",
    "mattermost": "adapters.mattermost:CHANNEL",
}


@dataclass(frozen=True, slots=True)
class Installed:
    """One channel an installed package offers: loaded (``channel``) or not (``error``)."""

    name: str
    source: str  # the distribution that provides it ("netclaw 0.1.0")
    channel: Channel | None = None
    error: str = ""

    @property
    def built_in(self) -> bool:
        return self.name in BUILT_IN and self.source.startswith("netclaw ")


_INSTALLED: list[Installed] | None = None


def installed_channels() -> list[Installed]:
    """Every installed channel (built-in ones first, then by name), their sections
    registered with :mod:`netclaw.config`. Loaded on the first call."""
    global _INSTALLED
    if _INSTALLED is None:
        _INSTALLED = _load()
    return list(_INSTALLED)


def _entry_points() -> list[tuple[str, str, str]]:
    """(name, value, distribution) of each ``netclaw.channels`` entry point."""
    found = []
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist
        source = f"{dist.name} {dist.version}" if dist is not None else "an unknown package"
        found.append((point.name, point.value, source))
    return found


def _load() -> list[Installed]:
    points = _entry_points()
    netclaw_source = _netclaw_source()
    # Built-ins first, in their order, whether or not this checkout was installed.
    ordered = [(name, value, netclaw_source) for name, value in BUILT_IN.items()]
    ordered += sorted(p for p in points if p[1] not in BUILT_IN.values())
    loaded: dict[str, Installed] = {}
    for name, value, source in ordered:
        if name in loaded:
            # A second package offering a name already taken: reported, the first kept.
            taken = loaded[name].source
            log.error("channel %s from %s ignored: %s already provides it", name, source, taken)
            clash = Installed(name, source, error=f"{taken} already provides {name!r}")
            loaded.setdefault(f"{name} ({source})", clash)
            continue
        loaded[name] = _load_one(name, value, source)
    return list(loaded.values())


def _load_one(name: str, value: str, source: str) -> Installed:
    try:
        module, _, attribute = value.partition(":")
        channel: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            channel = getattr(channel, part)
        if not isinstance(channel, Channel):
            raise TypeError(f"{value} is a {type(channel).__name__}, not an adapters.channel.Channel")
        if channel.name != name:
            raise ValueError(
                f"the entry point is named {name!r} but the channel calls itself {channel.name!r}"
            )
        register_channel_sections(channel.section)
    except Exception as exc:  # noqa: BLE001 - a broken channel package is reported, never fatal
        log.error("channel %s (from %s) cannot be loaded: %s: %s", name, source, type(exc).__name__, exc)
        _accept_section_as_written(name)
        return Installed(name, source, error=f"cannot load {value}: {type(exc).__name__}: {exc}")
    return Installed(name, source, channel)


def _accept_section_as_written(name: str) -> None:
    """A channel that failed to load keeps its section of netclaw.json loadable (any keys):
    the daemon starts and reports the channel as failed rather than refusing the file."""
    if name in registered_channels() or not name.isidentifier() or name != name.lower():
        return
    model = type(f"Unloaded_{name}", (_UnloadedSection,), {"key": name, "__module__": __name__})
    try:
        register_channel_sections(model)
    except TypeError as exc:  # a name that clashes with one of netclaw.json's own sections
        log.error("channel %s: %s", name, exc)


class _UnloadedSection(ChannelSection):
    """The section of a channel that failed to load, as written (see above)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    key: ClassVar[str] = ""

    def active(self) -> bool:
        extra = self.model_extra or {}
        return bool(extra.get("enabled", bool(extra)))


def _netclaw_source() -> str:
    try:
        return f"netclaw {metadata.version('netclaw')}"
    except metadata.PackageNotFoundError:
        return "netclaw (source tree)"


def channel_named(name: str) -> Channel | None:
    """The loaded channel called ``name``, if any."""
    return next((i.channel for i in installed_channels() if i.name == name and i.channel is not None), None)
