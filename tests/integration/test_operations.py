"""Running it like a service, against the real in-process daemon: health that follows a
channel going down and coming back (and one unreachable at boot), the journal's health,
usage from the journal, the daily spend guard, and the second (webhook) listener."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from adapters.slack import _client as slack_client
from tests.conftest import DaemonHandle, wait_until
from tests.e2e.conftest import free_port
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, FakeSlackThread

StartDaemon = Callable[..., DaemonHandle]
MENTION = f"<@{BOT_USER_ID}>"


@pytest.fixture
def slack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    # slack-sdk looks at a lost connection every ping interval; 10 s in production.
    monkeypatch.setattr(slack_client, "PING_INTERVAL_S", 0.5)


@pytest.fixture
def fakes() -> Iterator[list[FakeSlackThread]]:
    started: list[FakeSlackThread] = []
    yield started
    for fake in started:
        fake.stop()


def health(handle: DaemonHandle) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{handle.base_url}/healthz", timeout=5)
    return response.status_code, response.json()


def slack_state(handle: DaemonHandle) -> str:
    return str(health(handle)[1]["adapters"]["slack"]["state"])


def test_healthz_is_degraded_while_slack_is_down_and_ok_when_it_is_back(
    slack_env: None, start_daemon: StartDaemon, fakes: list[FakeSlackThread]
) -> None:
    first = FakeSlackThread()
    fakes.append(first)
    first.start()
    port = first.server.port
    handle = start_daemon(slack={"enabled": True, "channels": ["C1"], "api_url": first.api_url})
    assert health(handle) == (200, health(handle)[1]) and slack_state(handle) == "running"

    first.stop()  # Slack goes away: the WebSocket closes, reconnects are refused
    _, body = wait_until(lambda: (h := health(handle))[0] == 503 and h, timeout=10, what="degraded")
    assert body["status"] == "degraded" and "adapter slack is reconnecting" in body["reason"]
    metrics = httpx.get(f"{handle.base_url}/metrics").text
    assert 'netclaw_adapter_up{adapter="slack"} 0.0' in metrics

    second = FakeSlackThread(port=port)  # Slack is back, at the same address
    fakes.append(second)
    second.start()
    wait_until(lambda: health(handle)[0] == 200, timeout=20, what="healthy again")
    assert slack_state(handle) == "running"
    # Really connected: a mention is answered through the new connection.
    ts, _ = second.say("C1", f"{MENTION} are you back?")
    # The reply streams: wait for its final text, not for its first piece.
    wait_until(
        lambda: any("echo: are you back?" in m["text"] for m in second.server.bot_messages("C1", ts)),
        timeout=10,
        what="the reply",
    )


def test_slack_unreachable_at_boot_is_retried_until_it_answers(
    slack_env: None, start_daemon: StartDaemon, fakes: list[FakeSlackThread]
) -> None:
    port = free_port()
    handle = start_daemon(
        slack={"enabled": True, "channels": ["C1"], "api_url": f"http://127.0.0.1:{port}/api/"}
    )
    status, body = health(handle)
    assert status == 503 and body["adapters"]["slack"]["state"] == "retrying"
    assert "cannot reach Slack" in body["adapters"]["slack"]["detail"]
    assert handle.send("cli:other", "still here?", wait=True).json()["reply"] == "echo: still here?"

    fake = FakeSlackThread(port=port)
    fakes.append(fake)
    fake.start()
    wait_until(lambda: slack_state(handle) == "running", timeout=30, what="slack connected")
    assert health(handle)[0] == 200


def test_a_failing_journal_commit_degrades_health_until_one_succeeds(start_daemon: StartDaemon) -> None:
    handle = start_daemon()
    assert health(handle)[0] == 200
    db = handle.daemon.settings.database_path
    with sqlite3.connect(db) as conn:  # a real failure inside the writer's transaction
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )
    refused = handle.send("cli:j", "hello")
    assert refused.status_code >= 500
    status, body = health(handle)
    assert (
        status == 503 and "the last journal commit failed" in body["reason"] and "disk I/O" in body["reason"]
    )
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse")
    assert handle.send("cli:j", "hello again", wait=True).status_code == 200
    assert health(handle)[0] == 200


def test_usage_by_session_day_and_model(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon()
    scripted.enqueue(
        Reply("one", usage=(100, 10)), Reply("two", usage=(200, 20)), Reply("three", usage=(300, 30))
    )
    for session, text in (("cli:a", "1"), ("cli:a", "2"), ("cli:b", "3")):
        assert handle.send(session, text, wait=True).status_code == 200

    by_session = handle.http.get("/api/usage", params={"by": "session"}).json()
    assert by_session == [
        {"key": "cli:a", "turns": 2, "input_tokens": 300, "output_tokens": 30, **NO_CACHE_NO_PRICE},
        {"key": "cli:b", "turns": 1, "input_tokens": 300, "output_tokens": 30, **NO_CACHE_NO_PRICE},
    ]
    today = dt.datetime.now(dt.UTC).date().isoformat()
    by_day = handle.http.get("/api/usage", params={"by": "day"}).json()
    assert [(r["key"], r["turns"], r["input_tokens"]) for r in by_day] == [(today, 3, 600)]
    by_model = handle.http.get("/api/usage", params={"by": "model"}).json()
    assert [(r["key"], r["output_tokens"]) for r in by_model] == [("scripted", 60)]
    tomorrow = (dt.date.today() + dt.timedelta(days=2)).isoformat()
    assert handle.http.get("/api/usage", params={"since": tomorrow}).json() == []
    bad = handle.http.get("/api/usage", params={"since": "last tuesday"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_since"
    assert handle.http.get("/api/usage", params={"by": "user"}).status_code == 400
    assert httpx.get(f"{handle.base_url}/api/usage").status_code == 401


NO_CACHE_NO_PRICE = {
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "cost": 0.0,
    "speech_seconds": 0.0,
    "currency": "USD",
}


def test_the_spend_guard_answers_with_a_notice_instead_of_calling_the_model(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(session={"max_tokens_per_day": 500})
    scripted.enqueue(Reply("first", usage=(400, 150)))  # 550: over the cap
    assert handle.send("cli:s", "one", wait=True).json()["reply"] == "first"
    calls = len(scripted.requests)
    refused = handle.send("cli:s", "two", wait=True)
    answer = refused.json()
    # Not a provider failure: 429, and when to come back (the guard resets at UTC midnight).
    assert refused.status_code == 429 and answer["status"] == "failed"
    assert 0 < int(refused.headers["Retry-After"]) <= 86_400
    assert answer["error"]["code"] == "spend_limit" and answer["cap"] == "session.max_tokens_per_day"
    assert "550 of session.max_tokens_per_day = 500" in answer["error"]["message"]
    assert len(scripted.requests) == calls  # the model was not called
    # Other sessions have their own budget.
    assert handle.send("cli:other", "hi", wait=True).json()["reply"] == "echo: hi"
    # The budget survives a restart (it is rebuilt from the journal).
    handle.daemon.stop()
    again = start_daemon(session={"max_tokens_per_day": 500})
    assert again.send("cli:s", "three", wait=True).json()["error"]["code"] == "spend_limit"


def test_webhooks_on_their_own_listener(monkeypatch: pytest.MonkeyPatch, start_daemon: StartDaemon) -> None:
    monkeypatch.setenv("CI_TOKEN", "ci-secret-0123456789-0123456789-abcdef")
    hook_port = free_port()
    handle = start_daemon(
        gateway={"webhook_host": "127.0.0.1", "webhook_port": hook_port},
        webhooks={
            "routes": {"ci": {"auth": {"type": "bearer", "secret_env": "CI_TOKEN"}, "text": "$.message"}}
        },
    )
    public = f"http://127.0.0.1:{hook_port}"
    ok = httpx.post(
        f"{public}/webhooks/ci",
        json={"message": "build failed"},
        headers={"Authorization": "Bearer ci-secret-0123456789-0123456789-abcdef"},
        params={"wait": "1"},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    # The control API is not on the public listener, and webhooks are not on the control port.
    assert (
        httpx.get(f"{public}/api/sessions", headers={"Authorization": f"Bearer {handle.token}"}).status_code
        == 404
    )
    assert (
        httpx.post(
            f"{handle.base_url}/webhooks/ci",
            json={},
            headers={"Authorization": "Bearer ci-secret-0123456789-0123456789-abcdef"},
        ).status_code
        == 404
    )
    refused = httpx.post(
        f"{public}/webhooks/ci", json={"message": "x"}, headers={"Authorization": "Bearer wrong"}
    )
    assert refused.status_code == 401 and refused.json()["error"]["code"]


def test_metrics_count_the_turns(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon()
    scripted.enqueue(Reply("ok", usage=(70, 7)))
    handle.send("cli:m", "x", wait=True)
    text = httpx.get(f"{handle.base_url}/metrics").text
    assert 'netclaw_turns_total{outcome="completed"} 1.0' in text
    assert 'netclaw_provider_tokens_total{kind="input"} 70.0' in text
    assert "netclaw_turn_seconds_count 1.0" in text
