"""A tool call waiting for a person survives the daemon: after a SIGKILL (or a graceful
restart) the request is still pending, a new subscriber is shown it again, and deciding
it resumes the turn — the tool runs once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Daemons, Setup, journal_rows, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

pytestmark = pytest.mark.slow


@pytest.fixture
def provider() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        yield server


@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_a_pending_approval_survives_a_restart_and_deciding_it_resumes_the_turn(
    tmp_path: Path, daemons: Daemons, provider: ScriptedOpenAIThread, stop: str
) -> None:
    site = Setup(tmp_path, provider.base_url, audiences={"personal": {"approve": ["current_time"]}})
    sid = "cli:gated"
    provider.enqueue(
        Reply(tool_calls=[ToolCallSpec("current_time", {"timezone": "UTC"})]),
        Reply(text="it is now"),
    )
    first = daemons.start(site.config, site.data_dir, site.port)
    assert first.post(sid, "what time is it?").status_code == 202
    pending = wait_until(
        lambda: first.http.get(f"/api/sessions/{sid}/approvals").json(), 10, "the approval request"
    )
    if stop == "sigkill":
        first.sigkill()
    else:
        code, _ = first.sigterm(15)
        assert code == 0, first.stderr()

    second = daemons.start(site.config, site.data_dir, site.port)
    again = second.http.get(f"/api/sessions/{sid}/approvals").json()
    assert [a["id"] for a in again] == [pending[0]["id"]]  # the same request, still open
    assert again[0]["expires_at"] == pending[0]["expires_at"]
    # A subscriber arriving now (a channel re-attaching) is shown the request.
    with (
        httpx.Client(base_url=second.base_url, headers=second.http.headers, timeout=10) as http,
        http.stream("GET", f"/api/sessions/{sid}/events") as events,
    ):
        names = []
        for line in events.iter_lines():
            if line.startswith("event: "):
                names.append(line[len("event: ") :])
            if "approval_requested" in names:
                break
    assert names[:2] == ["joined", "approval_requested"]

    aid = pending[0]["id"]
    decided = second.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    wait_until(
        lambda: second.session(sid)["messages"][-1]["content"] == "it is now", 10, "the turn to finish"
    )
    messages = second.session(sid)["messages"]
    results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"] and not results[0].get("is_error")
    decisions = journal_rows(site.db_path, sid, "ApprovalDecided")
    assert [d["decision"] for d in decisions] == ["approve"]
    twice = second.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "approve"})
    assert twice.status_code == 409
    assert len(journal_rows(site.db_path, sid, "StepRecorded")) == 1  # the tool ran once
    # The audit trail, across the restart: asked once, decided once, run once.
    trail = second.http.get("/api/audit", params={"session": sid}).json()
    assert [(e["kind"], e["detail"].get("tool")) for e in trail] == [
        ("approval_requested", "current_time"),
        ("approval_decided", "current_time"),
        ("tool_run", "current_time"),
    ]
