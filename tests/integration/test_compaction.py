"""Tiered compaction through the running daemon.

The model's context window is 10 000 tokens and the threshold 0.5, so a scripted reply
reporting 6 000 input tokens crosses it. Tier 1 clears old tool results (no LLM call) and
re-checks; tiers 2 and 3 are the memory flush and the structured summary, LLM calls told
apart from chat calls by the markers in their system message (``route_compaction``).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from netclaw.history import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from netclaw.persistence import NewMemory, SqliteMemoryStore
from netclaw.security.trust import system_prompt as trusted
from tests.conftest import DaemonHandle
from tests.fakes._scripted_server import as_sent, said
from tests.fakes.scripted_openai import (
    ErrorReply,
    Reply,
    ScriptedOpenAIThread,
    ToolCallSpec,
    estimate_prompt_tokens,
)
from tests.integration.test_history_fidelity import (
    GOOD_SUMMARY,
    SseReader,
    chat_requests,
    route_compaction,
    user_rows,
)

WINDOW = 10_000
THRESHOLD = 0.5
OVER = (6000, 10)  # reported usage above THRESHOLD x WINDOW = 5000
UNDER = (100, 5)
MODELS = {"main": {"provider": "local", "model": "m", "context_window": WINDOW, "max_output_tokens": 500}}
SESSION = {"compaction_threshold": THRESHOLD, "keep_recent_tool_results": 1}
PLACEHOLDER = "[tool result cleared by compaction:"
RECALL = "Relevant memories"
FACT = "The deploy password rotation happens every Friday at 17:00 UTC"
QUESTION = "when does the deploy password rotation happen?"

Start = Callable[..., DaemonHandle]


# -- helpers ------------------------------------------------------------------------------------


def start(start_daemon: Start, **session: Any) -> DaemonHandle:
    return start_daemon(models=MODELS, session={**SESSION, **session})


def big(n: int) -> str:
    """A user message of ~600 tokens (by our count and by the fake's), unique per n."""
    return f"Topic {n}: " + " ".join(f"alpha{n} beta{i} gamma" for i in range(120))


def summary_with(tag: str) -> str:
    return "\n".join(f"## {section}\n- {tag}" for section in REQUIRED_SECTIONS)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def compactions(sse: SseReader, n: int = 1) -> list[dict[str, Any]]:
    """The first ``n`` compaction events, once they have arrived."""
    events: list[dict[str, Any]] = wait_for(
        lambda: len(sse.named("compaction")) >= n and sse.named("compaction"), f"{n} compaction event(s)"
    )
    return events[:n]


def converse(
    handle: DaemonHandle,
    scripted: ScriptedOpenAIThread,
    session_id: str,
    texts: list[str],
    *,
    tools: bool,
    last_usage: tuple[int, int] = OVER,
) -> None:
    """One turn per text (with one current_time call each if ``tools``); only the last
    turn's final reply reports ``last_usage``."""
    for i, text in enumerate(texts):
        usage = last_usage if i == len(texts) - 1 else UNDER
        if tools:
            scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})], usage=UNDER))
        scripted.enqueue(Reply(text=f"answer {text[:8]}", usage=usage))
        response = handle.send(session_id, text, wait=True)
        assert response.status_code == 200, response.text


def tool_conversation(handle: DaemonHandle, scripted: ScriptedOpenAIThread, session_id: str) -> None:
    """Five turns of ~650 tokens with tool calls; the last makes two tool calls in a row and
    its final reply reports usage over the threshold. Our own estimate stays below it.

    With ``keep_recent_tool_results`` 1, the newest turn's first result is cleared while the
    newest turn is always kept: the kept part shows a placeholder however much is kept.
    """
    converse(handle, scripted, session_id, [big(n) for n in range(4)], tools=True, last_usage=UNDER)
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("current_time", {})], usage=UNDER),
        Reply(tool_calls=[ToolCallSpec("current_time", {"timezone": "Asia/Tokyo"})], usage=UNDER),
        Reply(text="answer 4", usage=OVER),
    )
    response = handle.send(session_id, big(4), wait=True)
    assert response.status_code == 200, response.text


def marked(scripted: ScriptedOpenAIThread, marker: str) -> list[dict[str, Any]]:
    """Requests whose system message carries ``marker`` (compaction's LLM calls)."""
    return [r for r in scripted.requests if r["messages"] and marker in str(r["messages"][0].get("content"))]


def index_of(scripted: ScriptedOpenAIThread, body: dict[str, Any]) -> int:
    return next(i for i, r in enumerate(scripted.requests) if r is body)


def blob(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"])


def journal(handle: DaemonHandle, session_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    db = handle.daemon.settings.database_path
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT seq, type, payload FROM events WHERE persistence_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    return [(seq, kind, json.loads(payload)) for seq, kind, payload in rows]


def seq_of(rows: list[tuple[int, str, dict[str, Any]]], kind: str, **match: Any) -> list[int]:
    """The seqs of ``kind`` rows whose payload has the ``match`` values."""
    return [
        seq
        for seq, k, payload in rows
        if k == kind and all(payload.get(key) == value for key, value in match.items())
    ]


def assert_no_orphans(messages: list[dict[str, Any]]) -> None:
    """Every tool call has its result after it, every result its call before it."""
    calls: set[str] = set()
    results: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            calls |= {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in calls, f"tool result {m['tool_call_id']} without its call"
            results.add(m["tool_call_id"])
    assert calls == results, f"tool calls without a result: {sorted(calls - results)}"


def run(handle: DaemonHandle, coro: Any) -> Any:
    """Run ``coro`` on the daemon's loop (where its memory store lives)."""
    io = handle.daemon.io
    assert io is not None
    return io.run(coro, 10)


def memory_of(handle: DaemonHandle) -> SqliteMemoryStore:
    store = handle.daemon.memory
    assert store is not None, "the daemon opens a memory store"
    return store


# -- 1. all tiers -------------------------------------------------------------------------------


def test_threshold_crossed_runs_every_tier_in_order(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted)
    sid = "cli:tiers"
    sse = SseReader(handle, sid, "text,tool_calls")
    try:
        tool_conversation(handle, scripted, sid)
        [event] = compactions(sse)
        originals = {e["id"]: e["content"] for e in sse.named("tool_result")}
    finally:
        sse.close()

    # Tier 2 (flush) ran before tier 3 (summary); both carry no tools.
    [flush] = marked(scripted, FLUSH_MARKER)
    [summary] = marked(scripted, SUMMARY_MARKER)
    assert index_of(scripted, flush) < index_of(scripted, summary)
    assert not flush.get("tools") and not summary.get("tools")

    assert event["session_id"] == sid
    assert event["summarized"] is True
    assert event["tool_results_cleared"] >= 1
    assert event["memories_saved"] == 0  # the flush answered []
    assert event["messages_before"] > event["messages_after"]
    assert event["tokens_before"] > event["tokens_after"]
    assert event["tiers"] == ["clear_tool_results", "memory_flush", "summary"]

    # The projection: system prompt, summary, then a kept part starting at a real user message.
    context = handle.transcript(sid, view="context")
    transcript = handle.transcript(sid)
    assert context[0]["role"] == "system"
    assert context[0]["content"] == trusted(handle.daemon.settings.agent.system_prompt)
    assert context[1]["kind"] == "compaction_summary"
    assert GOOD_SUMMARY in context[1]["content"]
    first_kept = context[2]
    assert first_kept["role"] == "user" and first_kept.get("kind") in (None, "chat")
    kept = context[2:]
    assert_no_orphans(kept)
    assert not any(m.get("kind") == "compaction_summary" for m in kept)
    # Summarised turns are gone from the projection (but were sent to the summariser) ...
    at = next(i for i, m in enumerate(transcript) if m["id"] == first_kept["id"])
    summarised_users = [m["content"] for m in transcript[:at] if m["role"] == "user"]
    assert summarised_users, "the oldest turns must have been summarised"
    kept_texts = {m["content"] for m in kept}
    for text in summarised_users:
        assert text not in kept_texts
        assert text[:40] in blob(summary)
    # ... while the kept part is the transcript from the boundary on, id for id.
    assert [m["id"].removeprefix("cleared:") for m in kept] == [m["id"] for m in transcript[at:]]
    # Old results in the kept part are placeholders; the transcript keeps the originals.
    placeholders = [m for m in kept if m["role"] == "tool" and m["content"].startswith(PLACEHOLDER)]
    assert placeholders, "the kept part should show an old tool result as a placeholder"
    by_call = {m["tool_call_id"]: m for m in transcript if m["role"] == "tool"}
    for p in placeholders:
        assert "current_time" in p["content"]
        assert by_call[p["tool_call_id"]]["content"] == originals[p["tool_call_id"]]
        assert not by_call[p["tool_call_id"]]["content"].startswith(PLACEHOLDER)
    newest_result = [m for m in kept if m["role"] == "tool"][-1]
    assert newest_result["content"] == originals[newest_result["tool_call_id"]]  # kept in full
    assert "Asia/Tokyo" in newest_result["content"]

    # The next turn's prompt carries the summary, not the summarised messages.
    scripted.enqueue(Reply(text="carrying on", usage=UNDER))
    assert handle.send(sid, "and now?", wait=True).json()["reply"] == "carrying on"
    sent = blob(chat_requests(scripted)[-1])
    assert GOOD_SUMMARY in sent
    assert first_kept["content"] in sent
    for text in summarised_users:
        assert text not in sent
    assert len(marked(scripted, SUMMARY_MARKER)) == 1  # no second compaction


# -- 2. tier 1 alone ----------------------------------------------------------------------------


def test_clearing_tool_results_alone_can_be_enough(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted)
    # Big memories make one search_memory result of ~1 900 tokens (the prompt stays under the
    # threshold until the provider says otherwise); nothing the users say matches them, so
    # recall stays out of the prompts.
    runbook = [
        NewMemory(f"Runbook entry {i}: " + " ".join(f"step{i}x{j} verify host{j}" for j in range(76)))
        for i in range(6)
    ]
    run(handle, memory_of(handle).add(runbook, session_id="seed", audience="personal"))
    sid = "cli:tier1"
    sse = SseReader(handle, sid, "text,tool_calls")
    try:
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("search_memory", {"query": "runbook", "limit": 10})], usage=UNDER),
            Reply(text="found them", usage=UNDER),
        )
        assert handle.send(sid, "first question", wait=True).status_code == 200
        [found] = sse.named("tool_result")
        assert found["content"].count("Runbook entry") == 6 and not found["is_error"]
        # The provider says 5 200 tokens: just over the threshold. Clearing the big result
        # brings the prompt far below it, so no LLM tier runs.
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("current_time", {})], usage=UNDER),
            Reply(text="it is late", usage=(5200, 5)),
        )
        assert handle.send(sid, "second question", wait=True).status_code == 200
        [event] = compactions(sse)
    finally:
        sse.close()

    assert marked(scripted, FLUSH_MARKER) == [] and marked(scripted, SUMMARY_MARKER) == []
    assert event["summarized"] is False
    assert event["tool_results_cleared"] == 1
    assert event["tiers"] == ["clear_tool_results"]
    assert event["memories_saved"] == 0
    assert event["messages_after"] == event["messages_before"]
    assert event["tokens_before"] - event["tokens_after"] > 1000

    context = handle.transcript(sid, view="context")
    assert not any(m.get("kind") == "compaction_summary" for m in context)
    [cleared] = [m for m in context if m["role"] == "tool" and m["content"].startswith(PLACEHOLDER)]
    assert cleared["tool_call_id"] == found["id"] and "search_memory" in cleared["content"]
    stored = next(m for m in handle.transcript(sid) if m.get("tool_call_id") == found["id"])
    assert stored["content"] == found["content"]
    scripted.enqueue(Reply(text="ok", usage=UNDER))
    assert handle.send(sid, "third question", wait=True).status_code == 200
    sent = blob(chat_requests(scripted)[-1])
    assert "Runbook entry" not in sent and cleared["content"] in sent


# -- 3. the quality guard -----------------------------------------------------------------------


def test_summary_missing_sections_is_retried_once(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    partial = "\n".join(f"## {s}\n- partial" for s in REQUIRED_SECTIONS[:2])
    answers = iter([partial, GOOD_SUMMARY])
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=next(answers)))
    sid = "cli:guard"
    sse = SseReader(handle, sid)
    try:
        converse(handle, scripted, sid, [big(n) for n in range(5)], tools=False)
        [event] = compactions(sse)
    finally:
        sse.close()

    assert event["summarized"] is True and event["note"] is None
    first, second = marked(scripted, SUMMARY_MARKER)
    missing = REQUIRED_SECTIONS[2:]
    retry_instructions = second["messages"][0]["content"]
    assert "previous attempt was missing" in retry_instructions
    for section in missing:
        assert f'"{section}"' in retry_instructions
    for section in REQUIRED_SECTIONS[:2]:
        assert f'"{section}"' not in retry_instructions
    assert "previous attempt" not in first["messages"][0]["content"]
    context = handle.transcript(sid, view="context")
    [summary] = [m for m in context if m.get("kind") == "compaction_summary"]
    assert GOOD_SUMMARY in summary["content"] and "partial" not in summary["content"]


def test_summary_still_bad_after_retry_is_cancelled(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted, summary="## Key decisions\n- none of the other sections")
    sid = "cli:cancelled"
    sse = SseReader(handle, sid)
    try:
        tool_conversation(handle, scripted, sid)
        [event] = compactions(sse)
    finally:
        sse.close()

    assert len(marked(scripted, SUMMARY_MARKER)) == 2  # one retry, then give up
    assert event["summarized"] is False
    assert "cancelled" in event["note"]
    assert "summary" not in event["tiers"]
    assert event["messages_after"] == event["messages_before"]
    # The projection is the whole transcript (tier 1's placeholders aside): nothing dropped.
    context = handle.transcript(sid, view="context")
    transcript = handle.transcript(sid)
    assert not any(m.get("kind") in ("compaction_summary", "trim_breadcrumb") for m in context)
    said = [m for m in context[1:] if m.get("kind") != "context"]  # the tails are netclaw's
    assert [m["id"].removeprefix("cleared:") for m in said] == [m["id"] for m in transcript]
    assert_no_orphans(context[1:])
    scripted.enqueue(Reply(text="still here", usage=UNDER))
    assert handle.send(sid, "next", wait=True).status_code == 200
    sent = blob(chat_requests(scripted)[-1])
    for n in range(5):
        assert big(n) in sent


def test_a_session_whose_summaries_fail_is_shown_in_status_and_metrics(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted, summary="## Key decisions\n- none of the other sections")
    sid = "cli:failing"
    sse = SseReader(handle, sid)
    try:
        tool_conversation(handle, scripted, sid)
        compactions(sse)
        notice = wait_for(
            lambda: [n for n in sse.named("notice") if n["kind"] == "compaction_failing"], "notice"
        )
    finally:
        sse.close()
    assert "could not summarise" in notice[0]["text"] and "tries again in 3 turn(s)" in notice[0]["text"]
    health = handle.http.get("/healthz").json()
    assert health["compaction_failing"] == {sid: 1}
    assert health["status"] == "ok"  # the session trims instead: not a fault of the daemon
    metrics = handle.http.get("/metrics").text
    assert "netclaw_sessions_compaction_failing 1.0" in metrics


# -- 4. merging with the prior summary ----------------------------------------------------------


def test_second_compaction_merges_the_prior_summary(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    first_summary, second_summary = summary_with("ticket OPS-1111"), summary_with("ticket OPS-2222")
    answers = iter([first_summary, second_summary])
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=next(answers)))
    sid = "cli:merge"
    sse = SseReader(handle, sid)
    try:
        tool_conversation(handle, scripted, sid)
        compactions(sse, 1)
        first_kept = handle.transcript(sid, view="context")[2]
        converse(handle, scripted, sid, [big(5)], tools=False)
        _, second = compactions(sse, 2)
    finally:
        sse.close()

    assert second["summarized"] is True
    merge_one, merge_two = marked(scripted, SUMMARY_MARKER)
    assert "MERGE" not in merge_one["messages"][0]["content"]
    assert "MERGE" in merge_two["messages"][0]["content"]
    request = merge_two["messages"][1]["content"]
    assert first_summary.strip() in request  # the prior summary, to merge with ...
    assert first_kept["content"][:40] in request  # ... the newly summarised turns,
    assert "Topic 0:" not in request  # not the turns the prior summary already covers
    context = handle.transcript(sid, view="context")
    summaries = [m for m in context if m.get("kind") == "compaction_summary"]
    assert summaries == [context[1]]
    assert "OPS-2222" in summaries[0]["content"] and "OPS-1111" not in summaries[0]["content"]
    assert context[2]["role"] == "user" and first_kept["content"] not in {m["content"] for m in context}


# -- 5. between tool iterations -----------------------------------------------------------------


def test_compaction_between_tool_iterations_then_the_turn_completes(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted)
    sid = "cli:midloop"
    converse(handle, scripted, sid, [big(n) for n in range(4)], tools=False, last_usage=UNDER)
    sse = SseReader(handle, sid, "text,tool_calls")
    try:
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("current_time", {"timezone": "Europe/Berlin"})], usage=OVER),
            Reply(text="It is evening in Berlin.", usage=UNDER),
        )
        response = handle.send(sid, "what time is it in Berlin?", wait=True)
        wait_for(lambda: [p["to"] for p in sse.named("phase")][-1:] == ["ready"], "phase ready")
    finally:
        sse.close()

    assert response.status_code == 200, response.text
    assert response.json()["reply"] == "It is evening in Berlin." and response.json()["turn"] == 5
    phases = [p["to"] for p in sse.named("phase")]
    assert phases == ["processing", "compacting", "processing", "ready"]
    names = [
        name for name, _ in sse.events if name in ("tool_result", "compaction", "text", "turn_completed")
    ]
    assert names == ["tool_result", "compaction", "text", "turn_completed"]
    [event] = sse.named("compaction")
    assert event["summarized"] is True
    assert [t["turn"] for t in sse.named("turn_completed")] == [5]

    # The call after compaction: the summary, then this turn with its call and result intact.
    [result] = sse.named("tool_result")
    final = chat_requests(scripted)[-1]["messages"]
    assert SUMMARY_MARKER not in str(final[0]["content"])
    assert any(GOOD_SUMMARY in str(m["content"]) for m in final)
    assert final[-1] == {"role": "tool", "tool_call_id": result["id"], "content": result["content"]}
    assert final[-2]["tool_calls"][0]["id"] == result["id"]
    assert final[-3] == {"role": "user", "content": "what time is it in Berlin?"}
    transcript = handle.transcript(sid)
    assert [m["role"] for m in transcript[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert transcript[-1]["content"] == "It is evening in Berlin."


# -- 6. buffering -------------------------------------------------------------------------------


def test_messages_sent_during_compaction_are_buffered_in_order(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=GOOD_SUMMARY, delay_s=1.5))
    sid = "cli:buffer"
    sse = SseReader(handle, sid)
    try:
        converse(handle, scripted, sid, [big(n) for n in range(5)], tools=False)
        wait_for(lambda: any(p["to"] == "compacting" for p in sse.named("phase")), "phase compacting")
        scripted.enqueue(Reply(text="reply A", usage=UNDER), Reply(text="reply B", usage=UNDER))
        acks = []
        for text in ("buffered A", "buffered B"):
            response = handle.send(sid, text)
            acks.append(response.status_code)
            assert response.status_code == 202, response.text
        compactions(sse)
        wait_for(lambda: len(sse.named("turn_completed")) >= 7, "both buffered turns")
    finally:
        sse.close()

    assert all(status == 202 for status in acks), acks  # and acknowledged during compaction:
    rows = journal(handle, sid)
    [compacted] = seq_of(rows, "SessionCompacted")
    text_of = dict(user_rows(handle))
    admitted = {p["message"]["content"]: seq for seq, k, p in rows if k == "InputAdmitted"}
    started = {text_of[p["message_id"]]: seq for seq, k, p in rows if k == "TurnStarted"}
    for text in ("buffered A", "buffered B"):
        assert admitted[text] < compacted < started[text], "acknowledged during compaction, handled after"
    assert started["buffered A"] < started["buffered B"]
    tail = [(m["role"], m["content"]) for m in handle.transcript(sid)[-4:]]
    assert tail == [
        ("user", "buffered A"),
        ("assistant", "reply A"),
        ("user", "buffered B"),
        ("assistant", "reply B"),
    ]
    assert GOOD_SUMMARY in blob(chat_requests(scripted)[-2])  # A's turn saw the summary


# -- 7. memory flush and recall -----------------------------------------------------------------


def test_memory_flush_happens_before_the_summary_and_is_recalled_later(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    db = handle.daemon.settings.database_path
    stored_before_summary: list[int] = []

    def summarise(body: dict[str, Any]) -> Reply:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            (count,) = conn.execute("SELECT COUNT(*) FROM memories WHERE text = ?", (FACT,)).fetchone()
        stored_before_summary.append(count)
        return Reply(text=GOOD_SUMMARY)

    scripted.route(FLUSH_MARKER, lambda body: Reply(text=json.dumps([{"text": FACT, "kind": "fact"}])))
    scripted.route(SUMMARY_MARKER, summarise)
    sid = "cli:flush"
    sse = SseReader(handle, sid)
    try:
        converse(handle, scripted, sid, [big(n) for n in range(5)], tools=False)
        [event] = compactions(sse)
    finally:
        sse.close()

    assert event["memories_saved"] == 1 and event["summarized"] is True
    assert stored_before_summary == [1], "the fact must be durable before the summary is asked for"
    [flush] = marked(scripted, FLUSH_MARKER)
    assert "Topic 0:" in blob(flush)  # the flush saw the part about to be summarised
    found = run(handle, memory_of(handle).search("deploy password rotation", audience="personal"))
    assert [(m.text, m.kind, m.session_id) for m in found] == [(FACT, "fact", sid)]

    # A later turn about the topic gets the fact in its volatile tail, right after the question
    # (nothing above the newest turn changes), and recorded there: the next request repeats it.
    scripted.enqueue(Reply(text="Fridays at 17:00 UTC.", usage=UNDER))
    assert handle.send(sid, QUESTION, wait=True).json()["reply"] == "Fridays at 17:00 UTC."
    messages = chat_requests(scripted)[-1]["messages"]
    recall = [m for m in messages if RECALL in str(m["content"])]
    assert len(recall) == 1 and FACT in recall[0]["content"] and recall[0]["role"] == "user"
    # One user message: the question, then (after a blank line) the tail with the memories.
    assert recall[0] is messages[-1] and said(recall[0]["content"]) == QUESTION
    assert not any(m["role"] == "system" and RECALL in str(m["content"]) for m in messages)
    scripted.enqueue(Reply(text="ok", usage=UNDER))
    assert handle.send(sid, "thanks", wait=True).status_code == 200
    assert chat_requests(scripted)[-1]["messages"][: len(messages)] == messages
    assert any(RECALL in m["content"] for m in handle.transcript(sid, view="context"))
    assert not any(RECALL in m["content"] for m in handle.transcript(sid))


# -- 8. public audience -------------------------------------------------------------------------


def test_public_session_gets_no_recall_and_cannot_remember(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    memory = memory_of(handle)
    run(handle, memory.add([NewMemory(FACT, "fact")], session_id="x", audience="public"))
    run(handle, memory.add([NewMemory(FACT, "fact")], session_id="cli:me", audience="personal"))
    count = run(handle, memory.count())
    sid = "webhook:alerts:x"
    sse = SseReader(handle, sid, "text,tool_calls")
    try:
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("remember", {"text": "The vault code is 4711"})], usage=UNDER),
            Reply(text="noted", usage=UNDER),
        )
        response = handle.send(sid, QUESTION, wait=True)
        wait_for(lambda: sse.named("turn_completed"), "turn_completed")
    finally:
        sse.close()

    assert response.status_code == 200, response.text
    requests = chat_requests(scripted)
    assert len(requests) == 2
    for body in requests:
        assert RECALL not in blob(body) and FACT not in blob(body)
    [result] = sse.named("tool_result")
    assert result["name"] == "remember" and result["is_error"] is True
    assert "public" in result["content"]
    assert run(handle, memory.count()) == count
    assert run(handle, memory.search("vault code")) == []
    # The same question in a personal session does get the (personal) memory: recall works.
    scripted.enqueue(Reply(text="Fridays", usage=UNDER))
    assert handle.send("cli:me", QUESTION, wait=True).status_code == 200
    assert FACT in blob(chat_requests(scripted)[-1])


# -- 9. time budget -----------------------------------------------------------------------------


def test_compaction_over_its_time_budget_is_abandoned_visibly(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    # The budget leaves the memory flush (a model call, an embedding, a write) time on a
    # loaded machine; the summary's answer comes long after it.
    handle = start(start_daemon, compaction_timeout_s=2.0)
    scripted.route(FLUSH_MARKER, lambda body: Reply(text=json.dumps([{"text": FACT}])))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=GOOD_SUMMARY, delay_s=10.0))
    sid = "cli:budget"
    converse(handle, scripted, sid, [big(n) for n in range(4)], tools=False, last_usage=UNDER)
    sse = SseReader(handle, sid)
    try:
        # The crossing turn answers slowly, so two more messages queue up behind it and
        # wait through its compaction.
        scripted.enqueue(
            Reply(text="answer 4", usage=OVER, delay_s=0.3),
            Reply(text="reply A", usage=UNDER),
            Reply(text="reply B", usage=UNDER),
        )
        for text in (big(4), "queued A", "queued B"):
            assert handle.send(sid, text).status_code == 202
        wait_for(lambda: any(p["to"] == "compacting" for p in sse.named("phase")), "phase compacting", 5)
        [event] = compactions(sse)
        # Ended before the summary's answer went out (10 s): at its 2 s budget, not waiting.
        assert not [b for b in scripted.answered if SUMMARY_MARKER in json.dumps(b)]
        wait_for(lambda: len(sse.named("turn_completed")) >= 3, "the queued turns")
    finally:
        sse.close()

    assert event["summarized"] is False
    assert "abandoned" in event["note"] and "2s" in event["note"]
    assert event["memories_saved"] == 1 and "memory_flush" in event["tiers"]  # done before the budget ran out
    context = handle.transcript(sid, view="context")
    assert not any(m.get("kind") == "compaction_summary" for m in context)
    tail = [(m["role"], m["content"]) for m in handle.transcript(sid)[-4:]]
    assert tail == [
        ("user", "queued A"),
        ("assistant", "reply A"),
        ("user", "queued B"),
        ("assistant", "reply B"),
    ]
    rows = journal(handle, sid)
    compacted = seq_of(rows, "SessionCompacted")[0]
    queued = [mid for mid, text in user_rows(handle) if text.startswith("queued")]
    assert all(compacted < seq_of(rows, "TurnStarted", message_id=mid)[0] for mid in queued)


# -- 10. restart --------------------------------------------------------------------------------


def test_projection_after_compaction_survives_restart(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    route_compaction(scripted)
    sid = "cli:restart"
    sse = SseReader(handle, sid)
    try:
        tool_conversation(handle, scripted, sid)
        compactions(sse)
    finally:
        sse.close()
    context = handle.transcript(sid, view="context")
    transcript = handle.transcript(sid)
    assert context[1]["kind"] == "compaction_summary"
    handle.stop()

    again = start(start_daemon)
    # A graceful restart adds its notice to the next turn's tail (shown until it is recorded);
    # the rest is identical.
    restarted = again.transcript(sid, view="context")
    assert restarted[:-1] == context
    assert (
        restarted[-1]["kind"] == "context"
        and "resuming after netclaw was restarted" in restarted[-1]["content"]
    )
    assert again.transcript(sid) == transcript
    # The restarted session sends exactly that projection, then the new message and its tail.
    scripted.enqueue(Reply(text="back", usage=UNDER))
    assert again.send(sid, "after the restart", wait=True).status_code == 200
    sent = as_sent(chat_requests(scripted)[-1]["messages"])
    role, last = sent.pop()
    assert (
        role == "user"
        and said(last) == "after the restart"
        and "resuming after netclaw was restarted" in last
    )
    assert sent == as_sent(context)


# -- the kept part is sized in the provider's tokens --------------------------------------------


def test_compaction_buys_room_when_the_provider_counts_more_than_we_do(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    window = 20_000  # threshold 10 000 provider tokens
    handle = start_daemon(models={"main": {**MODELS["main"], "context_window": window}}, session=SESSION)
    route_compaction(scripted)

    def dense(body: dict[str, Any]) -> Reply:  # a tokenizer that counts 4x what we do
        chars = 4 * estimate_prompt_tokens(body) + len(json.dumps(body.get("tools") or []))
        return Reply(text="ok", usage=(chars, 5))

    scripted.set_responder(dense)
    sid = "cli:dense"
    sse = SseReader(handle, sid, "usage")
    try:
        n = 0

        def readies() -> int:
            return sum(1 for phase in sse.named("phase") if phase["to"] == "ready")

        while not sse.named("compaction"):
            assert n < 30, "never compacted"
            text = f"Note {n}: " + " ".join(f"alpha{n} beta{i} gamma" for i in range(40))
            before = readies()
            assert handle.send(sid, text, wait=True).status_code == 200
            n += 1
            # Back to ready: a compaction this turn started has ended, and its event came first.
            wait_for(lambda before=before: readies() > before, "the session to be ready again")  # type: ignore[misc]
        compactions(sse)
        usages = len(sse.named("usage"))
        for m in range(n, n + 2):
            assert handle.send(sid, f"Note {m}: short", wait=True).status_code == 200
        wait_for(lambda: len(sse.named("usage")) >= usages + 2, "usage of the next turns")
    finally:
        sse.close()
    after = sse.named("usage")[usages]["input_tokens"]
    assert after < THRESHOLD * window, f"the first prompt after compaction is still {after} tokens"
    assert len(sse.named("compaction")) == 1, "a compaction should buy room for more than one turn"


# -- a failing summary call ---------------------------------------------------------------------


def test_failed_summary_call_still_reports_the_flushed_memories(
    start_daemon: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle = start(start_daemon)
    scripted.route(FLUSH_MARKER, lambda body: Reply(text=json.dumps([{"text": FACT, "kind": "fact"}])))
    scripted.route(SUMMARY_MARKER, lambda body: ErrorReply(status=400, message="summary refused"))
    sid = "cli:sumfail"
    sse = SseReader(handle, sid)
    try:
        converse(handle, scripted, sid, [big(n) for n in range(5)], tools=False)
        [event] = compactions(sse)
    finally:
        sse.close()
    assert run(handle, memory_of(handle).search("deploy password rotation", audience="personal"))
    assert event["summarized"] is False and event["note"]
    assert not any(m.get("kind") == "compaction_summary" for m in handle.transcript(sid, view="context"))
    assert event["memories_saved"] == 1, event
    assert "memory_flush" in event["tiers"], event
