"""Every transport comes back: a real streamable-HTTP (and HTTP+SSE) server written with the
SDK, run as a subprocess, is SIGKILLed between calls and during one, then started again on
the same port; the daemon reconnects within its backoff every time, says so in
``/healthz`` (naming the server and why while it is down) and in its log, and its tools
work again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonHandle, wait_until
from tests.fakes.mcp_fake import HttpProcess
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.transcripts import tool_results

StartDaemon = Callable[..., DaemonHandle]
RECONNECTED_WITHIN_S = 30  # max_reconnect_delay_s 2 → attempts ≤ 2 s apart; generous for a loaded CI


@pytest.fixture
def web(tmp_path: Path) -> Iterator[HttpProcess]:
    server = HttpProcess(env={"FAKE_MCP_MARKER_DIR": str(tmp_path)})
    server.start()
    yield server
    server.stop()


def mcp_health(handle: DaemonHandle) -> dict[str, Any]:
    body: dict[str, Any] = handle.http.get("/healthz").json()
    return body


def wait_state(handle: DaemonHandle, name: str, state: str) -> dict[str, Any]:
    return wait_until(  # type: ignore[no-any-return]
        lambda: (h := mcp_health(handle))["mcp"][name]["state"] == state and h,
        timeout=RECONNECTED_WITHIN_S,
        what=f"{name} {state}",
    )


def echo_works(handle: DaemonHandle, scripted: ScriptedOpenAIThread, sid: str, text: str) -> None:
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__echo", {"text": text})]), Reply(text="ok"))
    assert handle.send(sid, f"echo {text}", wait=True).status_code == 200
    result = tool_results(handle, sid)[-1]
    assert result["content"] == text and not result.get("is_error"), result


def start_with(start_daemon: StartDaemon, url: str, **extra: Any) -> DaemonHandle:
    return start_daemon(
        mcp={"max_reconnect_delay_s": 2, "servers": {"web": {"url": url, "timeout_s": 30, **extra}}}
    )


def test_an_http_server_killed_between_calls_is_reconnected_every_time(
    start_daemon: StartDaemon,
    scripted: ScriptedOpenAIThread,
    web: HttpProcess,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="netclaw.mcp")
    handle = start_with(start_daemon, web.url)
    echo_works(handle, scripted, "cli:between", "first")
    for round_ in (1, 2):
        web.kill()
        down = wait_state(handle, "web", "down")
        status = down["mcp"]["web"]
        assert status["detail"], status  # why, not just "down"
        assert status["restarts"] == round_
        assert handle.http.get("/healthz").status_code == 503
        assert any("MCP server web is down" in p for p in down["problems"]), down
        web.start()  # the same port
        up = wait_state(handle, "web", "up")["mcp"]["web"]
        assert up["restarts"] == round_ and up["tools"] > 0 and "detail" not in up
        assert handle.http.get("/healthz").status_code == 200
        echo_works(handle, scripted, "cli:between", f"after restart {round_}")
    lines = [r.getMessage() for r in caplog.records if r.name == "netclaw.mcp"]
    assert sum("MCP server web is down" in line for line in lines) == 2, lines
    assert sum("MCP server web is up" in line for line in lines) == 3, lines


def test_an_http_server_that_dies_during_a_call_is_reconnected(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, web: HttpProcess
) -> None:
    handle = start_with(start_daemon, web.url)
    # The server exits while answering (its `crash` tool calls os._exit).
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__crash", {})]), Reply(text="it broke"))
    assert handle.send("cli:during", "crash it", wait=True).status_code == 200
    [crashed] = tool_results(handle, "cli:during")
    assert crashed["is_error"] and "went away during web__crash" in crashed["content"], crashed
    wait_state(handle, "web", "down")
    web.start()
    assert wait_state(handle, "web", "up")["mcp"]["web"]["restarts"] == 1
    echo_works(handle, scripted, "cli:during", "back")


def test_an_http_server_killed_from_outside_mid_call_is_reconnected(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, web: HttpProcess, tmp_path: Path
) -> None:
    handle = start_with(start_daemon, web.url)
    for round_ in (1, 2):
        (tmp_path / "slow-started").unlink(missing_ok=True)
        scripted.enqueue(Reply(tool_calls=[ToolCallSpec("web__slow", {"seconds": 20})]), Reply(text="gone"))
        sid = f"cli:killed-{round_}"
        assert handle.send(sid, "take your time").status_code == 202
        wait_until(lambda: (tmp_path / "slow-started").exists(), what="the call to start")
        web.kill()
        wait_until(lambda: len(tool_results(handle, sid)) == 1, timeout=20, what="the call's result")  # noqa: B023
        [result] = tool_results(handle, sid)
        assert result["is_error"] and "went away during web__slow" in result["content"], result
        web.start()
        assert wait_state(handle, "web", "up")["mcp"]["web"]["restarts"] == round_
        echo_works(handle, scripted, sid, f"back {round_}")


def test_a_legacy_sse_server_serves_tools_and_is_reconnected(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    server = HttpProcess(transport="sse")
    server.start()
    try:
        handle = start_with(start_daemon, server.url, transport="sse")
        status = mcp_health(handle)["mcp"]["web"]
        assert status["state"] == "up" and status["transport"] == "sse" and status["tools"] > 10, status
        echo_works(handle, scripted, "cli:sse", "over sse")
        server.kill()
        wait_state(handle, "web", "down")
        server.start()  # the same port
        assert wait_state(handle, "web", "up")["mcp"]["web"]["restarts"] == 1
        echo_works(handle, scripted, "cli:sse", "sse again")
    finally:
        server.stop()
