"""History fidelity through the running daemon: trimming is visible, overflow recovery
is bounded, and no user input is ever recorded twice."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.history import BREADCRUMB_TEXT, FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from tests.conftest import DaemonHandle, settings_data
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, overflow

WINDOW = 700
MAX_OUT = 100  # budget = 600 tokens


@pytest.fixture
def windowed() -> Iterator[ScriptedOpenAIThread]:
    """A provider that enforces a small context window (chars // 4 > WINDOW → overflow)."""
    with ScriptedOpenAIThread(context_window=WINDOW) as server:
        yield server


@pytest.fixture
def small_window(tmp_path: Path, windowed: ScriptedOpenAIThread) -> Iterator[Callable[[], DaemonHandle]]:
    handles: list[DaemonHandle] = []

    def start() -> DaemonHandle:
        data = settings_data(
            tmp_path / "data",
            windowed.base_url,
            models={
                "main": {
                    "provider": "local",
                    "model": "m",
                    "context_window": WINDOW,
                    "max_output_tokens": MAX_OUT,
                }
            },
            # A window this small holds no tool schemas beyond one (they count, too).
            audiences={"personal": {"tools": ["current_time"]}},
        )
        daemon = Daemon(Settings(**data))
        daemon.start()
        handle = DaemonHandle(daemon)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()


class SseReader:
    """Collects a session's SSE events on a background thread."""

    def __init__(self, handle: DaemonHandle, session_id: str, filter_spec: str = "text") -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.joined = threading.Event()
        self._client = httpx.Client(
            base_url=handle.base_url, headers={"Authorization": f"Bearer {handle.token}"}
        )
        self._thread = threading.Thread(target=self._run, args=(session_id, filter_spec), daemon=True)
        self._thread.start()
        assert self.joined.wait(10)

    def _run(self, session_id: str, filter_spec: str) -> None:
        try:
            with self._client.stream(
                "GET", f"/api/sessions/{session_id}/events", params={"filter": filter_spec}, timeout=None
            ) as response:
                event = ""
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        self.events.append((event, json.loads(line[5:])))
                        if event == "joined":
                            self.joined.set()
        except httpx.HTTPError:
            pass

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    def close(self) -> None:
        self._client.close()


def user_rows(handle: DaemonHandle) -> list[tuple[str, str]]:
    """(message id, text) of every InputAdmitted row in the journal."""
    db = handle.daemon.settings.database_path
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT payload FROM events WHERE type = 'InputAdmitted'").fetchall()
    return [(json.loads(p)["message"]["id"], json.loads(p)["message"]["content"]) for (p,) in rows]


def long_text(n: int) -> str:
    return f"message {n}: " + "the quick brown fox jumps over the lazy dog " * 8


def test_long_conversation_trims_visibly_and_never_overflows(
    small_window: Callable[[], DaemonHandle], windowed: ScriptedOpenAIThread
) -> None:
    handle = small_window()
    sse = SseReader(handle, "cli:long")
    try:
        for n in range(12):
            response = handle.send("cli:long", long_text(n), wait=True)
            assert response.status_code == 200, response.text
    finally:
        sse.close()

    trims = sse.named("history_trimmed")
    assert trims, "a conversation larger than the window must trim visibly"
    for trim in trims:
        assert {
            "dropped_messages",
            "dropped_turns",
            "kept_turns",
            "tokens_before",
            "tokens_after",
            "budget",
            "reason",
        } <= trim.keys()
        assert trim["tokens_after"] <= trim["budget"] < trim["tokens_before"]
        assert trim["session_id"] == "cli:long"
    assert not sse.named("error"), "no provider overflow may surface"

    # The model-visible projection carries one breadcrumb right after the system prompt ...
    context = handle.transcript("cli:long", view="context")
    assert context[0]["role"] == "system"
    assert context[1]["kind"] == "trim_breadcrumb" and context[1]["content"] == BREADCRUMB_TEXT
    assert sum(1 for m in context if m.get("kind") == "trim_breadcrumb") == 1
    assert context[-1]["role"] == "assistant"
    # ... while the stored transcript keeps every message.
    transcript = handle.transcript("cli:long")
    assert [m["content"] for m in transcript if m["role"] == "user"] == [long_text(n) for n in range(12)]
    # And the journal holds each user message exactly once.
    rows = user_rows(handle)
    assert len(rows) == 12 and len({text for _, text in rows}) == 12


def test_projection_survives_restart(small_window: Callable[[], DaemonHandle]) -> None:
    handle = small_window()
    for n in range(10):
        assert handle.send("cli:restart", long_text(n), wait=True).status_code == 200
    before = handle.transcript("cli:restart", view="context")
    handle.stop()
    again = small_window()
    restarted = again.transcript("cli:restart", view="context")
    assert restarted[:-1] == before  # plus the restart notice the next turn's tail will carry
    assert restarted[-1]["kind"] == "context" and "restarted" in restarted[-1]["content"]
    # And the next turn goes on from the same projection (no overflow, one more user row).
    assert again.send("cli:restart", "and now?", wait=True).status_code == 200
    assert len(user_rows(again)) == 11


GOOD_SUMMARY = "\n".join(f"## {section}\n- noted" for section in REQUIRED_SECTIONS)


def route_compaction(scripted: ScriptedOpenAIThread, summary: str = GOOD_SUMMARY) -> None:
    """Answer compaction's LLM calls (recognised by their markers) apart from the chat queue."""
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=summary))


def chat_requests(scripted: ScriptedOpenAIThread) -> list[dict[str, Any]]:
    def is_compaction(body: dict[str, Any]) -> bool:
        text = " ".join(str(m.get("content")) for m in body["messages"])
        return FLUSH_MARKER in text or SUMMARY_MARKER in text

    return [r for r in scripted.requests if not is_compaction(r)]


def test_overflow_is_recovered_by_compacting_first(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    route_compaction(scripted)
    for n in range(4):
        assert daemon.send("cli:ofc", f"turn {n}", wait=True).status_code == 200
    sse = SseReader(daemon, "cli:ofc")
    try:
        scripted.enqueue(overflow(), Reply(text="recovered"))
        response = daemon.send("cli:ofc", "this one overflows", wait=True)
    finally:
        sse.close()
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == "recovered"
    compactions = sse.named("compaction")
    assert len(compactions) == 1 and compactions[0]["summarized"] is True
    assert not sse.named("history_trimmed")  # rung 1 was enough
    assert [text for _, text in user_rows(daemon)].count("this one overflows") == 1


def test_overflow_trims_when_compaction_cannot_help(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    route_compaction(scripted, summary="not a structured summary")  # the quality guard cancels it
    for n in range(4):
        assert daemon.send("cli:of", f"turn {n}", wait=True).status_code == 200
    sse = SseReader(daemon, "cli:of")
    try:
        scripted.enqueue(overflow(), Reply(text="recovered"))
        response = daemon.send("cli:of", "this one overflows", wait=True)
    finally:
        sse.close()
    assert response.status_code == 200, response.text
    assert response.json()["reply"] == "recovered"
    [compaction] = sse.named("compaction")
    assert compaction["summarized"] is False and "cancelled" in compaction["note"]
    assert [t["reason"] for t in sse.named("history_trimmed")] == ["overflow"]
    # The retried request carried the user message once, and the journal has it once.
    last = chat_requests(scripted)[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"].count("this one overflows") == 1
    assert [text for _, text in user_rows(daemon)].count("this one overflows") == 1


def test_three_recovery_passes_then_a_clear_error_and_one_copy(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    route_compaction(scripted, summary="not a structured summary")
    for n in range(8):
        assert daemon.send("cli:of3", f"turn {n} " + "words " * 30, wait=True).status_code == 200
    scripted.enqueue(overflow(), overflow(), overflow(), overflow())
    before = len(chat_requests(scripted))
    response = daemon.send("cli:of3", "never fits", wait=True)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "context_overflow"
    assert len(chat_requests(scripted)) - before == 4  # the first try + 3 recovery passes, no loop
    assert [text for _, text in user_rows(daemon)].count("never fits") == 1
    transcript = daemon.transcript("cli:of3")
    assert [m["content"] for m in transcript].count("never fits") == 1
    # The session is still usable afterwards.
    assert daemon.send("cli:of3", "still there?", wait=True).status_code == 200


def test_newest_turn_alone_too_large_fails_without_retrying(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    scripted.enqueue(overflow())
    response = daemon.send("cli:huge", "one enormous message", wait=True)
    assert response.status_code == 502
    body = response.json()
    assert body["error"]["code"] == "context_overflow"
    # A few hundred tokens refused against a 32k window: the server's window is the problem.
    assert "smaller than configured" in body["error"]["message"]
    assert "models.main.context_window says 32768" in body["error"]["message"]
    assert len(scripted.requests) == 1


def test_non_overflow_error_trims_nothing(daemon: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    for n in range(3):
        assert daemon.send("cli:bad", f"turn {n}", wait=True).status_code == 200
    before = daemon.transcript("cli:bad", view="context")
    scripted.enqueue(ErrorReply(status=400, message="bad request"))
    assert daemon.send("cli:bad", "rejected", wait=True).status_code == 502
    after = daemon.transcript("cli:bad", view="context")
    assert not any(m.get("kind") == "trim_breadcrumb" for m in after)
    assert after[: len(before)] == before
    db = daemon.daemon.settings.database_path
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM events WHERE type = 'HistoryTrimmed'").fetchone()[0] == 0


def test_reported_usage_above_budget_trims_next_call(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(
        models={
            "main": {"provider": "local", "model": "m", "context_window": 4000, "max_output_tokens": 1000}
        }
    )
    # Our estimate of these short turns is far below the 3000-token budget, but the
    # provider reports 5000 input tokens: calibration must make the next call trim.
    for n in range(4):
        scripted.enqueue(Reply(text=f"short {n}", usage=(5000 if n == 3 else 50, 5)))
        assert handle.send("cli:cal", f"hello {n} " + "x " * 40, wait=True).status_code == 200
    sse = SseReader(handle, "cli:cal")
    try:
        assert handle.send("cli:cal", "after the big report", wait=True).status_code == 200
    finally:
        sse.close()
    trims = sse.named("history_trimmed")
    assert trims and trims[0]["reason"] == "budget"
    assert trims[0]["budget"] < 3000


def test_same_text_with_a_new_identity_is_a_new_turn(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    for _ in range(2):
        assert daemon.send("cli:rep", "same words", wait=True).status_code == 200
    users = [m for m in daemon.transcript("cli:rep") if m["role"] == "user"]
    assert [m["content"] for m in users] == ["same words", "same words"]
    assert users[0]["id"] != users[1]["id"]
    assert len(scripted.requests) == 2


def test_identical_assistant_and_tool_entries_are_kept(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    from tests.fakes.scripted_openai import ToolCallSpec

    for n in range(2):
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("no_such_tool", {"x": 1}, id=f"call_{n}")]),
            Reply(text="identical answer"),
        )
        assert daemon.send("cli:dup", f"question {n}", wait=True).status_code == 200
    transcript = daemon.transcript("cli:dup")
    assert [m["content"] for m in transcript if m["role"] == "assistant" and not m.get("tool_calls")] == [
        "identical answer",
        "identical answer",
    ]
    tool_results = [m for m in transcript if m["role"] == "tool"]
    assert len(tool_results) == 2 and tool_results[0]["content"] == tool_results[1]["content"]


def test_redelivered_identity_starts_no_turn(daemon: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    first = daemon.send("cli:redeliver", "once", wait=True, headers={"Idempotency-Key": "evt-1"})
    again = daemon.send("cli:redeliver", "once", wait=True, headers={"Idempotency-Key": "evt-1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["message_id"] == first.json()["message_id"]
    assert again.json()["reply"] == first.json()["reply"]
    assert len(scripted.requests) == 1
    assert [text for _, text in user_rows(daemon)] == ["once"]
