"""Redaction at the daemon's boundaries: a message with a secret is admitted redacted and
its sender is told (a ``notice``); the earlier conversation and attached text files are
redacted too; a tool's result is redacted where the registry builds it."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator

import pytest

from netclaw.tools import Tool
from tests.conftest import DaemonHandle
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_sse import SseStream, sse_streams

SLACK = "xoxb-123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
AWS = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def test_a_message_with_a_secret_is_admitted_redacted_and_the_sender_told(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:redact"
    stream = sse(daemon, sid)
    stream.wait_joined()
    note = base64.b64encode(f"aws_access_key_id = {AWS}\n".encode()).decode()
    response = daemon.http.post(
        f"/api/sessions/{sid}/messages",
        params={"wait": "1"},
        json={
            "text": f"use {SLACK} please; db password=hunter22",
            "files": [{"name": "creds.txt", "mime_type": "text/plain", "data_base64": note}],
        },
    )
    assert response.status_code == 200, response.text
    notice = stream.wait_event("notice")
    assert notice["kind"] == "redaction"
    assert "Slack Token" in notice["text"] and "Secret Keyword" in notice["text"]
    assert "AWS Access Key" in notice["text"] and "rotate it" in notice["text"]
    user = next(m for m in daemon.transcript(sid) if m["role"] == "user")
    assert SLACK not in user["content"] and "hunter22" not in user["content"]
    assert "use [redacted: Slack Token] please; db password=[redacted: Secret Keyword]" in user["content"]
    sent = str(scripted.requests[-1])
    assert SLACK not in sent and AWS not in sent and "hunter22" not in sent


def test_an_ordinary_message_is_untouched_and_tells_nobody(
    daemon: DaemonHandle, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:plain"
    stream = sse(daemon, sid)
    stream.wait_joined()
    text = "commit 3f2a9c1e5b7d4f6a8c0e2b4d6f8a0c2e4b6d8f0a broke the password reset page"
    assert daemon.send(sid, text, wait=True).status_code == 200
    stream.wait_event("turn_completed")
    assert "notice" not in [name for name, _ in stream.events]
    assert next(m for m in daemon.transcript(sid) if m["role"] == "user")["content"] == text


def test_a_tool_result_is_redacted_before_it_is_recorded(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon()
    assert handle.daemon.tools is not None

    async def leak(args: object, ctx: object) -> str:
        return f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\nkey={SLACK}"

    handle.daemon.tools.register(Tool("leak", "Leaks.", {"type": "object"}, leak))
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("leak", {})]), Reply(text="ok"))
    assert handle.send("cli:tool", "go", wait=True).status_code == 200
    result = next(m for m in handle.transcript("cli:tool") if m["role"] == "tool")["content"]
    assert "BEGIN OPENSSH" not in result and SLACK not in result
    assert "[redacted: Private Key]" in result and "[redacted: Slack Token]" in result
    assert SLACK not in str(scripted.requests[-1])


def test_log_lines_at_info_and_above_never_carry_message_text(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    # Also kept on netclaw's own logger: what an earlier test did to the root logger in this
    # process (a daemon reconfigured by a reload) must not hide the records.
    netclaw_log = logging.getLogger("netclaw")
    netclaw_log.addHandler(caplog.handler)
    netclaw_log.setLevel(logging.INFO)
    try:
        marker = "zebra-quartz-7781"
        scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text=f"reply {marker}"))
        assert daemon.send("cli:logs", f"tell me about {marker} and {SLACK}", wait=True).status_code == 200
    finally:
        netclaw_log.removeHandler(caplog.handler)
        netclaw_log.setLevel(logging.NOTSET)
    shown = [r.getMessage() for r in caplog.records if r.levelno >= 20]
    assert shown and not [line for line in shown if marker in line or SLACK in line]
