"""A config reload (SIGHUP) applies to the running daemon: every component reads the
live settings, and the log line says what changed, what applied and what waits for a
restart."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.config import load_settings
from netclaw.daemon import Daemon
from netclaw.security.policy import ChatEvent
from netclaw.security.trust import system_prompt as trusted
from tests.conftest import settings_data, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread

SECRET = "route-secret-0123456789-0123456789abcdef"


@pytest.fixture
def config(tmp_path: Path, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    return settings_data(
        tmp_path / "data",
        scripted.base_url,
        agent={"system_prompt": "You are the first prompt."},
        webhooks={"routes": {"a": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}}}},
        slack={"channels": ["C1"]},
    )


@pytest.fixture
def running(tmp_path: Path, config: dict[str, Any]) -> Iterator[tuple[Daemon, Path, httpx.Client]]:
    path = tmp_path / "netclaw.json"
    path.write_text(json.dumps(config))
    daemon = Daemon(load_settings(path), config_path=str(path))
    daemon.start()
    token = (daemon.settings.data_dir / "control.token").read_text().strip()
    client = httpx.Client(base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=20)
    try:
        yield daemon, path, client
    finally:
        client.close()
        daemon.stop()


def rewrite(path: Path, config: dict[str, Any], **changes: Any) -> None:
    path.write_text(json.dumps({**config, **changes}))


def system_prompt(client: httpx.Client, session_id: str) -> str:
    response = client.get(f"/api/sessions/{session_id}", params={"view": "context"})
    response.raise_for_status()
    first = response.json()["messages"][0]
    assert first["role"] == "system"
    content: str = first["content"]
    return content


def test_reload_applies_prompt_routes_and_allowlists_and_says_what_waits(
    running: tuple[Daemon, Path, httpx.Client],
    config: dict[str, Any],
    scripted: ScriptedOpenAIThread,
    caplog: pytest.LogCaptureFixture,
) -> None:
    daemon, path, client = running
    sid = "cli:reloaded"
    assert (
        client.post(f"/api/sessions/{sid}/messages", json={"text": "one"}, params={"wait": "1"}).status_code
        == 200
    )
    assert system_prompt(client, sid) == trusted("You are the first prompt.")
    new_route = client.post("/webhooks/b", json={"text": "hi"}, headers={"Authorization": f"Bearer {SECRET}"})
    assert new_route.status_code == 404

    rewrite(
        path,
        config,
        agent={"system_prompt": "You are the second prompt."},
        webhooks={
            "routes": {
                "a": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}},
                "b": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}, "audience": "team"},
            }
        },
        slack={"channels": ["C1", "C9"]},
        providers={"local": {**config["providers"]["local"], "timeout_s": 99}},
    )
    with caplog.at_level(logging.INFO, logger="netclaw.daemon"):
        daemon.reload()
    [line] = [r.getMessage() for r in caplog.records if "config reloaded" in r.getMessage()]
    assert "applied: agent.system_prompt, slack.channels, webhooks.routes.b" in line
    assert "needs a restart (running values kept): providers.local.timeout_s" in line

    # The API shows what the model now sees.
    assert system_prompt(client, sid) == trusted("You are the second prompt.")
    # The running session's next turn is sent with it.
    assert (
        client.post(f"/api/sessions/{sid}/messages", json={"text": "two"}, params={"wait": "1"}).status_code
        == 200
    )
    assert scripted.requests[-1]["messages"][0]["content"] == trusted("You are the second prompt.")
    # A route added by the reload answers.
    added = client.post("/webhooks/b", json={"text": "hi"}, headers={"Authorization": f"Bearer {SECRET}"})
    assert added.status_code == 202, added.text
    assert added.json()["session_id"].startswith("webhook:b:")
    # Chat allowlists follow (the policy reads the live settings).
    assert daemon.gateway is not None
    event = ChatEvent(platform="slack", channel_id="C9", user_id="U1", mentioned=True)
    assert daemon.gateway.chat.permit(event) is not None
    # What needs a restart keeps its running value until then.
    assert daemon.settings.providers["local"].timeout_s == config["providers"]["local"]["timeout_s"]


def test_a_removed_route_stops_answering(
    running: tuple[Daemon, Path, httpx.Client], config: dict[str, Any]
) -> None:
    daemon, path, client = running
    auth = {"Authorization": f"Bearer {SECRET}"}
    assert client.post("/webhooks/a", json={"text": "hi"}, headers=auth).status_code == 202
    rewrite(
        path,
        config,
        webhooks={"routes": {"c": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}}}},
    )
    daemon.reload()
    assert client.post("/webhooks/a", json={"text": "hi"}, headers=auth).status_code == 404
    assert client.post("/webhooks/c", json={"text": "hi"}, headers=auth).status_code == 202


def test_an_invalid_config_keeps_the_running_one(
    running: tuple[Daemon, Path, httpx.Client], caplog: pytest.LogCaptureFixture
) -> None:
    daemon, path, _ = running
    path.write_text('{"session": {"idle_timeout_s": -1}}')
    with caplog.at_level(logging.ERROR, logger="netclaw.daemon"):
        daemon.reload()
    assert any("session.idle_timeout_s" in r.getMessage() for r in caplog.records)
    assert daemon.settings.agent.system_prompt == "You are the first prompt."


def test_schedules_follow_a_reload(
    running: tuple[Daemon, Path, httpx.Client], config: dict[str, Any]
) -> None:
    daemon, path, client = running

    def reminders() -> list[str]:
        return sorted(r["id"] for r in client.get("/api/reminders").json())

    standup = {"cron": "5 8 * * 1-5", "text": "Post the stand-up summary.", "session": "cli:standup"}
    rewrite(path, config, schedules={"standup": standup})
    daemon.reload()
    wait_until(lambda: reminders() == ["config:standup"], what="the schedule added by the reload")
    rewrite(path, config, schedules={})
    daemon.reload()
    wait_until(lambda: reminders() == [], what="the schedule removed by the reload")
