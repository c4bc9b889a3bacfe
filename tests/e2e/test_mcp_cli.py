"""``netclaw mcp …`` as written in the README and docs/mcp.md, against a real daemon subprocess: the
operator's views (list, tools, resources, prompts), and an OAuth login against a local
authorization server written with the SDK (dynamic client registration, authorization code
+ PKCE, short-lived tokens the daemon refreshes)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.security.trust import unlabel
from tests.conftest import wait_until
from tests.e2e.conftest import (
    READY_TIMEOUT_S,
    REPO_ROOT,
    DaemonProcess,
    Daemons,
    Setup,
    free_port,
    run_cli,
    subprocess_env,
)
from tests.fakes.mcp_fake import HttpProcess
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

pytestmark = pytest.mark.slow


def cli(site: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("mcp", *args, "--config", str(site.config))


def start_degraded(daemons: Daemons, site: Setup) -> DaemonProcess:
    """A daemon whose /healthz stays 503 (a server is down on purpose): ready once it answers."""
    daemon = daemons.spawn(site.config, site.data_dir, site.port)

    def answers() -> bool:
        try:
            return httpx.get(f"{daemon.base_url}/healthz", timeout=1.0).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout=READY_TIMEOUT_S, what="the daemon to answer")
    token = (site.data_dir / "control.token").read_text().strip()
    daemon.http = httpx.Client(
        base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    return daemon


def docs() -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_fake", "stdio"], "cwd": str(REPO_ROOT)}


def test_the_operators_views(tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons) -> None:
    site = Setup(
        tmp_path, scripted.base_url, mcp={"servers": {"docs": docs(), "ghost": {"command": "/nonexistent/x"}}}
    )
    start_degraded(daemons, site)
    listed = cli(site, "list")
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split(": ", 1) for line in listed.stdout.splitlines())
    assert lines["docs"].startswith(
        "up (stdio), 18 tool(s) [protocol 2026-07-28; tools, resources, prompts, completions"
    )
    assert lines["ghost"].startswith("down (stdio)") and "nonexistent" in lines["ghost"]
    as_json = json.loads(cli(site, "list", "--json").stdout)
    assert as_json["docs"]["state"] == "up" and as_json["ghost"]["restarts"] == 0

    tools = cli(site, "tools", "docs").stdout
    assert "wipe → docs__wipe [destructive]" in tools and "lookup → docs__lookup [read-only]" in tools
    assert "    Delete everything under path (says destructiveHint)." in tools
    assert "fake://doc/readme  readme (text/markdown)" in cli(site, "resources", "docs").stdout
    assert "fake://note/{name}  note (template)" in cli(site, "resources", "docs").stdout
    assert "greet(name, style?) — Greet someone." in cli(site, "prompts", "docs").stdout

    down = cli(site, "tools", "ghost")
    assert down.returncode == 1 and "MCP server ghost is down" in down.stderr
    unknown = cli(site, "prompts", "nope")
    assert unknown.returncode == 1 and "no MCP server named 'nope'" in unknown.stderr
    assert cli(site, "tools").returncode == 2


@pytest.fixture
def oauth_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    events = tmp_path / "as-events"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_oauth_fake", "--token-ttl", "4", "--events", str(events)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    yield line.split()[-1], events
    proc.terminate()
    proc.wait(10)


def count(events: Path, what: str) -> int:
    return events.read_text().splitlines().count(what) if events.exists() else 0


def test_oauth_login_stores_a_token_the_daemon_uses_and_refreshes(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, oauth_server: tuple[str, Path]
) -> None:
    url, events = oauth_server
    callback_port = free_port()
    site = Setup(
        tmp_path,
        scripted.base_url,
        mcp={
            "max_reconnect_delay_s": 2,
            "servers": {"web": {"url": url, "oauth": {"redirect_port": callback_port}}},
        },
    )
    daemon = start_degraded(daemons, site)
    before = cli(site, "list").stdout
    assert "web: down (http)" in before and "needs a login: run `netclaw mcp login web`" in before
    assert count(events, "register") == 0  # the daemon asked nobody for anything

    login = subprocess.Popen(
        [sys.executable, "-m", "netclaw.cli", "mcp", "login", "web", "--config", str(site.config)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert login.stdout is not None
        address = None
        while address is None:
            line = login.stdout.readline()
            assert line, login.stderr.read() if login.stderr else "the login ended early"
            if line.strip().startswith("http://"):
                address = line.strip()
        assert re.search(r"code_challenge_method=S256", address) and "client_id=" in address
        # The person's browser: the server approves and sends it back to the login's callback.
        page = httpx.get(address, follow_redirects=True, timeout=30)
        assert page.status_code == 200 and "you are logged in" in page.text
        out, err = login.communicate(timeout=60)
    finally:
        if login.poll() is None:
            login.kill()
    assert login.returncode == 0, err
    assert "Logged in to web (1 tool(s))" in out and "The running daemon is connecting with it now." in out
    token = site.data_dir / "mcp-oauth" / "web.json"
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(token.parent).st_mode) == 0o700
    assert count(events, "register") == 1 and count(events, "token") == 1

    wait_until(lambda: daemon.health()["mcp"]["web"]["state"] == "up", timeout=20, what="web up")
    first = json.loads(token.read_text())["tokens"]["access_token"]
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__whoami", {})]), Reply(text="it is us"))
    assert daemon.post("cli:oauth", "who am I?", wait=True).status_code == 200
    client_id = json.loads(token.read_text())["client_info"]["client_id"]
    [result] = [m for m in daemon.session("cli:oauth")["messages"] if m["role"] == "tool"]
    assert unlabel(result["content"]) == client_id

    # The access token (4 s) expires: the next request refreshes it first.
    expires_at = json.loads(token.read_text())["expires_at"]
    wait_until(lambda: time.time() > expires_at, timeout=10, what="the access token to expire")
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__whoami", {})]), Reply(text="still us"))
    assert daemon.post("cli:oauth", "and now?", wait=True).status_code == 200
    results = [m for m in daemon.session("cli:oauth")["messages"] if m["role"] == "tool"]
    assert unlabel(results[-1]["content"]) == client_id and not results[-1].get("is_error")
    assert count(events, "refresh") >= 1 and count(events, "token") == 1
    assert json.loads(token.read_text())["tokens"]["access_token"] != first
    assert daemon.health()["mcp"]["web"]["restarts"] == 0


def test_login_needs_an_oauth_section(tmp_path: Path, scripted: ScriptedOpenAIThread) -> None:
    site = Setup(tmp_path, scripted.base_url, mcp={"servers": {"docs": docs()}})
    done = cli(site, "login", "docs")
    assert done.returncode == 1 and "has no `oauth` section" in done.stderr
    assert cli(site, "login", "nope").returncode == 1


def test_an_http_server_restarted_mid_session_keeps_serving(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    """docs/mcp.md's HTTP example through the daemon subprocess: killed, back on the same port, used again."""
    web = HttpProcess()
    web.start()
    try:
        site = Setup(
            tmp_path,
            scripted.base_url,
            mcp={"max_reconnect_delay_s": 2, "servers": {"web": {"url": web.url}}},
        )
        daemon = daemons.start(site.config, site.data_dir, site.port)
        web.kill()
        wait_until(lambda: daemon.health()["mcp"]["web"]["state"] == "down", timeout=30, what="down")
        assert "web: down (http), 1 restart(s): " in cli(site, "list").stdout
        web.start()
        wait_until(lambda: daemon.health()["mcp"]["web"]["state"] == "up", timeout=30, what="up")
        scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__echo", {"text": "hi"})]), Reply(text="ok"))
        assert daemon.post("cli:web", "echo", wait=True).status_code == 200
        results = [m for m in daemon.session("cli:web")["messages"] if m["role"] == "tool"]
        assert unlabel(results[-1]["content"]) == "hi"
    finally:
        web.stop()


def test_questions_from_the_shell(tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons) -> None:
    site = Setup(tmp_path, scripted.base_url, mcp={"servers": {"docs": docs()}})
    daemon = daemons.start(site.config, site.data_dir, site.port)
    assert run_cli("questions", "--config", str(site.config)).stdout.strip() == "no tool asks anything"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="signed up"))
    daemon.acked("cli:shell", "sign me up")

    def listed() -> str:
        out = run_cli("questions", "--config", str(site.config)).stdout
        return out if out.startswith("q-") else ""

    shown = wait_until(listed, timeout=20, what="the question")
    qid = shown.split()[0]
    assert "cli:shell turn 1: MCP server docs (docs__signup) asks: Which email address" in shown
    assert f"answer: netclaw questions answer {qid} email=… age?=…" in shown
    bad = run_cli("questions", "answer", qid, "age=x", "--config", str(site.config))
    assert bad.returncode == 1 and "email" in bad.stderr + bad.stdout
    done = run_cli("questions", "answer", qid, "email=sam@example.org", "age=7", "--config", str(site.config))
    assert done.returncode == 0 and f"accept: MCP server docs ({qid})" in done.stdout, done.stderr
    wait_until(
        lambda: any(m["role"] == "tool" for m in daemon.session("cli:shell")["messages"]),
        timeout=20,
        what="result",
    )
    [result] = [m for m in daemon.session("cli:shell")["messages"] if m["role"] == "tool"]
    assert unlabel(result["content"]) == "signed up sam@example.org (age 7)"
    assert run_cli("questions", "decline", qid, "--config", str(site.config)).returncode == 1  # gone
