"""Channel config sections declared beside their adapters (adapters/<channel>/_config.py)
and composed by netclaw.config through its registry: the same keys, key paths in errors,
environment overrides and reload rules as any section; ``import adapters`` registers them
and stays light; without it, a channel section is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adapters import installed_channels
from adapters.discord_bot import DiscordConfig
from adapters.slack import SlackConfig
from adapters.webhook import WebhooksConfig
from netclaw.config import (
    ChannelSection,
    ChatSection,
    LiveSettings,
    Settings,
    load_settings,
    needs_restart,
    redacted,
    register_channel_sections,
)
from netclaw.errors import ConfigError
from netclaw.security.policy import audience_of

HEAVY = [
    "pykka",
    "aiohttp",
    "aiosqlite",
    "httpx",
    "sqlite3",
    "slack_sdk",
    "slack_bolt",
    "discord",
    "telegram",
    "nio",
    "microsoft_agents",
]
ROUTE = {"auth": {"type": "hmac", "secret_env": "HOOK_SECRET"}, "audience": "team"}


@pytest.fixture
def no_netclaw_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("NETCLAW_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_importing_adapters_registers_every_section_and_loads_no_adapter() -> None:
    probe = f"""
        import json, sys
        import adapters
        from netclaw.config import Settings
        settings = Settings()
        print(json.dumps([
            [type(settings.webhooks).__name__, type(settings.slack).__name__, type(settings.discord).__name__],
            [m for m in {[*HEAVY, "netclaw.gateway", "adapters.chat", "adapters.slack._adapter", "adapters.telegram._adapter", "adapters.matrix._adapter", "adapters.teams._adapter", "adapters.mattermost._adapter"]!r} if m in sys.modules],
        ]))
    """
    sections, loaded = json.loads(run(probe))
    assert sections == ["WebhooksConfig", "SlackConfig", "DiscordConfig"]
    assert loaded == [], f"importing adapters loaded {loaded}"
    assert {i.channel.section.key for i in installed_channels() if i.built_in and i.channel} == {
        "webhooks",
        "slack",
        "discord",
        "telegram",
        "matrix",
        "teams",
        "email",
        "mattermost",
    }


def test_without_the_adapters_a_channel_section_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "netclaw.json"
    config.write_text(json.dumps({"slack": {"enabled": True, "bot_token_env": "B"}}))
    probe = f"""
        from netclaw.config import Settings, load_settings
        from netclaw.errors import ConfigError
        print(type(Settings().slack).__name__, Settings().slack.enabled)  # the core alone: the base, off
        try:
            load_settings({str(config)!r})
        except ConfigError as exc:
            print(exc)
    """
    out = run(probe)
    assert out.startswith("ChatSection False")
    assert "slack: no adapter declared this section (import `adapters` before loading settings)" in out


def test_each_section_is_its_adapters_model_with_its_key_paths(no_netclaw_env: Path) -> None:
    settings = Settings(
        slack={"enabled": True, "channels": ["C1"], "api_url": "http://127.0.0.1:1/api/"},
        discord={"token_env": "MY_DISCORD"},
        webhooks={"routes": {"alerts": ROUTE}},
    )
    assert SlackConfig.of(settings).api_url == "http://127.0.0.1:1/api/"
    assert DiscordConfig.of(settings).token_env == "MY_DISCORD"
    assert WebhooksConfig.of(settings).routes["alerts"].audience == "team"
    assert settings.slack.channels == ["C1"]  # what the core reads, typed as ChatSection
    dumped = redacted(settings)
    assert (
        dumped["slack"]["api_url"] == "http://127.0.0.1:1/api/"
        and dumped["discord"]["token_env"] == "MY_DISCORD"
    )
    assert Settings.model_validate(settings.model_dump()) == settings
    (no_netclaw_env / "netclaw.json").write_text(
        json.dumps({"slack": {"bot_token_env": "not a name!", "nope": 1}, "discord": {"users": "U1"}})
    )
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "slack.bot_token_env: Value error, 'not a name!' is not an environment variable name" in message
    assert "slack.nope: unknown key" in message and "discord.users: Input should be a valid list" in message


def test_nested_environment_keys_are_read_as_the_adapters_model(
    no_netclaw_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETCLAW_SLACK__ENABLED", "true")
    monkeypatch.setenv("NETCLAW_SLACK__CHANNELS", '["C0123ABCDEF"]')
    monkeypatch.setenv("NETCLAW_SLACK__APP_TOKEN_ENV", "MY_APP_TOKEN")
    monkeypatch.setenv("NETCLAW_WEBHOOKS__ROUTES", json.dumps({"alerts": ROUTE}))
    settings = load_settings()
    slack = SlackConfig.of(settings)
    assert slack.enabled and slack.channels == ["C0123ABCDEF"] and slack.app_token_env == "MY_APP_TOKEN"
    assert list(WebhooksConfig.of(settings).routes) == ["alerts"]


def test_a_short_webhook_secret_is_refused_at_load(
    no_netclaw_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (no_netclaw_env / "netclaw.json").write_text(json.dumps({"webhooks": {"routes": {"alerts": ROUTE}}}))
    monkeypatch.setenv("HOOK_SECRET", "short")
    with pytest.raises(
        ConfigError, match=r"webhooks\.routes\.alerts\.auth\.secret_env: the secret in HOOK_SECRET is 5 bytes"
    ):
        load_settings()
    monkeypatch.setenv("HOOK_SECRET", "x" * 32)
    assert "alerts" in WebhooksConfig.of(load_settings()).routes


def test_a_webhook_sessions_audience_is_its_routes() -> None:
    settings = Settings(webhooks={"routes": {"alerts": ROUTE}})
    assert audience_of("webhook:alerts:k1", settings) == "team"
    assert audience_of("webhook:gone:k1", settings) == "public"


def test_each_section_says_which_of_its_keys_need_a_restart() -> None:
    for key in (
        "slack.enabled",
        "slack.bot_token_env",
        "slack.app_token_env",
        "slack.api_url",
        "discord.token_env",
    ):
        assert needs_restart(key), key
    assert not needs_restart("slack.channels") and not needs_restart("webhooks.routes")
    live = LiveSettings(Settings(slack={"channels": ["C1"]}))
    change = live.reload(Settings(slack={"channels": ["C2"], "bot_token_env": "OTHER"}))
    assert change.applied == ("slack.channels",) and change.restart == ("slack.bot_token_env",)
    current = SlackConfig.of(live.current)
    assert current.channels == ["C2"] and current.bot_token_env == "SLACK_BOT_TOKEN"


def test_a_section_must_fit_a_key_of_its_kind() -> None:
    class Usurper(ChannelSection):  # an installed channel may not take one of the core's keys
        key = "tools"

    class Shouty(ChannelSection):
        key = "IRC!"

    class Other(ChatSection):
        key = "slack"

    class Misfit(ChannelSection):  # not a chat section: cannot stand for slack
        key = "slack"

    with pytest.raises(TypeError, match=r"'tools' is one of netclaw\.json's own sections"):
        register_channel_sections(Usurper)
    with pytest.raises(TypeError, match=r"'IRC!' is not a section key"):
        register_channel_sections(Shouty)
    with pytest.raises(TypeError, match="two models for the 'slack' section"):
        register_channel_sections(Other)
    with pytest.raises(TypeError, match="of its kind"):
        register_channel_sections(Misfit)
    register_channel_sections(SlackConfig)  # again: the same model is fine
    with pytest.raises(TypeError, match="not a DiscordConfig"):
        DiscordConfig.of(Settings.model_construct(discord=ChatSection()))
