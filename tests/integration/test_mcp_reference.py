"""netclaw against the protocol's reference server, ``@modelcontextprotocol/server-everything``
(Node, written by the MCP maintainers, not by us), through the real daemon: over stdio and
over streamable HTTP (killed and started again on the same port).

Every capability it exercises, and what netclaw answers: tools with annotations (read-only
ones never ask), the task-required ``simulate-research-query`` (hidden), an image (shown to
a vision model), annotated content (a user-only image left out), structured content,
roots (the workspace), progress (``tool_progress``), form and URL elicitation (asked of the
person), sampling (allowed by a person, answered by the session's model), resources and
templates (the resource tools), prompts with arguments and completions (``/prompt``).

The server comes from npm: ``.ci/run`` installs it into ``.ci-npm/`` (or point
``NETCLAW_TEST_EVERYTHING`` at its ``mcp-server-everything``); without it these tests skip.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonHandle, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_sse import SseStream, sse_streams
from tests.transcripts import tool_results

REPO_ROOT = Path(__file__).resolve().parents[2]
StartDaemon = Callable[..., DaemonHandle]


def _everything() -> Path | None:
    given = os.environ.get("NETCLAW_TEST_EVERYTHING")
    found = (
        Path(given) if given else REPO_ROOT / ".ci-npm" / "node_modules" / ".bin" / "mcp-server-everything"
    )
    return found if found.exists() and shutil.which("node") else None


EVERYTHING = _everything()
pytestmark = pytest.mark.skipif(
    EVERYTHING is None,
    reason="the MCP reference server is not installed: `npm install --prefix .ci-npm "
    "@modelcontextprotocol/server-everything@2026.8.31` (as .ci/run does), or set NETCLAW_TEST_EVERYTHING",
)


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def every(**extra: Any) -> dict[str, Any]:
    return {"command": "node", "args": [str(EVERYTHING), "stdio"], **extra}


VISION = {"main": {"provider": "local", "model": "scripted", "context_window": 32768, "vision": True}}


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def form_values(schema: dict[str, Any]) -> dict[str, Any]:
    """An answer to any elicitation form: each field's default, else a plausible value."""
    values: dict[str, Any] = {}
    for name, field in schema.get("properties", {}).items():
        if "default" in field:
            values[name] = field["default"]
        elif "enum" in field:
            values[name] = field["enum"][0]
        elif "oneOf" in field:
            values[name] = field["oneOf"][0]["const"]
        elif field.get("type") == "boolean":
            values[name] = True
        elif field.get("type") in ("integer", "number"):
            values[name] = field.get("minimum", 3)
        elif field.get("type") == "array":
            values[name] = [field["items"]["enum"][0]] if "enum" in field.get("items", {}) else []
        elif field.get("format") == "email":
            values[name] = "ann@example.org"
        elif field.get("format") == "date":
            values[name] = "2026-01-02"
        elif field.get("format") == "uri":
            values[name] = "https://example.org"
        else:
            values[name] = "Ann"
    return values


def test_tools_images_annotations_structure_and_roots(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, tmp_path: Path
) -> None:
    handle = start_daemon(mcp={"servers": {"every": every()}}, models=VISION)
    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("every__get-sum", {"a": 2, "b": 3}),
                ToolCallSpec("every__get-tiny-image", {}),
                ToolCallSpec("every__get-annotated-message", {"messageType": "error", "includeImage": True}),
                ToolCallSpec("every__get-structured-content", {"location": "New York"}),
                ToolCallSpec("every__get-roots-list", {}),
                ToolCallSpec("every__get-resource-links", {"count": 1}),
            ]
        ),
        Reply(text="done"),
    )
    assert handle.send("cli:every", "try them", wait=True).status_code == 200
    names = offered(scripted.requests[0])
    assert {"every__echo", "every__get-tiny-image", "every__trigger-elicitation-request"} <= names
    assert "every__simulate-research-query" not in names  # requires MCP tasks: hidden
    total, image, annotated, structured, roots, links = tool_results(handle, "cli:every")
    assert "5" in total["content"]
    assert [f["mime_type"] for f in image["files"]] == ["image/png"]
    assert any(p["type"] == "image_url" for p in scripted.requests[1]["messages"][-1]["content"])
    assert "Error: Operation failed" in annotated["content"]
    assert "meant only for the user left out" in annotated["content"] and not annotated.get("files")
    assert '"temperature":33' in structured["content"].replace(" ", "")
    assert (tmp_path / "workspace").resolve().as_uri() in roots["content"]
    assert "[resource link demo://resource/" in links["content"]


def test_progress_elicitation_and_sampling(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    handle = start_daemon(mcp={"servers": {"every": every(sampling=True)}})
    sid = "cli:asks"
    stream = sse(handle, sid, "tool_calls")
    stream.wait_joined()
    scripted.enqueue(
        Reply(
            tool_calls=[ToolCallSpec("every__trigger-long-running-operation", {"duration": 1, "steps": 2})]
        ),
        Reply(tool_calls=[ToolCallSpec("every__trigger-elicitation-request", {})]),
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "every__trigger-url-elicitation",
                    {"url": "https://example.org/pay", "message": "Pay there", "elicitationId": "e-1"},
                )
            ]
        ),
        Reply(
            tool_calls=[
                ToolCallSpec("every__trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 20})
            ]
        ),
        Reply(text="Hi there"),  # the sampling call, once allowed
        Reply(text="all done"),
    )
    assert handle.send(sid, "go").status_code == 202

    form = stream.wait_event("input_requested", timeout=20)
    assert form["kind"] == "form" and form["source"] == "MCP server every"
    accepted = handle.http.post(
        f"/api/sessions/{sid}/questions/{form['question_id']}",
        json={"action": "accept", "content": form_values(form["schema"])},
    )
    assert accepted.status_code == 200, accepted.text
    link = stream.wait_event("input_requested", timeout=20, count=2)
    assert (
        link["kind"] == "url" and link["url"] == "https://example.org/pay" and link["message"] == "Pay there"
    )
    assert handle.http.post(
        f"/api/sessions/{sid}/questions/{link['question_id']}", json={"action": "decline"}
    )
    confirm = stream.wait_event("input_requested", timeout=20, count=3)
    assert confirm["kind"] == "confirm" and "Say hi" in confirm["message"]
    handle.http.post(f"/api/sessions/{sid}/questions/{confirm['question_id']}", json={"action": "accept"})
    stream.wait_event("turn_completed", timeout=30)

    progress = [(p["progress"], p["total"]) for p in stream.of("tool_progress")]
    assert progress == [(1.0, 2.0), (2.0, 2.0)]
    long_run, elicited, url, sampled = tool_results(handle, sid)
    assert "Long running operation completed" in long_run["content"]
    assert '"action": "accept"' in elicited["content"]
    assert "declined to open the URL" in url["content"]
    assert "Hi there" in sampled["content"] and '"model": "scripted"' in sampled["content"]
    system, user = scripted.requests[4]["messages"]
    assert system == {"role": "system", "content": "You are a helpful test server."}
    assert user["content"].endswith("Say hi") and scripted.requests[4]["max_tokens"] == 20


def test_resources_and_prompts(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon(mcp={"servers": {"every": every()}})
    sid = "cli:docs"
    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("every__list_resources", {}),
                ToolCallSpec("every__read_resource", {"uri": "demo://resource/dynamic/text/7"}),
            ]
        ),
        Reply(text="read"),
    )
    assert handle.send(sid, "what documents are there?", wait=True).status_code == 200
    listing, read = tool_results(handle, sid)
    assert "demo://resource/static/document/architecture.md" in listing["content"]
    assert "template demo://resource/dynamic/text/{resourceId}" in listing["content"]
    assert "Resource 7: This is a plaintext resource" in read["content"]

    listed = handle.http.post(f"/api/sessions/{sid}/messages", json={"text": "/prompt every"}).json()
    assert "every:args-prompt(city, state?)" in listed["notice"]
    usage = handle.http.post(
        f"/api/sessions/{sid}/messages", json={"text": "/prompt every:completable-prompt"}
    )
    assert "for example Engineering, Sales, Marketing, Support" in usage.json()["notice"]
    sent = handle.http.post(
        f"/api/sessions/{sid}/messages?wait=1", json={"text": "/prompt every:args-prompt Paris"}
    )
    assert sent.json()["reply"] == "echo: What's weather in Paris?"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EverythingHttp:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["node", str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        while "listening on port" not in (line := self.proc.stderr.readline()):
            assert line, "the reference server exited"

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def test_over_streamable_http_killed_and_restarted(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    server = EverythingHttp()
    server.start()
    try:
        handle = start_daemon(mcp={"max_reconnect_delay_s": 2, "servers": {"every": {"url": server.url}}})
        assert handle.http.get("/healthz").json()["mcp"]["every"]["state"] == "up"
        server.kill()
        wait_until(lambda: handle.http.get("/healthz").json()["mcp"]["every"]["state"] == "down", timeout=30)
        server.start()
        wait_until(lambda: handle.http.get("/healthz").json()["mcp"]["every"]["state"] == "up", timeout=30)
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("every__echo", {"message": "back"})]), Reply(text="ok")
        )
        assert handle.send("cli:http", "echo", wait=True).status_code == 200
        assert "back" in tool_results(handle, "cli:http")[0]["content"]
    finally:
        server.kill()


def test_its_log_messages_reach_the_daemons_log(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="netclaw.mcp.server")
    handle = start_daemon(mcp={"servers": {"every": every()}})
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("every__toggle-simulated-logging", {})]), Reply(text="on")
    )
    assert handle.send("cli:logs", "log something", wait=True).status_code == 200
    wait_until(  # it logs every 5 s once asked
        lambda: any(
            r.name == "netclaw.mcp.server" and "MCP server every" in r.getMessage() for r in caplog.records
        ),
        timeout=20,
        what="a log message from the server",
    )
