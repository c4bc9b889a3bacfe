"""Beyond tools, against the real daemon and the SDK fake as a stdio subprocess (both
protocol eras): resources as the model's tools, the workspace as the server's root, and
prompts as the ``/prompt`` chat command (listing, missing arguments with the server's
completions, several messages and an image)."""

from __future__ import annotations

import base64
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
ERAS = ["auto", "legacy"]  # 2026-07-28 (server/discover), and the initialize handshake


def docs(**extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
        "cwd": str(REPO_ROOT),
        **extra,
    }


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


@pytest.mark.parametrize("protocol", ERAS)
def test_resources_are_tools_the_model_can_list_and_read(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, protocol: str
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol)}})
    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("docs__list_resources", {}),
                ToolCallSpec("docs__read_resource", {"uri": "fake://doc/readme"}),
                ToolCallSpec("docs__read_resource", {"uri": "fake://note/todo"}),
                ToolCallSpec("docs__read_resource", {"uri": "fake://nothing"}),
                ToolCallSpec("docs__read_resource", {}),
            ]
        ),
        Reply(text="read"),
    )
    assert handle.send("cli:res", "what is there?", wait=True).status_code == 200
    assert {"docs__list_resources", "docs__read_resource"} <= offered(scripted.requests[0])
    listing, readme, note, missing, bad = tool_results(handle, "cli:res")
    assert "fake://doc/readme (readme, text/markdown): How it works." in listing["content"]
    assert "template fake://note/{name} (note, text/plain): A note by name." in listing["content"]
    assert readme["content"] == "[resource fake://doc/readme]\n# Fake\nIt answers."
    assert note["content"].endswith("note todo")
    assert missing["is_error"] and "reading fake://nothing failed" in missing["content"]
    assert bad["is_error"] and "'uri' is a required property" in bad["content"]


def test_a_resource_image_reaches_a_vision_model(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    models = {"main": {"provider": "local", "model": "scripted", "context_window": 32768, "vision": True}}
    handle = start_daemon(mcp={"servers": {"docs": docs()}}, models=models)
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("docs__read_resource", {"uri": "fake://pixel"})]), Reply(text="ok")
    )
    assert handle.send("cli:pixel", "show the pixel", wait=True).status_code == 200
    parts = scripted.requests[1]["messages"][-1]["content"]
    assert {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PIXEL).decode()},
    } in parts


def test_resource_tools_can_be_turned_off(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(resources=False)}})
    assert handle.send("cli:nores", "hi", wait=True).status_code == 200
    assert not offered(scripted.requests[0]) & {"docs__list_resources", "docs__read_resource"}


@pytest.mark.parametrize("protocol", ERAS)
def test_the_workspace_is_the_servers_root(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, protocol: str, tmp_path: Path
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol)}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__roots", {})]), Reply(text="ok"))
    assert handle.send("cli:roots", "where may you work?", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:roots")
    assert result["content"] == (tmp_path / "workspace").resolve().as_uri(), result


def test_a_server_is_offered_the_folders_its_roots_list(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, tmp_path: Path
) -> None:
    # server-filesystem takes any roots it is offered in place of its own directories: list
    # them (or roots false) and it keeps working where it was told to.
    notes, docs_dir = tmp_path / "notes", tmp_path / "docs"
    handle = start_daemon(
        mcp={"servers": {"docs": docs(roots=[str(notes), str(docs_dir)], protocol="legacy")}}
    )
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__roots", {})]), Reply(text="ok"))
    assert handle.send("cli:listed", "where may you work?", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:listed")
    assert result["content"].splitlines() == [notes.resolve().as_uri(), docs_dir.resolve().as_uri()], result


def test_a_server_without_roots_is_told_none(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(roots=False, protocol="legacy")}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__roots", {})]), Reply(text="ok"))
    assert handle.send("cli:noroots", "where?", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:noroots")
    assert result["is_error"] and "root" in result["content"].lower(), result


def post(handle: DaemonHandle, sid: str, text: str, wait: bool = True) -> dict[str, Any]:
    response = handle.http.post(
        f"/api/sessions/{sid}/messages" + ("?wait=1" if wait else ""), json={"text": text}
    )
    assert response.status_code in (200, 202), response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("protocol", ERAS)
def test_prompts_are_listed_explained_and_sent(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, protocol: str
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol)}})
    sid = "cli:prompts"
    listing = post(handle, sid, "/prompt")
    assert listing["command"] == "prompt"
    assert "docs:greet(name, style?) — Greet someone." in listing["notice"]
    assert "docs:review(code)" in listing["notice"]
    usage = post(handle, sid, "/prompt docs:greet")["notice"]
    assert "needs name" in usage and "for example Ann, Bob" in usage
    assert "Send: /prompt docs:greet name=…" in usage
    assert "no prompt named 'nope'" in post(handle, sid, "/prompt docs:nope")["notice"]
    assert "no argument 'mood'" in post(handle, sid, "/prompt docs:greet Ann mood=x")["notice"]
    assert "There is no MCP server named 'web'" in post(handle, sid, "/prompt web:greet")["notice"]
    assert not scripted.requests  # nothing reached the model so far

    sent = post(handle, sid, '/prompt docs:greet "Ann Lee" style=formal')
    assert sent["reply"] == "echo: Please greet Ann Lee in a formal way."
    user = [m for m in handle.transcript(sid) if m["role"] == "user"][-1]
    assert user["content"] == "Please greet Ann Lee in a formal way."

    post(handle, sid, "!prompt docs:review print(1)")
    user = [m for m in handle.transcript(sid) if m["role"] == "user"][-1]
    assert user["content"] == "User: Review this: print(1)\n\nAssistant: What should I look for?"
    assert [f["mime_type"] for f in user["files"]] == ["image/png"]


def test_prompts_are_not_for_public_sessions_and_bad_quotes_are_refused(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETCLAW_TEST_HOOK", "s3cret")
    handle = start_daemon(
        mcp={"servers": {"docs": docs()}},
        webhooks={"routes": {"hook": {"auth": {"type": "bearer", "secret_env": "NETCLAW_TEST_HOOK"}}}},
    )
    response = handle.http.post("/api/sessions/cli:q/messages", json={"text": '/prompt docs:greet "Ann'})
    assert response.status_code == 400 and "cannot read the arguments" in response.json()["error"]["message"]
    public = post(handle, "webhook:hook:x", "/prompt")
    assert public["notice"] == "MCP prompts are not available in public conversations."


def test_new_roots_are_announced_and_served(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MCP_MARKER_DIR", str(tmp_path))
    env = {"FAKE_MCP_MARKER_DIR": "FAKE_MCP_MARKER_DIR"}
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol="legacy", env_env=env)}})
    hub = handle.daemon.mcp
    assert hub is not None and handle.daemon.io is not None
    elsewhere = tmp_path / "elsewhere"
    handle.daemon.io.run(hub.set_roots([elsewhere]), 10)
    wait_until(lambda: (tmp_path / "roots-changed").exists(), what="roots/list_changed")
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__roots", {})]), Reply(text="ok"))
    assert handle.send("cli:moved", "where now?", wait=True).status_code == 200
    assert tool_results(handle, "cli:moved")[0]["content"] == elsewhere.as_uri()
