"""MCP servers as tools, against the real daemon: a fake server written with the SDK runs as
a real stdio subprocess and as a real streamable-HTTP server on 127.0.0.1. The scripted
provider issues the tool calls."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netclaw.security.trust import unlabel
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
StartDaemon = Callable[..., DaemonHandle]


def stdio_server(**extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
        "cwd": str(REPO_ROOT),
        **extra,
    }


@pytest.fixture
def http_server() -> Iterator[str]:
    """The fake as a streamable-HTTP server that wants ``Authorization: Bearer t0k``."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.mcp_fake",
            "http",
            "--require-header",
            "authorization=Bearer t0k",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    yield line.split()[-1]
    proc.terminate()
    proc.wait(10)


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def tool_results(handle: DaemonHandle, sid: str) -> list[dict[str, Any]]:
    """The tool results, their content without the untrusted-content label (netclaw/security/trust.py)
    every successful MCP result wears."""
    found = [m for m in handle.transcript(sid) if m["role"] == "tool"]
    for m in found:
        assert m.get("is_error") or m["content"].startswith("<untrusted-content "), m["content"]
    return [{**m, "content": unlabel(m["content"])} for m in found]


def test_stdio_and_http_servers_serve_tools_to_the_model(
    start_daemon: StartDaemon,
    scripted: ScriptedOpenAIThread,
    http_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NETCLAW_TEST_DOCS_TOKEN", "docs-secret")
    monkeypatch.setenv("NETCLAW_TEST_WEB_AUTH", "Bearer t0k")
    handle = start_daemon(
        mcp={
            "servers": {
                "docs": stdio_server(env_env={"DOCS_TOKEN": "NETCLAW_TEST_DOCS_TOKEN"}),
                "web": {
                    "url": http_server,
                    "headers_env": {"Authorization": "NETCLAW_TEST_WEB_AUTH"},
                    "tools": ["add"],
                },
            }
        }
    )
    health = handle.http.get("/healthz")
    assert health.status_code == 200, health.text
    assert health.json()["mcp"]["docs"]["state"] == "up" and health.json()["mcp"]["web"]["tools"] == 1

    sid = "cli:mcp"
    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("docs__env", {"name": "DOCS_TOKEN"}),
                ToolCallSpec("web__add", {"a": 2, "b": 40}),
                ToolCallSpec("docs__fail", {"message": "the index is stale"}),
                ToolCallSpec("docs__image", {}),
                ToolCallSpec("docs__big", {"n": 100_000}),
                ToolCallSpec("docs__add", {"a": "two", "b": 1}),
                ToolCallSpec("web__echo", {"text": "not on the allowlist"}),
            ]
        ),
        Reply(text="done"),
    )
    assert handle.send(sid, "use the tools", wait=True).status_code == 200
    first = scripted.requests[0]
    assert {"docs__env", "docs__add", "docs__toggle", "web__add"} <= offered(first)
    assert "web__echo" not in offered(first)  # not on that server's allowlist
    env, add, fail, image, big, bad, hidden = (r["content"] for r in tool_results(handle, sid))
    # env_env reached the server: it answered with the value, which as a secret the config
    # names never reaches the model or the journal.
    assert env == "[redacted: Daemon Secret]"
    assert add == "42"
    assert "the index is stale" in fail
    assert image == "an image"  # the picture itself is kept with the result (the model here has no vision)
    assert [f["mime_type"] for f in tool_results(handle, sid)[3]["files"]] == ["image/png"]
    assert len(big) < 70_000 and "[output cut: 100,000 characters" in big
    assert "invalid arguments for docs__add" in bad and "'two' is not of type 'integer'" in bad
    assert "no tool named 'web__echo'" in hidden
    flags = [r.get("is_error", False) for r in tool_results(handle, sid)]
    assert flags == [False, False, True, False, False, True, True]


def test_a_server_that_dies_is_restarted_and_its_tools_come_back(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = tmp_path / "starts"
    monkeypatch.setenv("FAKE_MCP_START_FILE", str(starts))
    # The server sees only what env_env passes (and the SDK's safe defaults).
    handle = start_daemon(
        mcp={"servers": {"docs": stdio_server(env_env={"FAKE_MCP_START_FILE": "FAKE_MCP_START_FILE"})}}
    )
    assert len(starts.read_text().splitlines()) == 1
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__crash", {})]), Reply(text="it broke"))
    assert handle.send("cli:crash", "crash it", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:crash")
    assert result["is_error"] and "went away during docs__crash" in result["content"]
    wait_until(lambda: len(starts.read_text().splitlines()) == 2, timeout=10, what="a restart")
    health = wait_until(  # up again within the restart backoff
        lambda: (h := handle.http.get("/healthz").json())["mcp"]["docs"]["state"] == "up" and h,
        timeout=10,
        what="up again",
    )
    assert health["mcp"]["docs"]["restarts"] == 1 and health["status"] == "ok"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__echo", {"text": "back"})]), Reply(text="ok"))
    assert handle.send("cli:crash", "again", wait=True).status_code == 200
    assert tool_results(handle, "cli:crash")[-1]["content"] == "back"


def test_a_server_that_cannot_start_degrades_health_not_the_daemon(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        mcp={"servers": {"ghost": {"command": "/nonexistent/mcp-server"}, "docs": stdio_server()}}
    )
    health = handle.http.get("/healthz")
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "degraded" and "MCP server ghost is down" in body["reason"]
    assert body["mcp"]["docs"]["state"] == "up"
    assert handle.send("cli:still", "hello", wait=True).json()["reply"] == "echo: hello"
    assert not any(name.startswith("ghost__") for name in offered(scripted.requests[-1]))


def test_a_tool_list_change_reaches_the_next_model_call(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": stdio_server()}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__toggle", {})]), Reply(text="toggled"))
    assert handle.send("cli:toggle", "toggle", wait=True).status_code == 200
    assert "docs__extra" not in offered(scripted.requests[0])
    assert handle.daemon.tools is not None
    wait_until(lambda: "docs__extra" in handle.daemon.tools.names(), what="the new tool")  # type: ignore[union-attr]
    assert handle.send("cli:toggle", "and now?", wait=True).status_code == 200
    assert "docs__extra" in offered(scripted.requests[-1])


def test_cancelling_a_turn_cancels_a_running_mcp_call(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MCP_MARKER_DIR", str(tmp_path))
    handle = start_daemon(
        mcp={
            "servers": {
                "docs": stdio_server(timeout_s=30, env_env={"FAKE_MCP_MARKER_DIR": "FAKE_MCP_MARKER_DIR"})
            }
        }
    )
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__slow", {"seconds": 25})]))
    assert handle.send("cli:slow", "take your time").status_code == 202
    wait_until(lambda: (tmp_path / "slow-started").exists(), what="the call to start")
    started = time.monotonic()
    assert handle.http.post("/api/sessions/cli:slow/cancel").json()["cancelled"] is True
    assert time.monotonic() - started < 5  # not the call's 25 s
    [result] = tool_results(handle, "cli:slow")
    assert result["is_error"]
    # The server was told: its handler stopped (cancelled, not finished).
    wait_until(lambda: (tmp_path / "slow-cancelled").exists(), what="the server's handler to be cancelled")
    assert not (tmp_path / "slow-finished").exists()
    # The server still answers other calls afterwards.
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__echo", {"text": "still here"})]), Reply(text="ok"))
    assert handle.send("cli:slow", "hello?", wait=True).status_code == 200
    assert tool_results(handle, "cli:slow")[-1]["content"] == "still here"


def test_a_call_that_outlives_its_timeout_gets_an_error_result(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": stdio_server(timeout_s=0.5)}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__slow", {"seconds": 3})]), Reply(text="too slow"))
    assert handle.send("cli:timeout", "slow please", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:timeout")
    assert result["is_error"] and "did not answer within 0.5s" in result["content"]
