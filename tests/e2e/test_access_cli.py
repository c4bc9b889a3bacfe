"""``netclaw tokens`` and ``netclaw audit`` as documented, against a daemon subprocess: a
token made with ``tokens add NAME --role R`` works with its role's rights; the audit trail
lists the tool run and the token change, in text and as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.conftest import DaemonProcess, Setup, run_cli, subprocess_env
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("setup", [{"roles": {"reader": {"chat": False}}}], indirect=True)
def test_tokens_and_audit_from_the_command_line(
    setup: Setup, start: Callable[[], DaemonProcess], scripted: ScriptedOpenAIThread
) -> None:
    daemon = start()
    env = subprocess_env(NETCLAW_CONFIG=str(setup.config))
    made = run_cli("tokens", "add", "dashboard", "--role", "reader", env=env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("nct_") and "role reader" in made.stdout
    listed = run_cli("tokens", "--json", env=env)
    assert [(t["name"], t["role"]) for t in json.loads(listed.stdout)] == [("dashboard", "reader")]
    wrong = run_cli("tokens", "add", "x", "--role", "nobody", env=env)
    assert wrong.returncode == 1 and "must be one of the configured roles" in wrong.stderr

    base = f"http://127.0.0.1:{setup.port}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as reader:
        assert reader.get("/api/sessions").status_code == 200
        assert reader.post("/api/sessions/cli:x/messages", json={"text": "hi"}).status_code == 403

    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="noon"))
    assert daemon.post("cli:audited", "what time is it", wait=True).status_code == 200

    text = run_cli("audit", env=env)
    assert text.returncode == 0, text.stderr
    assert "token_added" in text.stdout and "name=dashboard" in text.stdout
    assert "tool_run" in text.stdout and "tool=current_time" in text.stdout and "outcome=ok" in text.stdout
    one = json.loads(run_cli("audit", "--session", "cli:audited", "--json", env=env).stdout)
    assert [(e["kind"], e["detail"]["tool"]) for e in one] == [("tool_run", "current_time")]
    later = json.loads(run_cli("audit", "--since", "2999-01-01", "--json", env=env).stdout)
    assert later == []

    removed = run_cli("tokens", "rm", "dashboard", env=env)
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert "token_removed" in run_cli("audit", env=env).stdout
