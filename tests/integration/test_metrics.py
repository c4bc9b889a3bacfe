"""``/metrics`` on the real daemon: Prometheus text, no auth, the families docs/http-api.md lists, and
values that follow what happened (turns by outcome, tokens, commits, approvals waiting)."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, wait_until
from tests.doc_blocks import read
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec

StartDaemon = Callable[..., DaemonHandle]


def scrape(handle: DaemonHandle) -> dict[str, float]:
    response = httpx.get(f"{handle.base_url}/metrics", timeout=5)  # no Authorization header
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values: dict[str, float] = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_metrics_follow_turns_tokens_commits_and_approvals(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(audiences={"personal": {"approve": ["deploy"]}})
    assert handle.send("cli:m1", "hello", wait=True).status_code == 200
    scripted.enqueue(ErrorReply(status=400, message="bad request"))
    assert handle.send("cli:m2", "this one fails", wait=True).status_code == 502
    values = scrape(handle)
    assert values['netclaw_turns_total{outcome="completed"}'] == 1
    assert values['netclaw_turns_total{outcome="failed"}'] == 1
    assert values["netclaw_turn_seconds_count"] == 2
    assert values['netclaw_provider_tokens_total{kind="input"}'] > 0
    assert values['netclaw_provider_tokens_total{kind="output"}'] > 0
    assert values["netclaw_journal_commit_seconds_count"] >= 4
    assert values["netclaw_sessions_resident"] == 2
    assert values["netclaw_history_trims_total"] == 0
    assert values["netclaw_approvals_pending"] == 0
    assert not any(re.search(r"hello|fails", name) for name in values)  # counts only, no content

    async def deploy(args: object, ctx: ToolContext) -> str:
        return "deployed"

    assert handle.daemon.tools is not None
    handle.daemon.tools.register(Tool("deploy", "Deploy.", {"type": "object", "properties": {}}, deploy))
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("deploy", {})]), Reply(text="done"))
    assert handle.send("cli:m3", "deploy").status_code == 202
    wait_until(lambda: scrape(handle)["netclaw_approvals_pending"] == 1, what="the request counted")
    [pending] = handle.http.get("/api/approvals").json()
    handle.http.post(f"/api/sessions/cli:m3/approvals/{pending['id']}", json={"decision": "approve"})
    wait_until(lambda: scrape(handle)['netclaw_turns_total{outcome="completed"}'] == 2, what="the turn")
    assert scrape(handle)["netclaw_approvals_pending"] == 0


def test_mcp_servers_show_as_up_or_down(start_daemon: StartDaemon) -> None:
    handle = start_daemon(mcp={"servers": {"ghost": {"command": "/nonexistent/mcp-server"}}})
    values = scrape(handle)
    assert values['netclaw_mcp_server_up{server="ghost"}'] == 0


def test_the_families_are_the_ones_docs_http_api_lists(start_daemon: StartDaemon) -> None:
    handle = start_daemon()
    text = httpx.get(f"{handle.base_url}/metrics", timeout=5).text
    exposed = set(re.findall(r"^# TYPE (netclaw_\w+) ", text, flags=re.M))
    documented = set(re.findall(r"`(netclaw_\w+)", read("docs/http-api.md")))
    assert exposed == documented, (
        f"exposed but not in docs/http-api.md: {sorted(exposed - documented)}; "
        f"documented but not exposed: {sorted(documented - exposed)}"
    )
