"""What a server says about its tools and results, against the real daemon and the SDK fake
as a stdio subprocess: task-required tools are hidden (with a log line), destructive ones
wait for a person and read-only ones never do, and images reach a vision model as image
parts (and stay a note for a model without vision)."""

from __future__ import annotations

import base64
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonHandle, wait_until
from tests.fakes.mcp_fake import PIXEL
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.transcripts import tool_results

REPO_ROOT = Path(__file__).resolve().parents[2]
StartDaemon = Callable[..., DaemonHandle]


def docs(**extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
        "cwd": str(REPO_ROOT),
        **extra,
    }


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def test_a_tool_that_requires_tasks_is_hidden_with_a_log_line(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="netclaw.mcp")
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol="legacy")}})
    assert handle.daemon.mcp is not None
    [server] = handle.daemon.mcp.servers
    assert handle.http.get("/healthz").json()["mcp"]["docs"]["state"] == "up"
    assert handle.send("cli:tasks", "hello", wait=True).status_code == 200
    names = offered(scripted.requests[-1])
    assert "docs__echo" in names and "docs__research" not in names
    assert any(
        "docs__research" in r.getMessage() and "task-augmented execution" in r.getMessage()
        for r in caplog.records
    )
    assert server.status().transport == "stdio"


def test_destructive_tools_wait_for_a_person_and_read_only_ones_never_do(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        mcp={"servers": {"docs": docs()}},
        audiences={"personal": {"approve": ["docs__l*"]}},  # a glob that would catch lookup
    )
    scripted.enqueue(
        Reply(
            tool_calls=[ToolCallSpec("docs__lookup", {"key": "k"}), ToolCallSpec("docs__echo", {"text": "e"})]
        ),
        Reply(text="looked"),
    )
    assert handle.send("cli:hints", "look it up", wait=True).status_code == 200
    assert [r["content"] for r in tool_results(handle, "cli:hints")] == ["value of k", "e"]  # nothing waited
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__wipe", {"path": "/srv"})]), Reply(text="wiped"))
    assert handle.send("cli:hints", "wipe it").status_code == 202
    waiting = wait_until(
        lambda: handle.http.get("/api/sessions/cli:hints/approvals").json(), what="a request"
    )
    assert [w["tool"] for w in waiting] == ["docs__wipe"]
    approval = waiting[0]["id"]
    assert (
        handle.http.post(
            f"/api/sessions/cli:hints/approvals/{approval}", json={"decision": "approve"}
        ).status_code
        == 200
    )
    wait_until(lambda: len(tool_results(handle, "cli:hints")) == 3, what="the approved call")
    assert tool_results(handle, "cli:hints")[-1]["content"] == "wiped /srv"


def test_an_audience_granting_a_destructive_tool_by_name_runs_it_without_asking(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        mcp={"servers": {"docs": docs()}}, audiences={"personal": {"tools": ["docs__wipe", "docs__*"]}}
    )
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__wipe", {"path": "/tmp/x"})]), Reply(text="ok"))
    assert handle.send("cli:granted", "wipe", wait=True).status_code == 200
    assert tool_results(handle, "cli:granted")[-1]["content"] == "wiped /tmp/x"


def test_untrusted_annotations_are_ignored(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(trust_annotations=False)}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__wipe", {"path": "/tmp/y"})]), Reply(text="ok"))
    assert handle.send("cli:untrusted", "wipe", wait=True).status_code == 200
    assert tool_results(handle, "cli:untrusted")[-1]["content"] == "wiped /tmp/y"


def vision_model(scripted: ScriptedOpenAIThread, vision: bool) -> dict[str, Any]:
    return {
        "main": {
            "provider": "local",
            "model": "scripted",
            "context_window": 32768,
            "max_output_tokens": 1024,
            "vision": vision,
        }
    }


def test_an_image_from_a_tool_reaches_a_vision_model_as_an_image_part(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs()}}, models=vision_model(scripted, True))
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__image", {})]), Reply(text="a tiny pixel"))
    assert handle.send("cli:vision", "show me", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:vision")
    assert result["content"] == "an image" and result["files"][0]["mime_type"] == "image/png"
    after = scripted.requests[1]["messages"]
    tool_at = next(i for i, m in enumerate(after) if m["role"] == "tool")
    assert "shown below" in after[tool_at]["content"]
    images = after[tool_at + 1]
    assert images["role"] == "user"
    urls = [p["image_url"]["url"] for p in images["content"] if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PIXEL).decode()]
    # The next turn still shows it (the image is part of the recorded history).
    assert handle.send("cli:vision", "and again?", wait=True).status_code == 200
    assert any(
        m["role"] == "user" and isinstance(m["content"], list) for m in scripted.requests[-1]["messages"]
    )


def test_without_vision_the_model_gets_a_note_instead(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs()}}, models=vision_model(scripted, False))
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__image", {})]), Reply(text="cannot see"))
    assert handle.send("cli:blind", "show me", wait=True).status_code == 200
    after = scripted.requests[1]["messages"]
    [tool] = [m for m in after if m["role"] == "tool"]
    assert "an image" in tool["content"] and "this model cannot see images" in tool["content"]
    assert not any(isinstance(m.get("content"), list) for m in after)
