"""``netclaw migrate-journal --to postgres``: a node's SQLite history, moved into PostgreSQL,
goes on there as if nothing happened — and the command refuses what would lose or mix data.
The DSN is in NETCLAW_PG_DSN, the name docs/scale-out.md tells people to export."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from netclaw.cli import main
from netclaw.persistence import NewMemory
from tests.conftest import DaemonHandle, settings_data, write_config
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.integration.test_sessions import chat_rows


@pytest.fixture
def config(tmp_path: Path, scripted: ScriptedOpenAIThread) -> Path:
    return write_config(tmp_path / "netclaw.json", settings_data(tmp_path / "data", scripted.base_url))


def migrate(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(
        ["migrate-journal", "--to", "postgres", "--config", str(config), "--dsn-env", "NETCLAW_PG_DSN"]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_migrated_journal_goes_on_in_postgres(
    start_daemon: Callable[..., DaemonHandle],
    config: Path,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NETCLAW_PG_DSN", pg_dsn)
    before = start_daemon()
    for text in ("one", "two"):
        assert before.send("cli:moved", text, wait=True).status_code == 200
    io, memory = before.daemon.io, before.daemon.memory
    assert io is not None and memory is not None
    io.run(
        memory.add(
            [NewMemory("the deploy key rotates on Fridays")], session_id="cli:moved", audience="personal"
        )
    )
    added = before.http.post("/api/sessions/cli:moved/reminders", json={"text": "check it", "in_s": 3600})
    assert added.status_code == 201, added.text
    transcript = chat_rows(before.transcript("cli:moved"))
    before.stop()

    code, out, err = migrate(config, capsys)
    assert code == 0, err
    assert "events: " in out and "sessions: 1 row(s)" in out and "memories: 1 row(s)" in out
    assert 'next: set "journal": {"backend": "postgres", "dsn_env": "NETCLAW_PG_DSN"}' in out

    after = start_daemon(journal={"backend": "postgres", "dsn_env": "NETCLAW_PG_DSN"})
    assert chat_rows(after.transcript("cli:moved")) == transcript
    third = after.send("cli:moved", "three", wait=True)
    assert third.status_code == 200 and third.json()["turn"] == 3
    memories = after.http.get("/api/memories", params={"q": "deploy key"}).json()
    assert [m["text"] for m in memories] == ["the deploy key rotates on Fridays"]
    reminders = after.http.get("/api/reminders", params={"session": "cli:moved"}).json()
    assert [r["text"] for r in reminders] == ["check it"]
    assert after.http.get("/api/usage").json()[0]["turns"] == 3

    after.stop()
    code, _, err = migrate(config, capsys)  # a second time: the target is no longer empty
    assert code == 1 and "already holds" in err and "migrate into an empty database" in err


def test_migrating_refuses_while_the_daemon_runs_and_names_a_missing_dsn(
    start_daemon: Callable[..., DaemonHandle],
    config: Path,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("NETCLAW_PG_DSN", raising=False)
    code, _, err = migrate(config, capsys)
    assert code == 1 and "NETCLAW_PG_DSN (the PostgreSQL DSN) is empty or unset" in err

    monkeypatch.setenv("NETCLAW_PG_DSN", pg_dsn)
    running = start_daemon()
    running.send("cli:live", "hello", wait=True)
    code, _, err = migrate(config, capsys)
    assert code == 1 and "another netclaw daemon is already using" in err
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT COUNT(*) FROM events").fetchone()
    assert row is not None and row[0] == 0


def test_no_sqlite_journal_is_a_clear_error(
    config: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NETCLAW_PG_DSN", pg_dsn)
    code, _, err = migrate(config, capsys)
    assert code == 1 and "there is no SQLite journal at" in err
