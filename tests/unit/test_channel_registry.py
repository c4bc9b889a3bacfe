"""The installed channels (adapters/registry.py): every ``netclaw.channels`` entry point
loaded once, netclaw's own first; a package that fails to load — its import, a wrong object,
a name already taken, a section that clashes — is kept with why and never stops the
others; an installed chat channel is one for the core too (speakers, memory scope,
audience, the outbox), and its section is a key of netclaw.json like any other."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import adapters
from adapters import Capabilities, Channel, build_adapters
from netclaw.config import ChatSection, ConfigError, DeliverConfig, is_chat_channel, load_settings
from netclaw.security.policy import audience_of, default_scope
from netclaw.security.roles import speaker_of


class PagerConfig(ChatSection):
    key: ClassVar[str] = "pager"
    token_env: str = "PAGER_TOKEN"


PAGER = Channel(
    name="pager",
    section=PagerConfig,
    adapter="tests.unit.test_channel_registry:PagerAdapter",
    capabilities=Capabilities(conversations="chats", approvals="replies", message_limit=160),
    summary="a pager",
)


class PagerAdapter:
    name = "pager"

    def __init__(self, settings: object, gateway: object) -> None:
        self.settings = settings


class ToolsConfig(ChatSection):  # an installed channel trying to take one of the core's keys
    key: ClassVar[str] = "tools"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """An empty registry and a module holding fake channel declarations; the real registry
    (and the sections registered) come back afterwards."""
    from netclaw import config

    module = types.ModuleType("fake_channels")
    module.PAGER = PAGER  # type: ignore[attr-defined]
    module.NOT_A_CHANNEL = object()  # type: ignore[attr-defined]
    module.MISNAMED = Channel(  # type: ignore[attr-defined]
        name="pager", section=PagerConfig, adapter="x:y", capabilities=PAGER.capabilities
    )
    module.CLASH = Channel(  # type: ignore[attr-defined]
        name="tools", section=ToolsConfig, adapter="x:y", capabilities=PAGER.capabilities
    )
    monkeypatch.setitem(sys.modules, "fake_channels", module)
    monkeypatch.setattr("netclaw.config._CHANNEL_SECTIONS", dict(config.registered_channels()))
    monkeypatch.setattr("adapters.registry._INSTALLED", None)
    yield module


def use_entry_points(
    monkeypatch: pytest.MonkeyPatch, *points: tuple[str, str, str]
) -> list[adapters.Installed]:
    monkeypatch.setattr("adapters.registry._entry_points", lambda: list(points))
    return adapters.installed_channels()


def test_an_installed_channel_joins_netclaw_and_its_section_the_file(
    fresh: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = use_entry_points(monkeypatch, ("pager", "fake_channels:PAGER", "netclaw-pager 2.0"))
    assert [i.name for i in found] == [
        "webhooks",
        "slack",
        "discord",
        "telegram",
        "matrix",
        "teams",
        "email",
        "mattermost",
        "pager",
    ]
    assert found[-1].channel is PAGER and found[-1].source == "netclaw-pager 2.0" and not found[-1].built_in

    config = tmp_path / "netclaw.json"
    config.write_text(json.dumps({"pager": {"enabled": True, "channels": ["desk"]}}))
    monkeypatch.setenv("NETCLAW_PAGER__TOKEN_ENV", "MY_PAGER")
    settings = load_settings(config)
    section = PagerConfig.of(settings)
    assert section.channels == ["desk"] and section.token_env == "MY_PAGER"
    built = build_adapters(settings, settings)  # type: ignore[arg-type]
    assert [type(a).__name__ for a in built] == ["PagerAdapter"]

    config.write_text(json.dumps({"pager": {"enabled": True, "chanels": ["desk"]}}))
    with pytest.raises(ConfigError, match=r"pager\.chanels: unknown key"):
        load_settings(config)

    # The core treats it as the chat platform it is.
    assert is_chat_channel("pager") and not is_chat_channel("webhook") and not is_chat_channel("cli")
    assert speaker_of("pager:desk", "u7") == "pager:u7"
    assert default_scope("pager:desk:thread9") == "pager:desk"
    assert audience_of("pager:desk", settings) == "team"
    assert DeliverConfig(channel="pager", to="desk").channel == "pager"


def test_a_channel_that_cannot_load_is_kept_with_why_and_the_others_load(
    fresh: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = use_entry_points(
        monkeypatch,
        ("gone", "fake_channels_not_installed:CHANNEL", "netclaw-gone 1"),
        ("odd", "fake_channels:NOT_A_CHANNEL", "netclaw-odd 1"),
        ("other", "fake_channels:MISNAMED", "netclaw-other 1"),
        ("slack", "fake_channels:PAGER", "netclaw-impostor 1"),
        ("tools", "fake_channels:CLASH", "netclaw-clash 1"),
        ("pager", "fake_channels:PAGER", "netclaw-pager 2.0"),
    )
    errors = {(i.name, i.source): i.error for i in found if i.error}
    assert "ModuleNotFoundError" in errors[("gone", "netclaw-gone 1")]
    assert "is a object, not an adapters.channel.Channel" in errors[("odd", "netclaw-odd 1")]
    assert "calls itself 'pager'" in errors[("other", "netclaw-other 1")]
    assert "already provides 'slack'" in errors[("slack", "netclaw-impostor 1")]
    assert "'tools' is one of netclaw.json's own sections" in errors[("tools", "netclaw-clash 1")]
    assert [i.name for i in found if i.channel is not None] == [
        "webhooks",
        "slack",
        "discord",
        "telegram",
        "matrix",
        "teams",
        "email",
        "mattermost",
        "pager",
    ]
    assert adapters.channel_named("slack") is not PAGER  # the built-in kept

    # The broken one's section loads as written; enabled, it stands in as a failed adapter.
    config = tmp_path / "netclaw.json"
    config.write_text(json.dumps({"gone": {"enabled": True, "whatever": 1}}))
    settings = load_settings(config)
    (broken,) = build_adapters(settings, settings)  # type: ignore[arg-type]
    assert broken.name == "gone" and broken.status().state == "failed"
    assert "fake_channels_not_installed" in broken.status().detail
    # The impostor offering "slack" is reported, never built beside the real Slack adapter.
    config.write_text(json.dumps({"slack": {"enabled": True}}))
    built = build_adapters(load_settings(config), settings)  # type: ignore[arg-type]
    assert [(a.name, type(a).__name__) for a in built] == [("slack", "SlackAdapter")]


def test_a_declaration_names_its_own_section_and_its_adapter_by_module_path() -> None:
    with pytest.raises(ValueError, match="has key 'pager'; they must be the same"):
        Channel(name="beeper", section=PagerConfig, adapter="x:y", capabilities=PAGER.capabilities)
    with pytest.raises(ValueError, match="adapter must be 'module:attribute'"):
        Channel(name="pager", section=PagerConfig, adapter="PagerAdapter", capabilities=PAGER.capabilities)
    assert PAGER.factory() is PagerAdapter


def test_the_built_in_channels_declare_what_their_platforms_can_do() -> None:
    by_name = {i.name: i.channel for i in adapters.installed_channels() if i.built_in}
    assert set(by_name) == {
        "webhooks",
        "slack",
        "discord",
        "telegram",
        "matrix",
        "teams",
        "email",
        "mattermost",
    }
    discord = by_name["discord"]
    assert discord is not None and discord.one_node and discord.capabilities.message_limit == 2000
    slack = by_name["slack"]
    assert slack is not None and not slack.one_node and slack.capabilities.approvals == "buttons"


def test_the_built_in_declarations_say_what_their_adapters_do() -> None:
    """The capabilities people read in ``netclaw channels`` are the numbers the adapters use."""
    from adapters.discord_bot import _adapter as discord_adapter
    from adapters.discord_bot import _port as discord_port
    from adapters.matrix import _port as matrix_port
    from adapters.mattermost import _port as mattermost_port
    from adapters.slack import _adapter as slack_adapter
    from adapters.slack import _port as slack_port
    from adapters.teams import _adapter as teams_adapter
    from adapters.teams import _port as teams_port
    from adapters.telegram import _adapter as telegram_adapter
    from adapters.telegram import _port as telegram_port

    slack, discord = adapters.channel_named("slack"), adapters.channel_named("discord")
    assert slack is not None and discord is not None
    assert slack.capabilities.message_limit == slack_port.MESSAGE_LIMIT
    assert slack.capabilities.edit_interval_s == slack_adapter.EDIT_INTERVAL_S
    assert discord.capabilities.message_limit == discord_port.MESSAGE_LIMIT
    assert discord.capabilities.edit_interval_s == discord_adapter.EDIT_INTERVAL_S
    telegram, matrix = adapters.channel_named("telegram"), adapters.channel_named("matrix")
    assert telegram is not None and matrix is not None
    assert telegram.capabilities.message_limit == telegram_port.MESSAGE_LIMIT
    assert telegram.capabilities.edit_interval_s == telegram_adapter.EDIT_INTERVAL_S
    assert matrix.capabilities.message_limit == matrix_port.MESSAGE_LIMIT
    assert matrix.capabilities.edit_interval_s == matrix_port.EDIT_INTERVAL_S
    teams = adapters.channel_named("teams")
    assert teams is not None
    assert teams.capabilities.message_limit == teams_port.MESSAGE_LIMIT
    assert teams.capabilities.edit_interval_s == teams_adapter.EDIT_INTERVAL_S
    mattermost = adapters.channel_named("mattermost")
    assert mattermost is not None
    assert mattermost.capabilities.message_limit == mattermost_port.MESSAGE_LIMIT
    assert mattermost.capabilities.edit_interval_s == mattermost_port.EDIT_INTERVAL_S
