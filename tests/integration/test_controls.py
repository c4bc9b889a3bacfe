"""Steering a session: cancel, reset, delete, chat commands, memories with their source,
and the transcript as people read it — against the real daemon."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

from netclaw.history import REQUIRED_SECTIONS
from netclaw.persistence import NewMemory
from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, wait_until
from tests.fakes._scripted_server import said
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_sse import SseStream, sse_streams

StartDaemon = Callable[..., DaemonHandle]


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def rows(handle: DaemonHandle, sid: str, view: str = "transcript") -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in handle.transcript(sid, view)]


def user_texts(request: Mapping[str, Any]) -> list[str]:
    """What the user said in a request (a turn's volatile tail is netclaw's, not theirs)."""
    return [said(m["content"]) for m in request["messages"] if m["role"] == "user" and said(m["content"])]


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_stops_a_streaming_turn_promptly_and_queued_messages_go_on(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:cancel"
    stream = sse(daemon, sid, "text")
    stream.wait_joined()
    scripted.enqueue(Reply(text="a very long answer " * 50, chunk_size=4, chunk_delay_s=0.05))
    assert daemon.send(sid, "one").status_code == 202
    assert daemon.send(sid, "two").status_code == 202  # queued behind it
    wait_until(lambda: scripted.frames_sent >= 2, what="the answer to be streaming")
    started = time.monotonic()
    answer = daemon.http.post(f"/api/sessions/{sid}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"cancelled": True, "turn": 1}
    error = stream.wait_event("error")
    assert error["code"] == "cancelled" and error["turn"] == 1
    completed = stream.wait_event("turn_completed")
    assert completed["status"] == "cancelled" and completed["turn"] == 1
    assert time.monotonic() - started < 5.0  # the whole answer would stream for ~12 s
    wait_until(lambda: scripted.aborted >= 1, what="the provider stream to be closed")
    # The queued message goes on.
    stream.wait_event("turn_completed", count=2)
    assert rows(daemon, sid)[-1] == ("assistant", "echo: two")


def test_cancel_during_a_tool_round_gives_every_call_a_result(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:cancel-tool"
    started = threading.Event()

    async def slow(args: Mapping[str, Any], ctx: ToolContext) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    assert daemon.daemon.tools is not None
    daemon.daemon.tools.register(Tool("slow", "Takes its time.", {"type": "object", "properties": {}}, slow))
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("slow", {})]))
    assert daemon.send(sid, "use the slow tool").status_code == 202
    wait_until(started.is_set, what="the tool to run")
    assert daemon.http.post(f"/api/sessions/{sid}/cancel").json() == {"cancelled": True, "turn": 1}
    messages = daemon.transcript(sid)
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m for m in messages if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == calls and results[0]["is_error"]
    assert messages[-1]["kind"] == "turn_outcome" and "cancelled" in messages[-1]["content"]


def test_cancel_when_idle_and_for_unknown_sessions(daemon: DaemonHandle) -> None:
    assert daemon.send("cli:idle", "hi", wait=True).status_code == 200
    assert daemon.http.post("/api/sessions/cli:idle/cancel").json() == {"cancelled": False}
    unknown = daemon.http.post("/api/sessions/cli:nobody/cancel")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "session_not_found"


# -- reset --------------------------------------------------------------------------------------


def test_reset_empties_what_the_model_sees_and_keeps_the_transcript(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:reset"
    for text in ("one", "two"):
        assert daemon.send(sid, text, wait=True).status_code == 200
    stream = sse(daemon, sid)
    stream.wait_joined()
    answer = daemon.http.post(f"/api/sessions/{sid}/reset")
    assert answer.status_code == 200 and answer.json() == {"session_id": sid}
    assert stream.wait_event("session_reset")["by"] == "api"
    assert [role for role, _ in rows(daemon, sid, "context")] == ["system"]
    assert [text for role, text in rows(daemon, sid) if role == "user"] == ["one", "two"]

    assert daemon.send(sid, "three", wait=True).status_code == 200
    assert user_texts(scripted.requests[-1]) == ["three"]  # the model starts afresh


def test_reset_during_a_turn_cancels_it_and_leaves_it_out_of_the_new_context(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:reset-busy"
    scripted.enqueue(Reply(text="too slow", delay_s=5))
    assert daemon.send(sid, "one").status_code == 202
    wait_until(lambda: scripted.requests, what="the provider call")
    assert daemon.http.post(f"/api/sessions/{sid}/reset").status_code == 200
    assert daemon.send(sid, "two", wait=True).status_code == 200
    assert user_texts(scripted.requests[-1]) == ["two"]


# -- delete -------------------------------------------------------------------------------------


def test_delete_erases_the_session_and_optionally_its_memories(daemon: DaemonHandle) -> None:
    memory, io = daemon.daemon.memory, daemon.daemon.io
    assert memory is not None and io is not None
    for sid in ("cli:gone", "cli:gone-too", "cli:stays"):
        assert daemon.send(sid, f"hello from {sid}", wait=True).status_code == 200
        io.run(memory.add([NewMemory(f"{sid} likes tea")], session_id=sid, audience="personal", turn=1), 5)

    assert daemon.http.delete("/api/sessions/cli:gone").status_code == 204
    assert daemon.http.get("/api/sessions/cli:gone").status_code == 404
    assert "cli:gone" not in [s["id"] for s in daemon.http.get("/api/sessions").json()]
    sources = {m["source_session"] for m in daemon.http.get("/api/memories").json()}
    assert sources == {"cli:gone", "cli:gone-too", "cli:stays"}  # memories stay by default

    assert daemon.http.delete("/api/sessions/cli:gone-too", params={"memories": "1"}).status_code == 204
    sources = {m["source_session"] for m in daemon.http.get("/api/memories").json()}
    assert sources == {"cli:gone", "cli:stays"}
    assert daemon.http.delete("/api/sessions/cli:gone-too").status_code == 404

    # A new message to a deleted id starts a new session from nothing.
    assert daemon.send("cli:gone", "again", wait=True).status_code == 200
    assert rows(daemon, "cli:gone") == [("user", "again"), ("assistant", "echo: again")]


def test_delete_racing_messages_never_leaves_half_a_session(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:race"
    assert daemon.send(sid, "before", wait=True).status_code == 200
    scripted.route("", lambda body: Reply(text="ok", delay_s=0.05))  # every request, a little slow
    answers: list[int] = []

    def sender() -> None:
        with httpx.Client(base_url=daemon.base_url, headers={"Authorization": f"Bearer {daemon.token}"}) as c:
            for i in range(20):
                answers.append(c.post(f"/api/sessions/{sid}/messages", json={"text": f"m{i}"}).status_code)
                time.sleep(0.02)  # pacing, not waiting: the messages spread over the delete

    thread = threading.Thread(target=sender)
    thread.start()
    wait_until(lambda: len(answers) >= 3, what="the first messages to be in")
    assert daemon.http.delete(f"/api/sessions/{sid}").status_code == 204
    thread.join(30)
    assert set(answers) <= {202, 503}

    # Whatever survived is a whole session: it starts at its beginning, every turn answered.
    def settled() -> bool:
        found = daemon.http.get(f"/api/sessions/{sid}")
        if found.status_code != 200:
            return False
        roles = [m["role"] for m in found.json()["messages"] if not m.get("pending")]
        return len(roles) == len(found.json()["messages"]) and roles.count("user") == roles.count("assistant")

    wait_until(settled, timeout=15, what="the new session's queue")
    messages = daemon.transcript(sid)
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert "before" not in users and users  # the first message after the delete started anew
    numbers = [int(t[1:]) for t in users]
    assert numbers == list(range(numbers[0], 20))  # in order, none lost after the delete
    assert len([m for m in messages if m["role"] == "assistant"]) == len(users)


# -- chat commands ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["/status", "!status", "  /STATUS  "])
def test_status_command_answers_without_a_turn(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread, text: str
) -> None:
    assert daemon.send("cli:cmd", "hello", wait=True).status_code == 200
    before = len(scripted.requests)
    answer = daemon.send("cli:cmd", text)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["command"] == "status"
    assert "Model scripted" in body["notice"] and "of 32768 tokens" in body["notice"]
    assert "1 turn(s)" in body["notice"] and "personal memories" in body["notice"]
    assert len(scripted.requests) == before
    assert [t for r, t in rows(daemon, "cli:cmd") if r == "user"] == ["hello"]  # not model input


def test_commands_reach_subscribers_as_notices(daemon: DaemonHandle, sse: Callable[..., SseStream]) -> None:
    sid = "cli:notices"
    assert daemon.send(sid, "hello", wait=True).status_code == 200
    stream = sse(daemon, sid)
    stream.wait_joined()
    assert daemon.send(sid, "/help").json()["command"] == "help"
    notice = stream.wait_event("notice")
    assert notice["kind"] == "command" and "/reset" in notice["text"]
    assert daemon.send(sid, "/new").json()["command"] == "reset"
    stream.wait_event("session_reset")
    assert daemon.send(sid, "/stop").json()["notice"] == "Nothing is running."
    assert "Nothing to compact" in daemon.send(sid, "/compact").json()["notice"]


def test_compact_command_summarises_now(daemon: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    sid = "cli:compact-now"
    for i in range(4):
        assert daemon.send(sid, f"message number {i} " + "words " * 40, wait=True).status_code == 200
    summary = "\n".join(f"## {section}\n- noted" for section in REQUIRED_SECTIONS)
    scripted.route("[netclaw:memory-flush]", lambda body: Reply(text="[]"))
    scripted.route("[netclaw:compaction-summary]", lambda body: Reply(text=summary))
    notice = daemon.send(sid, "/compact").json()["notice"]
    assert notice.startswith("Compacted: summarised the earlier conversation"), notice
    context = rows(daemon, sid, "context")
    assert any("Primary request" in text for _, text in context)


# -- the transcript as people read it -----------------------------------------------------------


def test_a_failed_turn_shows_its_error_in_the_transcript(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:failed"
    scripted.enqueue(ErrorReply(status=400, message="the model refused"))
    assert daemon.send(sid, "hello", wait=True).status_code == 502
    assert daemon.send(sid, "hello", wait=True).status_code == 200
    messages = daemon.transcript(sid)
    assert [(m["role"], m.get("kind", "chat")) for m in messages] == [
        ("user", "chat"),
        ("system", "turn_outcome"),
        ("user", "chat"),
        ("assistant", "chat"),
    ]
    assert "failed" in messages[1]["content"] and "the model refused" in messages[1]["content"]
    context = rows(daemon, sid, "context")
    assert not any("the model refused" in text for _, text in context)  # never model input


def test_an_idempotency_key_reused_with_another_message_is_a_409(daemon: DaemonHandle) -> None:
    sid = "cli:reuse"
    headers = {"Idempotency-Key": "k-1"}
    assert daemon.send(sid, "first", headers=headers).status_code == 202
    again = daemon.send(sid, "first", headers=headers)
    assert again.status_code == 202 and again.json()["duplicate"] is True
    other = daemon.send(sid, "something else", headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"


# -- memories -----------------------------------------------------------------------------------


def test_memories_are_listed_searched_and_deleted_with_their_source(daemon: DaemonHandle) -> None:
    memory, io = daemon.daemon.memory, daemon.daemon.io
    assert memory is not None and io is not None
    io.run(
        memory.add(
            [NewMemory("the deploy key lives in vault", "fact")],
            session_id="cli:a",
            audience="personal",
            turn=3,
        ),
        5,
    )
    io.run(
        memory.add(
            [NewMemory("prefers short answers", "preference")],
            session_id="slack:C1:1.0",
            audience="team",
            turn=1,
        ),
        5,
    )

    listed = daemon.http.get("/api/memories").json()
    assert {(m["text"], m["source_session"], m["source_turn"], m["audience"]) for m in listed} == {
        ("the deploy key lives in vault", "cli:a", 3, "personal"),
        ("prefers short answers", "slack:C1:1.0", 1, "team"),
    }
    assert set(listed[0]) >= {"id", "audience", "kind", "text", "source_session", "created_at"}
    found = daemon.http.get("/api/memories", params={"q": "deploy vault"}).json()
    assert [m["text"] for m in found] == ["the deploy key lives in vault"]
    assert [m["text"] for m in daemon.http.get("/api/memories", params={"audience": "team"}).json()] == [
        "prefers short answers"
    ]
    assert [m["text"] for m in daemon.http.get("/api/memories", params={"session": "cli:a"}).json()] == [
        "the deploy key lives in vault"
    ]
    target = found[0]["id"]
    # A person's correction: the same memory (id, provenance), recalled by its new wording.
    edited = daemon.http.patch(f"/api/memories/{target}", json={"text": "the deploy key lives in 1Password"})
    assert edited.status_code == 200, edited.text
    assert (edited.json()["id"], edited.json()["source_session"], edited.json()["source_turn"]) == (
        target,
        "cli:a",
        3,
    )
    assert [m["text"] for m in daemon.http.get("/api/memories", params={"q": "1password"}).json()] == [
        "the deploy key lives in 1Password"
    ]
    assert daemon.http.get("/api/memories", params={"q": "vault"}).json() == []
    for body, status, code in (
        ({"text": "  "}, 400, "invalid_text"),
        ({"text": 3}, 400, "invalid_text"),
        ({"text": "x", "audience": "team"}, 400, "unknown_field"),
    ):
        refused = daemon.http.patch(f"/api/memories/{target}", json=body)
        assert (refused.status_code, refused.json()["error"]["code"]) == (status, code), body
    assert daemon.http.patch("/api/memories/999999", json={"text": "x"}).status_code == 404
    assert daemon.http.patch("/api/memories/not-a-number", json={"text": "x"}).status_code == 404
    assert daemon.http.delete(f"/api/memories/{target}").status_code == 204
    assert daemon.http.delete(f"/api/memories/{target}").status_code == 404
    assert daemon.http.delete("/api/memories/not-a-number").status_code == 404
    assert daemon.http.get("/api/memories", params={"audience": "everyone"}).status_code == 400


# -- what an operator reads -----------------------------------------------------------------------


def test_the_context_view_shows_recalled_memories_and_the_tools_offered(daemon: DaemonHandle) -> None:
    memory, io = daemon.daemon.memory, daemon.daemon.io
    assert memory is not None and io is not None
    io.run(
        memory.add(
            [NewMemory("the deploy key lives in vault", "fact")], session_id="cli:ctx", audience="personal"
        ),
        5,
    )
    assert daemon.send("cli:ctx", "where does the deploy key live?", wait=True).status_code == 200
    body = daemon.http.get("/api/sessions/cli:ctx", params={"view": "context"}).json()
    # Recorded in the turn's tail, right after its message: what the model was sent.
    recall = [m for m in body["messages"] if "the deploy key lives in vault" in m["content"]]
    assert len(recall) == 1 and recall[0]["kind"] == "context"
    asked = next(
        i for i, m in enumerate(body["messages"]) if m["content"] == "where does the deploy key live?"
    )
    assert body["messages"].index(recall[0]) == asked + 1
    assert {"current_time", "remember", "search_memory"} <= set(body["tools"])
    assert "tools" not in daemon.http.get("/api/sessions/cli:ctx").json()  # the transcript view: no


def test_usage_by_model_counts_failed_turns_under_their_model(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    scripted.enqueue(ErrorReply(status=401, message="bad key"))
    assert daemon.send("cli:spend", "this one fails", wait=True).status_code == 502
    assert daemon.send("cli:spend", "this one works", wait=True).status_code == 200
    rows = daemon.http.get("/api/usage", params={"by": "model"}).json()
    assert [(r["key"], r["turns"]) for r in rows] == [("scripted", 2)]


def test_healthz_is_degraded_with_retry_after_when_the_model_cannot_be_reached(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    health = daemon.http.get("/healthz")
    assert health.status_code == 200 and health.json()["provider"]["name"] == "local"
    retries = daemon.daemon.settings.providers["local"].max_retries
    for _ in range(3):  # three turns, each failing after its retries
        scripted.enqueue(*[ErrorReply(status=503, message="down")] * (retries + 1))
        assert daemon.send("cli:down", "hello?", wait=True).status_code == 502
    health = daemon.http.get("/healthz")
    assert health.status_code == 503 and health.headers["Retry-After"] == "5"
    body = health.json()
    assert body["status"] == "degraded" and body["provider"]["state"] == "unreachable"
    assert "provider local is unreachable (3 failures in a row)" in body["reason"]
    assert daemon.send("cli:down", "and now?", wait=True).status_code == 200  # one success heals
    assert daemon.http.get("/healthz").json()["provider"]["state"] == "ok"
