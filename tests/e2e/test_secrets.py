"""Secrets kept out of transcripts, end to end: a key pasted into a message and a token a
tool returns are redacted in the journal (read straight from the SQLite file), in every
request the provider receives, and in ``netclaw sessions show``; the person is told."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import DaemonProcess, Setup, run_cli, subprocess_env
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

pytestmark = pytest.mark.slow

PASTED = "sk-ant-api03-" + "Zx9" * 20  # an Anthropic-shaped key
GITHUB = "ghp_" + "a1B2c3D4e5" * 4  # what the "tool" reads from a file
FILE = "deploy.env"


def journal_text(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT payload FROM events").fetchall()
        snaps = conn.execute("SELECT * FROM snapshots").fetchall()
    finally:
        conn.close()
    return "\n".join(p for (p,) in rows) + repr(snaps)


@pytest.mark.parametrize(
    "setup", [{"audiences": {"personal": {"tools": ["read_file", "current_time"]}}}], indirect=True
)
def test_a_pasted_key_and_a_token_in_a_tool_result_are_redacted_everywhere(
    setup: Setup, start: Callable[[], DaemonProcess], scripted: ScriptedOpenAIThread
) -> None:
    workspace = setup.data_dir.parent / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / FILE).write_text(f"GITHUB_TOKEN={GITHUB}\nREGION=eu\n")
    daemon = start()
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": FILE})]),
        Reply(text="The region is eu."),
    )
    sid = "cli:secrets"
    response = daemon.post(sid, f"here is my key {PASTED} and please read {FILE}", wait=True)
    assert response.status_code == 200, response.text

    db = setup.data_dir / "netclaw.db"
    stored = journal_text(db)
    assert PASTED not in stored and GITHUB not in stored
    assert "[redacted: Anthropic Key]" in stored and "[redacted: GitHub Token]" in stored
    assert "REGION=eu" in stored  # the rest of the result is kept

    sent = json.dumps(scripted.requests)
    assert PASTED not in sent and GITHUB not in sent
    assert "[redacted: Anthropic Key]" in sent and "[redacted: GitHub Token]" in sent

    env = subprocess_env(NETCLAW_CONFIG=str(setup.config))
    shown = run_cli("sessions", "show", sid, env=env)
    assert shown.returncode == 0, shown.stderr
    assert PASTED not in shown.stdout and GITHUB not in shown.stdout
    assert "[redacted: Anthropic Key]" in shown.stdout
    context = run_cli("sessions", "show", sid, "--context", env=env)
    assert PASTED not in context.stdout and GITHUB not in context.stdout
