"""The daemon on PostgreSQL (``journal.backend`` = ``postgres``): the same behaviour as on
SQLite — turns journaled, history kept across a restart, a webhook delivery recorded
once — with every store on a real server (each store's own contract: tests/unit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from netclaw.config import Settings
from tests.conftest import DaemonHandle
from tests.integration.test_sessions import chat_rows
from tests.integration.test_webhooks import deliver, routes, secrets  # noqa: F401 - the fixture


@pytest.fixture
def on_postgres(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("NETCLAW_TEST_PG_DSN", pg_dsn)
    return {
        "journal": {"backend": "postgres", "dsn_env": "NETCLAW_TEST_PG_DSN"},
        "cluster": {"node_id": "n1"},
    }


def test_turns_and_history_live_in_postgres_and_survive_a_restart(
    start_daemon: Callable[..., DaemonHandle], on_postgres: dict[str, Any], pg_dsn: str
) -> None:
    first = start_daemon(**on_postgres)
    assert first.send("cli:pg", "one", wait=True).json()["reply"] == "echo: one"
    assert first.http.get("/healthz").json()["status"] == "ok"
    first.stop()

    second = start_daemon(**on_postgres)
    response = second.send("cli:pg", "two", wait=True)
    assert response.status_code == 200 and response.json()["turn"] == 2
    assert chat_rows(second.transcript("cli:pg")) == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
        ("assistant", "echo: two"),
    ]
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT turns, last_seq FROM sessions WHERE id = 'cli:pg'").fetchone()
    assert row is not None and row[0] == 2 and row[1] > 0


def test_a_webhook_delivery_with_a_key_is_recorded_once_on_postgres(
    secrets: None,  # noqa: F811
    start_daemon: Callable[..., DaemonHandle],
    on_postgres: dict[str, Any],
) -> None:
    handle = start_daemon(webhooks=routes(), **on_postgres)
    payload = {"thread": "t1", "text": "disk full"}
    first = deliver(handle, payload, key="once", wait=True)
    again = deliver(handle, payload, key="once", wait=True)
    assert first.status_code == 200, first.text
    assert again.status_code == 200 and again.json()["session_id"] == first.json()["session_id"]
    rows = chat_rows(handle.transcript(first.json()["session_id"]))
    assert [role for role, _ in rows] == ["user", "assistant"], rows  # one input, one reply
    assert rows[0][1].endswith("disk full")


def test_postgres_without_its_dsn_is_a_config_error_naming_the_variable(
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from netclaw.errors import ConfigError

    monkeypatch.delenv("NETCLAW_UNSET_DSN", raising=False)
    with pytest.raises(ConfigError, match="NETCLAW_UNSET_DSN"):
        start_daemon(journal={"backend": "postgres", "dsn_env": "NETCLAW_UNSET_DSN"})


def test_settings_name_the_missing_dsn_env() -> None:
    with pytest.raises(ValueError, match="dsn_env"):
        Settings(journal={"backend": "postgres"})
