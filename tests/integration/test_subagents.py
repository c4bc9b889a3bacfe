"""Sub-agents through the real daemon and the scripted provider: a parent spawns children
that run tool rounds in their own sessions; their answers come back to the parent once,
as input it answers (or as the tool's result with ``wait``); the parent's stream says when
children start and finish; cancel, reset and delete cascade; an answer owed across a
restart is delivered once; a parent that passivated is woken by its child's report."""

from __future__ import annotations

import asyncio
import collections
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from netclaw.security.trust import unlabel
from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.faulty_journal import JournalFaults
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec, said
from tests.fakes.subagent_script import FamilyScript
from tests.integration.test_sse import SseStream, sse_streams

StartDaemon = Callable[..., DaemonHandle]
PARENT = "cli:boss"


def sid(session_id: str) -> str:
    return quote(session_id, safe=":")


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


@pytest.fixture
def family(scripted: ScriptedOpenAIThread) -> FamilyScript:
    script = FamilyScript(rounds=2)
    scripted.set_responder(script)
    return script


def children(handle: DaemonHandle, parent: str = PARENT) -> list[dict[str, Any]]:
    response = handle.http.get(f"/api/sessions/{sid(parent)}/children")
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()
    return found


def transcript(handle: DaemonHandle, session_id: str) -> list[dict[str, Any]]:
    response = handle.http.get(f"/api/sessions/{sid(session_id)}")
    response.raise_for_status()
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def journal(handle: DaemonHandle, session_id: str, kind: str) -> list[dict[str, Any]]:
    db = Path(handle.daemon.settings.data_dir) / "netclaw.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE persistence_id = ? AND type = ? ORDER BY seq",
            (session_id, kind),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows]


def acks(handle: DaemonHandle, parent: str = PARENT) -> list[str]:
    return [
        m["content"]
        for m in transcript(handle, parent)
        if m["role"] == "assistant" and m["content"].startswith("ACK ")
    ]


def test_children_run_tool_rounds_and_each_answer_reaches_the_parent_once(
    daemon: DaemonHandle, family: FamilyScript, sse: Callable[..., SseStream]
) -> None:
    stream = sse(daemon, PARENT, "text")
    stream.wait_joined()
    response = daemon.send(PARENT, "SPAWN 3 job", wait=True)
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == "spawned job"
    wait_until(lambda: len(acks(daemon)) == 3, timeout=30, what="the parent to answer its three children")
    ids = [f"agent:{PARENT}/{n}" for n in (1, 2, 3)]
    assert sorted(acks(daemon)) == sorted(f"ACK {c}: RESULT job-{n}" for n, c in enumerate(ids, 1))
    listed = children(daemon)
    assert [c["id"] for c in listed] == ids
    assert all(c["status"] == "completed" and c["reported_turns"] == 1 for c in listed)
    assert {c["task"] for c in listed} == {f"TASK job-{n} rounds=2" for n in (1, 2, 3)}
    for n, child in enumerate(ids, 1):
        seen = transcript(daemon, child)  # its own session: task, two tool rounds, its answer
        assert [m["role"] for m in seen] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert seen[0]["content"] == f"TASK job-{n} rounds=2" and seen[-1]["content"] == f"RESULT job-{n}"
        reports = [
            r
            for r in journal(daemon, PARENT, "InputAdmitted")
            if r["message"].get("identity") == f"subagent:{child}:1"
        ]
        assert len(reports) == 1  # admitted exactly once, under the report's identity
    started = stream.wait_event("subagent_started", count=3)
    assert started["child_id"] in ids and started["wait"] is False
    finished = stream.wait_event("subagent_finished", count=3)
    assert finished["status"] == "completed" and finished["summary"].startswith("RESULT job-")
    # Every child's report was delivered and recorded as such in the child.
    for child in ids:
        assert [r["turn"] for r in journal(daemon, child, "ReplyDelivered")] == [1]
    assert daemon.daemon.subagents is not None and daemon.daemon.subagents.delivered == 3


def test_with_wait_the_answer_is_the_tool_result_and_starts_no_turn(
    daemon: DaemonHandle, family: FamilyScript, scripted: ScriptedOpenAIThread
) -> None:
    response = daemon.send(PARENT, "SPAWN 1 quick wait", wait=True)
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == "spawned quick"
    tool = next(m for m in transcript(daemon, PARENT) if m["role"] == "tool")
    # The child's answer is labelled untrusted (it may carry what the child read).
    assert tool["content"].startswith('<untrusted-content source="spawn_agent"')
    assert unlabel(tool["content"]) == f"agent:{PARENT}/1 finished the task. Its answer:\nRESULT quick-1"
    wait_until(lambda: children(daemon)[0]["status"] == "completed", what="the report to be recorded")
    time.sleep(0.3)  # absence is the behaviour here: the report, a tool result already, starts no turn
    assert acks(daemon) == [] and daemon.http.get(f"/api/sessions/{PARENT}").json()["turns"] == 1
    assert [r["turn"] for r in journal(daemon, f"agent:{PARENT}/1", "ReplyDelivered")] == [1]


def test_a_wait_that_runs_out_lets_the_answer_arrive_as_input(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    scripted.set_responder(FamilyScript(rounds=1, child_delay_s=(1.5, 1.5)))
    handle = start_daemon(session={"subagent_wait_s": 0.5})
    response = handle.send(PARENT, "SPAWN 1 late wait", wait=True)
    assert response.status_code == 200 and response.json()["reply"] == "spawned late", response.text
    tool = next(m for m in transcript(handle, PARENT) if m["role"] == "tool")
    assert tool["content"].startswith(f"agent:{PARENT}/1 is still working after the wait ran out")
    wait_until(
        lambda: acks(handle) == [f"ACK agent:{PARENT}/1: RESULT late-1"], timeout=20, what="the answer"
    )
    assert [r["n"] for r in journal(handle, PARENT, "ChildDetached")] == [1]


def test_cancel_of_a_parent_waiting_for_its_child_stops_both(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    scripted.set_responder(FamilyScript(rounds=1, child_delay_s=(30.0, 30.0)))
    assert daemon.send(PARENT, "SPAWN 1 stuck wait").status_code == 202
    wait_until(
        lambda: any("TASK stuck-1" in str(r) for r in scripted.requests), what="the child's model call"
    )
    started = time.monotonic()
    answer = daemon.http.post(f"/api/sessions/{PARENT}/cancel")
    assert answer.status_code == 200 and answer.json() == {"cancelled": True, "turn": 1}, answer.text
    wait_until(
        lambda: children(daemon)[0]["status"] == "cancelled", timeout=10, what="the child to be cancelled"
    )
    assert time.monotonic() - started < 10
    recorded = journal(daemon, PARENT, "TurnRecorded")
    assert [r["status"] for r in recorded] == ["cancelled"]
    (step,) = journal(daemon, PARENT, "StepRecorded")  # the waiting call got a result too
    assert [m["role"] for m in step["messages"]] == ["assistant", "tool"]


def test_a_parent_that_passivated_is_woken_by_its_childs_report(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    script = FamilyScript(rounds=1, child_delay_s=(1.0, 1.0))
    scripted.set_responder(script)
    handle = start_daemon(session={"idle_timeout_s": 0.2, "passivation_grace_s": 0})
    assert handle.send(PARENT, "SPAWN 1 slow", wait=True).status_code == 200
    manager = handle.daemon.manager
    assert manager is not None
    wait_until(lambda: not manager.is_resident(PARENT), timeout=10, what="the parent to passivate")
    wait_until(
        lambda: acks(handle) == [f"ACK agent:{PARENT}/1: RESULT slow-1"], timeout=20, what="the report"
    )


def test_cancel_of_the_parent_stops_its_childrens_streams_and_tools(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    started = threading.Event()
    stopped = threading.Event()

    async def slow(args: Mapping[str, Any], ctx: ToolContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    assert daemon.daemon.tools is not None
    daemon.daemon.tools.register(Tool("slow", "Takes its time.", {"type": "object", "properties": {}}, slow))

    def script(body: dict[str, Any]) -> Reply:
        texts = [said(m.get("content") or "") for m in body["messages"] if m.get("role") == "user"]
        last = body["messages"][-1]
        if texts and texts[0] == "stream":  # child 1: a long stream
            return Reply(text="word " * 400, chunk_size=4, chunk_delay_s=0.05)
        if texts and texts[0] == "tool":  # child 2: a tool that takes its time
            return Reply(tool_calls=[ToolCallSpec("slow", {})]) if last["role"] == "user" else Reply(text="x")
        if last["role"] == "tool":
            return Reply(text="both started")
        return Reply(
            tool_calls=[
                ToolCallSpec("spawn_agent", {"task": "stream"}),
                ToolCallSpec("spawn_agent", {"task": "tool"}),
            ]
        )

    scripted.set_responder(script)
    assert daemon.send(PARENT, "go", wait=True).json()["reply"] == "both started"
    assert started.wait(10)
    wait_until(lambda: scripted.requests and len(scripted.requests) >= 4, what="the children's calls")
    wait_until(lambda: scripted.streaming, what="the first child to be streaming")
    aborted = scripted.aborted
    answer = daemon.http.post(f"/api/sessions/{PARENT}/cancel")
    assert answer.status_code == 200, answer.text
    assert stopped.wait(10), "the child's running tool was not cancelled"
    wait_until(lambda: scripted.aborted > aborted, what="the child's provider stream to close")
    wait_until(
        lambda: [c["status"] for c in children(daemon)] == ["cancelled", "cancelled"],
        timeout=15,
        what="both children to report cancelled",
    )
    for n in (1, 2):
        recorded = journal(daemon, f"agent:{PARENT}/{n}", "TurnRecorded")
        assert [r["status"] for r in recorded] == ["cancelled"]
    assert acks(daemon) == []  # a cancelled child starts no turn in its parent


def test_delete_and_reset_cascade(daemon: DaemonHandle, family: FamilyScript) -> None:
    assert daemon.send(PARENT, "SPAWN 2 gone", wait=True).status_code == 200
    wait_until(lambda: len(acks(daemon)) == 2, timeout=30, what="the answers")
    assert daemon.http.delete(f"/api/sessions/{PARENT}").status_code == 204
    for n in (1, 2):
        assert daemon.http.get(f"/api/sessions/{sid(f'agent:{PARENT}/{n}')}").status_code == 404
    assert daemon.http.get(f"/api/sessions/{PARENT}").status_code == 404


def test_deleting_a_running_child_tells_its_parent(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    scripted.set_responder(FamilyScript(rounds=1, child_delay_s=(30.0, 30.0)))
    assert daemon.send(PARENT, "SPAWN 1 doomed", wait=True).status_code == 200
    child = f"agent:{PARENT}/1"
    assert children(daemon)[0]["status"] == "running"
    assert daemon.http.delete(f"/api/sessions/{sid(child)}").status_code == 204
    (record,) = children(daemon)
    assert record["status"] == "cancelled" and record["result"] == "its session was deleted by api"
    assert acks(daemon) == []  # no turn for it


def test_the_agents_command_lists_the_children(daemon: DaemonHandle, family: FamilyScript) -> None:
    assert daemon.send(PARENT, "SPAWN 1 listed", wait=True).status_code == 200
    wait_until(lambda: len(acks(daemon)) == 1, timeout=20, what="the answer")
    answer = daemon.send(PARENT, "/agents")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["command"] == "agents"
    assert f"agent:{PARENT}/1: completed — task: TASK listed-1 rounds=2 — RESULT listed-1" in body["notice"]


def test_a_childs_own_stream_and_session_are_there(
    daemon: DaemonHandle, family: FamilyScript, sse: Callable[..., SseStream]
) -> None:
    child = f"agent:{PARENT}/1"
    assert daemon.send(PARENT, "SPAWN 1 own", wait=True).status_code == 200
    wait_until(lambda: len(acks(daemon)) == 1, timeout=20, what="the answer")
    stream = sse(daemon, sid(child), "text")
    joined = stream.wait_joined()
    assert joined["session_id"] == child and joined["turns"] == 1
    summary = daemon.http.get(f"/api/sessions/{sid(child)}").json()
    assert summary["channel"] == "agent" and summary["title"] == "TASK own-1 rounds=2"
    assert children(daemon, child) == []


def test_nobody_outside_starts_a_sub_agents_session(daemon: DaemonHandle) -> None:
    answer = daemon.send(sid(f"agent:{PARENT}/7"), "hello")
    assert answer.status_code == 400, answer.text
    assert "only its parent starts it" in answer.json()["error"]["message"]
    bad = daemon.http.get("/api/sessions/agent:cli:x%2F0")  # no child 0, and no other slash
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_session_id"


def test_an_answer_owed_across_a_restart_is_delivered_once(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    script = FamilyScript(rounds=1, child_delay_s=(0.5, 0.5))
    scripted.set_responder(script)
    first = start_daemon()
    assert first.daemon.io is not None and first.daemon.subagents is not None
    first.daemon.io.run(_stopped(first.daemon.subagents.stop))  # nobody takes answers to parents now
    assert first.send(PARENT, "SPAWN 2 owed", wait=True).status_code == 200
    owed = [f"agent:{PARENT}/{n}" for n in (1, 2)]
    wait_until(
        lambda: all(journal(first, c, "TurnRecorded") for c in owed),
        timeout=20,
        what="the children's answers",
    )
    assert acks(first) == []
    first.stop()

    second = start_daemon()  # the same data_dir: what is owed goes out at start-up
    wait_until(lambda: len(acks(second)) == 2, timeout=20, what="both answers after the restart")
    time.sleep(0.3)  # absence is the behaviour here: each answer is admitted once, none again late
    admitted = collections.Counter(
        r["message"].get("identity") for r in journal(second, PARENT, "InputAdmitted")
    )
    assert admitted[f"subagent:{owed[0]}:1"] == 1 and admitted[f"subagent:{owed[1]}:1"] == 1
    assert sorted(acks(second)) == sorted(f"ACK {c}: RESULT owed-{n}" for n, c in enumerate(owed, 1))


async def _stopped(fn: Callable[[], None]) -> None:
    fn()


def test_an_answer_the_parent_could_not_admit_is_delivered_again_once(
    daemon: DaemonHandle, family: FamilyScript
) -> None:
    faults = JournalFaults(daemon)
    faults.fail_when = lambda events: any(e.type == "ChildReported" for e in events)  # once
    assert daemon.send(PARENT, "SPAWN 1 retry", wait=True).status_code == 200
    wait_until(lambda: len(acks(daemon)) == 1, timeout=20, what="the answer, after a retry")
    assert faults.failed == 1
    time.sleep(0.5)  # absence is the behaviour here: the retried answer is admitted once, none again late
    admitted = [
        r
        for r in journal(daemon, PARENT, "InputAdmitted")
        if r["message"].get("identity", "").startswith("subagent:")
    ]
    assert len(admitted) == 1 and acks(daemon) == [f"ACK agent:{PARENT}/1: RESULT retry-1"]


def test_an_audience_that_may_not_spawn_is_told_so(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(audiences={"personal": {"subagents": False}})
    scripted.set_responder(FamilyScript())
    response = handle.send(PARENT, "SPAWN 1 denied", wait=True)
    assert response.status_code == 200, response.text
    tool = next(m for m in transcript(handle, PARENT) if m["role"] == "tool")
    assert tool["content"].startswith("error: ")
    assert "personal sessions may not spawn sub-agents (audiences.personal.subagents)" in tool["content"]
    assert children(handle) == []


def test_the_client_reaches_a_sub_agent_by_its_id(daemon: DaemonHandle, family: FamilyScript) -> None:
    from netclaw.client import DaemonClient

    assert daemon.send(PARENT, "SPAWN 1 cli", wait=True).status_code == 200
    wait_until(lambda: len(acks(daemon)) == 1, timeout=20, what="the answer")
    settings = daemon.daemon.settings
    bound = settings.model_copy(
        update={"gateway": settings.gateway.model_copy(update={"port": daemon.daemon.port})}
    )
    with DaemonClient(bound) as client:
        child = client.session(f"agent:{PARENT}/1")
        assert child["id"] == f"agent:{PARENT}/1"
        assert [c["id"] for c in client.children(PARENT)] == [f"agent:{PARENT}/1"]
