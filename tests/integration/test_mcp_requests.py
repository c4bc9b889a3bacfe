"""What a server asks of netclaw during a call, through the real daemon and the SDK fake as a
stdio subprocess (both protocol eras): progress as ``tool_progress`` outputs, elicitation
asked of the person and answered through the API (accept, decline, a bad answer, no answer,
a public session), and sampling — off by default; on, allowed by a person, answered by the
session's model and counted in the turn's tokens."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netclaw.spend import utc_day
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_sse import SseStream, sse_streams
from tests.transcripts import tool_results

REPO_ROOT = Path(__file__).resolve().parents[2]
StartDaemon = Callable[..., DaemonHandle]
ERAS = ["auto", "legacy"]


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def docs(**extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_fake", "stdio"],
        "cwd": str(REPO_ROOT),
        **extra,
    }


def answer(handle: DaemonHandle, sid: str, qid: str, **body: Any) -> Any:
    return handle.http.post(f"/api/sessions/{sid}/questions/{qid}", json=body)


@pytest.mark.parametrize("protocol", ERAS)
def test_progress_becomes_tool_progress_outputs(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream], protocol: str
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol)}})
    sid = "cli:progress"
    stream = sse(handle, sid, "tool_calls")
    stream.wait_joined()
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__steps", {"n": 3})]), Reply(text="done"))
    assert handle.send(sid, "three steps", wait=True).status_code == 200
    stream.wait_event("tool_result")
    progress = stream.of("tool_progress")
    [call] = stream.of("tool_call")
    assert [(p["progress"], p["total"], p["message"]) for p in progress] == [
        (1.0, 3.0, "step 1 of 3"),
        (2.0, 3.0, "step 2 of 3"),
        (3.0, 3.0, "step 3 of 3"),
    ]
    assert {(p["id"], p["name"], p["turn"]) for p in progress} == {(call["id"], "docs__steps", 1)}
    assert tool_results(handle, sid)[0]["content"] == "3 steps done"


@pytest.mark.parametrize("protocol", ERAS)
def test_a_form_is_asked_of_the_person_and_the_answer_goes_back(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream], protocol: str
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol)}})
    sid = "cli:signup"
    stream = sse(handle, sid)
    stream.wait_joined()
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="signed up"))
    assert handle.send(sid, "sign me up").status_code == 202
    asked = stream.wait_event("input_requested", timeout=15)
    assert (
        asked["kind"] == "form" and asked["source"] == "MCP server docs" and asked["tool"] == "docs__signup"
    )
    assert asked["message"] == "Which email address should the account use?"
    assert set(asked["schema"]["properties"]) == {"email", "age"} and asked["schema"]["required"] == ["email"]
    qid = asked["question_id"]
    [listed] = handle.http.get(f"/api/sessions/{sid}/questions").json()
    assert listed["id"] == qid and handle.http.get("/api/questions").json()[0]["id"] == qid

    bad = answer(handle, sid, qid, action="accept", content={"email": "ann@example.org", "age": "old"})
    assert bad.status_code == 400 and "age" in bad.json()["error"]["message"]
    for wrong in (
        answer(handle, sid, "q-nope", action="accept"),
        answer(handle, "cli:other", qid, action="accept"),
    ):
        assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "question_not_found"
    unnamed = answer(handle, sid, qid, action="accept", content={"email": "a@b.c"}, user="Ann\nBob")
    assert unnamed.status_code == 400 and unnamed.json()["error"]["code"] == "invalid_user"
    good = answer(
        handle, sid, qid, action="accept", content={"email": "ann@example.org", "age": "41"}, user="Ann"
    )
    assert good.status_code == 200, good.text
    stream.wait_event("turn_completed", timeout=15)
    assert tool_results(handle, sid)[0]["content"] == "signed up ann@example.org (age 41)"
    assert stream.of("input_answered") == [
        {"session_id": sid, "question_id": qid, "action": "accept", "by": "Ann"}
    ]
    assert answer(handle, sid, qid, action="accept").status_code == 404  # answered: gone
    [audited] = [e for e in handle.http.get("/api/audit").json() if e["kind"] == "question_answered"]
    assert (audited["actor"], audited["session_id"]) == ("Ann", sid)
    assert audited["detail"] == {"question": qid, "tool": "docs__signup", "action": "accept"}
    assert handle.http.get("/api/questions").json() == []


def test_a_declined_form_and_one_nobody_answers(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs()}}, tools={"approval_timeout_s": 1.5})
    sid = "cli:decline"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="ok"))
    assert handle.send(sid, "sign me up").status_code == 202
    [asked] = wait_until(
        lambda: handle.http.get(f"/api/sessions/{sid}/questions").json(), timeout=15, what="a question"
    )
    assert answer(handle, sid, asked["id"], action="decline").status_code == 200
    wait_until(lambda: tool_results(handle, sid), timeout=15, what="the result")
    assert tool_results(handle, sid)[0]["content"] == "the person declined"

    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="ok"))
    assert handle.send(sid, "again", wait=True).status_code == 200  # nobody answers: it expires
    assert tool_results(handle, sid)[-1]["content"] == "the person cancelled"


def test_a_public_session_declines_at_once(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETCLAW_TEST_HOOK", "s3cret")
    handle = start_daemon(
        mcp={"servers": {"docs": docs()}},
        webhooks={"routes": {"hook": {"auth": {"type": "bearer", "secret_env": "NETCLAW_TEST_HOOK"}}}},
        audiences={"public": {"tools": ["docs__*"]}},
    )
    sid = "webhook:hook:x"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="ok"))
    assert handle.send(sid, "sign me up", wait=True).status_code == 200
    assert tool_results(handle, sid)[0]["content"] == "the person declined"


def test_sampling_is_off_unless_configured(start_daemon: StartDaemon, scripted: ScriptedOpenAIThread) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs()}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__consult", {"question": "ok?"})]), Reply(text="no"))
    assert handle.send("cli:nosample", "consult", wait=True).status_code == 200
    [result] = tool_results(handle, "cli:nosample")
    assert result["is_error"] and "sampling" in result["content"].lower(), result
    assert len(scripted.requests) == 2  # nothing else reached the model


@pytest.mark.parametrize("protocol", ERAS)
def test_sampling_waits_for_a_person_then_the_sessions_model_answers_and_it_counts(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream], protocol: str
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(protocol=protocol, sampling=True)}})
    sid = "cli:sample"
    stream = sse(handle, sid)
    stream.wait_joined()
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("docs__consult", {"question": "Is the sky blue?"})], usage=(100, 10)),
        Reply(text="Yes", usage=(1000, 7)),  # the sampling call
        Reply(text="the model agreed", usage=(200, 20)),
    )
    assert handle.send(sid, "consult the model").status_code == 202
    asked = stream.wait_event("input_requested", timeout=15)
    assert (
        asked["kind"] == "confirm"
        and "Is the sky blue?" in asked["message"]
        and "64 tokens" in asked["message"]
    )
    assert len(scripted.requests) == 1  # nothing is sampled before a person allows it
    assert answer(handle, sid, asked["question_id"], action="accept", user="Ann").status_code == 200
    stream.wait_event("turn_completed", timeout=15)
    sampled = scripted.requests[1]
    assert [(m["role"], m["content"]) for m in sampled["messages"]] == [
        ("system", "Answer in one word."),
        ("user", "Is the sky blue?"),
    ]
    assert "tools" not in sampled and sampled["max_tokens"] == 64
    assert tool_results(handle, sid)[0]["content"] == "the model said 'Yes' (scripted)"
    [row] = handle.http.get("/api/usage", params={"by": "session"}).json()
    assert row["input_tokens"] == 1300 and row["output_tokens"] == 37, row
    # The daemon's spend guards count the sampling call as it happens, as the turn's own.
    assert handle.daemon.ledger.on(utc_day(time.time())).tokens == 1337


def test_a_refused_sample_is_the_protocols_error(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    handle = start_daemon(mcp={"servers": {"docs": docs(sampling=True)}})
    sid = "cli:refuse"
    stream = sse(handle, sid)
    stream.wait_joined()
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__consult", {"question": "?"})]), Reply(text="ok"))
    assert handle.send(sid, "consult").status_code == 202
    asked = stream.wait_event("input_requested", timeout=15)
    assert answer(handle, sid, asked["question_id"], action="decline").status_code == 200
    stream.wait_event("turn_completed", timeout=15)
    [result] = tool_results(handle, sid)
    assert result["is_error"] and "not allowed" in result["content"], result
    assert len(scripted.requests) == 2


def test_a_person_may_take_longer_than_the_calls_and_the_turns_timeouts(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        mcp={"servers": {"docs": docs(timeout_s=1)}},
        tools={"call_timeout_s": 1.5},
        session={"turn_timeout_s": 2},
    )
    sid = "cli:slowperson"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("docs__signup", {})]), Reply(text="ok"))
    assert handle.send(sid, "sign me up").status_code == 202
    [asked] = wait_until(
        lambda: handle.http.get(f"/api/sessions/{sid}/questions").json(), timeout=15, what="a question"
    )
    time.sleep(3)  # time passing is the behaviour here: longer than every timeout of the call and the turn
    late = answer(handle, sid, asked["id"], action="accept", content={"email": "late@example.org"})
    assert late.status_code == 200, (late.text, handle.transcript(sid))
    wait_until(lambda: tool_results(handle, sid), timeout=15, what="the result")
    assert tool_results(handle, sid)[0]["content"] == "signed up late@example.org (age 0)"
    wait_until(lambda: handle.transcript(sid)[-1]["role"] == "assistant", timeout=15, what="the reply")
