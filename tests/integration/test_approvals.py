"""Tool calls that wait for a person, through the API, against the real daemon: approve,
deny, always, expiry, a decision twice, cancel while waiting, and no passivation while a
decision is open."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_sse import SseStream, sse_streams

StartDaemon = Callable[..., DaemonHandle]


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


class Recorder:
    """A tool that counts its runs (the thing a person approves)."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any]] = []
        self.ran = threading.Event()

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls.append(dict(args))
        self.ran.set()
        return f"deployed {args.get('what', '?')}"


def with_deploy(handle: DaemonHandle) -> Recorder:
    recorder = Recorder()
    assert handle.daemon.tools is not None
    schema = {"type": "object", "properties": {"what": {"type": "string"}}}
    handle.daemon.tools.register(Tool("deploy", "Deploy something.", schema, recorder))
    return recorder


@pytest.fixture
def gated(start_daemon: StartDaemon) -> DaemonHandle:
    return start_daemon(audiences={"personal": {"approve": ["deploy"]}})


def ask_deploy(handle: DaemonHandle, scripted: ScriptedOpenAIThread, sid: str, answer: str = "done") -> None:
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("deploy", {"what": "api"})]), Reply(text=answer))
    assert handle.send(sid, "deploy the api").status_code == 202


def pending(handle: DaemonHandle, sid: str) -> list[dict[str, Any]]:
    response = handle.http.get(f"/api/sessions/{sid}/approvals")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()
    return found


def tool_results(handle: DaemonHandle, sid: str) -> list[dict[str, Any]]:
    return [m for m in handle.transcript(sid) if m["role"] == "tool"]


def test_an_approved_call_runs_once_after_the_decision_is_journaled(
    gated: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:approve"
    recorder = with_deploy(gated)
    stream = sse(gated, sid)
    stream.wait_joined()
    ask_deploy(gated, scripted, sid)
    requested = stream.wait_event("approval_requested")
    assert requested["tool"] == "deploy" and json.loads(requested["arguments"]) == {"what": "api"}
    assert requested["turn"] == 1 and requested["expires_at"] > time.time() + 800
    listed = wait_until(lambda: pending(gated, sid), what="the pending approval")
    assert [a["id"] for a in listed] == [requested["approval_id"]]
    assert listed[0]["session_id"] == sid
    assert gated.http.get("/api/approvals").json()[0]["id"] == requested["approval_id"]
    time.sleep(0.2)  # absence is the behaviour here: nothing runs before the decision
    assert not recorder.calls
    assert gated.daemon.gateway is not None
    assert gated.daemon.gateway.reads.resident_phases()[sid] == "processing"

    aid = requested["approval_id"]
    decided = gated.http.post(
        f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "approve", "user": "ana"}
    )
    assert decided.status_code == 200, decided.text
    assert decided.json() == {"id": aid, "decision": "approve"}
    assert stream.wait_event("approval_decided") == {
        "session_id": sid,
        "approval_id": aid,
        "decision": "approve",
        "by": "ana",
    }
    stream.wait_event("turn_completed")
    assert recorder.calls == [{"what": "api"}]
    assert tool_results(gated, sid)[0]["content"] == "deployed api"
    assert gated.transcript(sid)[-1]["content"] == "done"

    again = gated.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "approve"})
    assert again.status_code == 409 and "already decided: approve by ana" in again.json()["error"]["message"]
    assert len(recorder.calls) == 1
    assert pending(gated, sid) == []


def test_a_denied_call_does_not_run_and_the_model_is_told_who_denied_it(
    gated: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:deny"
    recorder = with_deploy(gated)
    ask_deploy(gated, scripted, sid, answer="ok, not deploying")
    aid = wait_until(lambda: pending(gated, sid), what="the request")[0]["id"]
    answer = gated.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "deny", "user": "bo"})
    assert answer.status_code == 200
    wait_until(lambda: gated.transcript(sid)[-1]["content"] == "ok, not deploying", what="the reply")
    assert recorder.calls == []
    result = tool_results(gated, sid)[0]
    assert result["is_error"] and "denied by bo" in result["content"]
    sent = scripted.requests[-1]["messages"]
    assert any(m["role"] == "tool" and "denied by bo" in m["content"] for m in sent)


def test_a_second_decision_is_409_and_the_tool_runs_once(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(audiences={"personal": {"approve": ["deploy"]}})
    recorder = with_deploy(handle)
    sid = "cli:twice"
    # Two gated calls in one round: deciding the first leaves the round open.
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {"what": "a"}), ToolCallSpec("deploy", {"what": "b"})]),
        Reply(text="both handled"),
    )
    assert handle.send(sid, "deploy a and b").status_code == 202
    first, second = wait_until(lambda: pending(handle, sid), what="two requests")
    url = f"/api/sessions/{sid}/approvals/{first['id']}"
    assert handle.http.post(url, json={"decision": "approve"}).status_code == 200
    twice = handle.http.post(url, json={"decision": "deny"})
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "approval_decided"
    assert "approve by api" in twice.json()["error"]["message"]
    assert [a["id"] for a in pending(handle, sid)] == [second["id"]]
    time.sleep(0.1)  # absence is the behaviour here: the round runs once every call in it is decided
    assert recorder.calls == []
    handle.http.post(f"/api/sessions/{sid}/approvals/{second['id']}", json={"decision": "deny"})
    wait_until(lambda: handle.transcript(sid)[-1]["content"] == "both handled", what="the reply")
    assert recorder.calls == [{"what": "a"}]


def test_always_grants_the_tool_for_the_rest_of_the_session(
    gated: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:always"
    recorder = with_deploy(gated)
    ask_deploy(gated, scripted, sid)
    aid = wait_until(lambda: pending(gated, sid), what="the request")[0]["id"]
    gated.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "always"})
    wait_until(lambda: len(recorder.calls) == 1, what="the first run")
    ask_deploy(gated, scripted, sid, answer="again")
    wait_until(lambda: len(recorder.calls) == 2, what="the second run, without asking")
    assert pending(gated, sid) == []
    # Another session still asks.
    ask_deploy(gated, scripted, "cli:other")
    wait_until(lambda: pending(gated, "cli:other"), what="a request in another session")


def test_an_unanswered_request_expires_into_a_result_the_model_sees(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    handle = start_daemon(audiences={"personal": {"approve": ["deploy"]}}, tools={"approval_timeout_s": 0.5})
    recorder = with_deploy(handle)
    sid = "cli:expire"
    stream = sse(handle, sid)
    stream.wait_joined()
    ask_deploy(handle, scripted, sid, answer="it expired")
    decided = stream.wait_event("approval_decided", timeout=5)
    assert decided["decision"] == "expired" and decided["by"] == "timeout"
    stream.wait_event("turn_completed")
    assert recorder.calls == []
    assert "not approved in time" in tool_results(handle, sid)[0]["content"]
    late = handle.http.post(
        f"/api/sessions/{sid}/approvals/{decided['approval_id']}", json={"decision": "approve"}
    )
    assert late.status_code == 409 and "expired by timeout" in late.json()["error"]["message"]


def test_cancel_while_waiting_ends_the_turn_and_closes_the_request(
    gated: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:cancel-wait"
    recorder = with_deploy(gated)
    stream = sse(gated, sid)
    stream.wait_joined()
    ask_deploy(gated, scripted, sid)
    aid = stream.wait_event("approval_requested")["approval_id"]
    assert gated.http.post(f"/api/sessions/{sid}/cancel").json() == {"cancelled": True, "turn": 1}
    closed = stream.wait_event("approval_decided")
    assert closed["approval_id"] == aid and closed["decision"] == "cancelled"
    assert stream.wait_event("turn_completed")["status"] == "cancelled"
    answer = gated.http.post(f"/api/sessions/{sid}/approvals/{aid}", json={"decision": "approve"})
    assert answer.status_code == 409 and "cancelled" in answer.json()["error"]["message"]
    assert recorder.calls == []
    # Every call has a result in what the model sees next: it was cancelled.
    scripted.enqueue(Reply(text="fine"))
    assert gated.send(sid, "never mind", wait=True).status_code == 200
    sent = scripted.requests[-1]["messages"]
    calls = [c["id"] for m in sent for c in m.get("tool_calls") or []]
    results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert calls and set(calls) == set(results)
    assert all("interrupted" in text for text in results.values())


def test_a_session_waiting_for_a_decision_does_not_passivate(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        audiences={"personal": {"approve": ["deploy"]}},
        session={"idle_timeout_s": 0.2, "passivation_grace_s": 0},
    )
    with_deploy(handle)
    sid = "cli:stay"
    ask_deploy(handle, scripted, sid)
    wait_until(lambda: pending(handle, sid), what="the request")
    # A session idle since after the request passivates: the idle timeout has passed for both.
    assert handle.send("cli:idle", "hello", wait=True).status_code == 200
    assert handle.daemon.gateway is not None
    phases = handle.daemon.gateway.reads.resident_phases
    wait_until(lambda: "cli:idle" not in phases(), what="the idle session to passivate")
    assert phases().get(sid) == "processing"
    assert len(pending(handle, sid)) == 1
    status = handle.send(sid, "/status")
    assert status.status_code == 200 and "waiting for approval of deploy" in status.json()["notice"]


def test_bad_decisions_are_named(gated: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    sid = "cli:bad"
    with_deploy(gated)
    ask_deploy(gated, scripted, sid)
    aid = wait_until(lambda: pending(gated, sid), what="the request")[0]["id"]
    url = f"/api/sessions/{sid}/approvals/{aid}"
    bad = gated.http.post(url, json={"decision": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_decision"
    missing = gated.http.post(url, json={})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_decision"
    unknown = gated.http.post(f"/api/sessions/{sid}/approvals/ap-nope", json={"decision": "approve"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "approval_not_found"
    nobody = gated.http.get("/api/sessions/cli:nobody/approvals")
    assert nobody.status_code == 404
    assert len(pending(gated, sid)) == 1  # nothing above decided anything
