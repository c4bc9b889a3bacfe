"""Redaction at the daemon's boundaries: a message with a secret is admitted redacted and
its sender is told (a ``notice``); its sender's names, the earlier conversation and attached
files are redacted too (the files on disk as well); a tool's result is redacted where the
registry builds it, the arguments a model writes where its answer arrives. The control
token never reaches the journal, a provider request, an API answer or an SSE event."""

from __future__ import annotations

import base64
import json
import logging
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.tools import Tool, ToolContext
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


GITHUB = "ghp_" + "Q7" * 18


def journal_text(handle: DaemonHandle) -> str:
    """Every event and snapshot the SQLite journal holds, and its files' raw bytes."""
    db = handle.daemon.settings.database_path
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT payload FROM events").fetchall()
        snaps = conn.execute("SELECT * FROM snapshots").fetchall()
    finally:
        conn.close()
    raw = b"".join(p.read_bytes() for p in Path(db).parent.glob(Path(db).name + "*"))
    return "\n".join(p for (p,) in rows) + repr(snaps) + raw.decode("latin-1")


def test_a_secret_in_a_name_or_id_reaches_neither_the_provider_nor_the_journal(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:names"
    response = daemon.http.post(
        f"/api/sessions/{sid}/messages",
        params={"wait": "1"},
        json={"text": "hello", "user_name": f"bob {SLACK}", "user": GITHUB},
        headers={"Idempotency-Key": f"retry-{AWS}"},
    )
    assert response.status_code == 200, response.text
    user = next(m for m in daemon.transcript(sid) if m["role"] == "user")
    assert user["user_name"] == "bob [redacted: Slack Token]" and user["user"] == "[redacted: GitHub Token]"
    stored = journal_text(daemon)
    sent = json.dumps(scripted.requests)
    for secret in (SLACK, GITHUB, AWS):
        assert secret not in stored and secret not in sent
    assert "[bob [redacted: Slack Token]] hello" in sent
    # The identity is still the same for the same key: a retry is a duplicate, not a second turn.
    again = daemon.http.post(
        f"/api/sessions/{sid}/messages",
        json={"text": "hello", "user": GITHUB},
        headers={"Idempotency-Key": f"retry-{AWS}"},
    )
    assert again.json().get("duplicate") is True


def test_stored_files_hold_no_secret_and_the_sender_is_told(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:files"
    stream = sse(daemon, sid)
    stream.wait_joined()
    pdf = b"%PDF-1.4\n1 0 obj << /Author (" + AWS.encode() + b") >> endobj\n\x00\xff%%EOF"
    files = [
        {"name": "creds.txt", "mime_type": "text/plain", "data": f"key = {SLACK}\nregion=eu\n".encode()},
        {"name": "report.pdf", "mime_type": "application/pdf", "data": pdf},
        {"name": f"{GITHUB}.log", "mime_type": "text/plain", "data": b"plain"},
    ]
    response = daemon.http.post(
        f"/api/sessions/{sid}/messages",
        params={"wait": "1"},
        json={
            "text": "see attached",
            "files": [
                {
                    "name": f["name"],
                    "mime_type": f["mime_type"],
                    "data_base64": base64.b64encode(f["data"]).decode(),
                }
                for f in files
            ],
        },
    )
    assert response.status_code == 200, response.text
    notice = stream.wait_event("notice")
    for kind in ("Slack Token", "AWS Access Key", "GitHub Token"):
        assert kind in notice["text"]
    folder = daemon.daemon.settings.data_dir / "files"
    kept = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert len(kept) == 3
    for name, data in kept.items():
        for secret in (SLACK, AWS, GITHUB):
            assert secret not in name and secret.encode() not in data, name
    (report,) = [d for n, d in kept.items() if n.endswith("report.pdf")]
    assert report == pdf.replace(AWS.encode(), b"*" * len(AWS))  # masked in place: still the same size
    (text,) = [d for n, d in kept.items() if n.endswith("creds.txt")]
    assert text == b"key = [redacted: Slack Token]\nregion=eu\n"
    sent, stored = json.dumps(scripted.requests), journal_text(daemon)
    for secret in (SLACK, AWS, GITHUB):
        assert secret not in sent and secret not in stored
    assert "region=eu" in sent


class Recorder:
    """A tool that keeps the arguments it ran with and returns ``result``."""

    def __init__(self, result: str = "done") -> None:
        self.result = result
        self.calls: list[Mapping[str, Any]] = []

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls.append(dict(args))
        return self.result


def test_a_secret_the_model_writes_into_tool_arguments_is_out_before_anything_sees_it(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    assert daemon.daemon.tools is not None
    run = Recorder()
    daemon.daemon.tools.register(Tool("run", "Runs.", {"type": "object"}, run))
    sid = "cli:args"
    stream = sse(daemon, sid, "all")
    stream.wait_joined()
    command = f"curl -H 'Authorization: token {GITHUB}' https://api.github.com/user"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("run", {"command": command})]), Reply(text="ok"))
    assert daemon.send(sid, "check my account", wait=True).status_code == 200
    stream.wait_event("turn_completed")
    assert run.calls == [{"command": command.replace(GITHUB, "[redacted: GitHub Token]")}]
    assert GITHUB not in journal_text(daemon)
    assert GITHUB not in json.dumps(scripted.requests[-1])
    assert GITHUB not in json.dumps(stream.events)
    assert GITHUB not in daemon.http.get(f"/api/sessions/{sid}").text


def test_the_control_token_is_never_journaled_sent_or_answered(
    start_daemon: Callable[..., DaemonHandle],
    scripted: ScriptedOpenAIThread,
    sse: Callable[..., SseStream],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It arrives in a message, a tool's result, the arguments the model writes, what the
    model says, a reminder's text, a bad query value and (pasted there by mistake) the
    system prompt: the journal, every provider request, the session as a reader token reads
    it, the reminder listing, an error answer and the SSE stream never carry it."""
    token = secrets.token_urlsafe(32)  # no known shape: only known as the daemon's own
    monkeypatch.setenv("REDACT_TEST_CONTROL_TOKEN", token)
    handle = start_daemon(
        gateway={"control_token_env": "REDACT_TEST_CONTROL_TOKEN"},
        agent={"system_prompt": f"You are netclaw. The operator's token is {token}."},
        roles={"reader": {"chat": False}},
    )
    assert handle.token == token and handle.daemon.tools is not None
    leak = Recorder(f"config: control_token={token} region=eu")
    handle.daemon.tools.register(Tool("leak", "Reads the config.", {"type": "object"}, leak))
    sid = "cli:token"
    stream = sse(handle, sid, "all")
    stream.wait_joined()
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("leak", {"say": token})]),
        Reply(text=f"The token is {token}.", chunk_size=1000),  # one delta: the stream's own defence
    )
    response = handle.send(sid, f"my control token is {token}", wait=True)
    assert response.status_code == 200, response.text
    stream.wait_event("turn_completed")
    reminder = handle.http.post(
        f"/api/sessions/{sid}/reminders", json={"text": f"rotate {token}", "in_s": 3600}
    )
    assert reminder.status_code == 201, reminder.text

    made = handle.http.post("/api/tokens", json={"name": "dashboard", "role": "reader"})
    with httpx.Client(
        base_url=handle.base_url, headers={"Authorization": f"Bearer {made.json()['token']}"}, timeout=30
    ) as reader:
        session = reader.get(f"/api/sessions/{sid}")
        reminders = reader.get("/api/reminders")
    assert session.status_code == 200 and reminders.status_code == 200
    stored, sent, events = journal_text(handle), json.dumps(scripted.requests), json.dumps(stream.events)
    assert token not in stored, "the journal holds the control token"
    assert token not in sent, "a provider request carries the control token"
    assert token not in session.text and token not in events and token not in response.text
    assert token not in reminders.text
    assert leak.calls == [{"say": "[redacted: Daemon Secret]"}]
    assert "my control token is [redacted: Daemon Secret]" in stored
    assert "control_token=[redacted: Daemon Secret] region=eu" in stored
    assert "The operator's token is [hidden]." in sent
    assert "rotate [redacted: Daemon Secret]" in reminders.text
    assert "The token is [hidden]." in events  # the streamed answer
    notice = next(d for n, d in stream.events if n == "notice")
    assert "Daemon Secret" in notice["text"]
    # An answer that repeats what it was sent (a refusal naming the bad value) is scrubbed too.
    refused = handle.http.post(f"/api/sessions/{sid}/messages", params={"wait": token}, json={"text": "x"})
    assert refused.status_code == 400 and "wait must be 1 or 0, not '[hidden]'" in refused.text
