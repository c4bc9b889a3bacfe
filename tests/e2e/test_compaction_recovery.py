"""Compaction survives a crash: the daemon runs as a subprocess and is killed with SIGKILL
(no shutdown code runs) right after a compaction was journaled, or while one is running,
then started again on the same data_dir."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from netclaw.history import FLUSH_MARKER, SUMMARY_MARKER
from netclaw.security.trust import system_prompt as trusted
from tests.e2e.conftest import (
    SYSTEM_PROMPT,
    DaemonProcess,
    Setup,
    admitted_inputs,
    journal_rows,
    wait_until,
)
from tests.fakes._scripted_server import as_sent, said
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.integration.test_compaction import (
    OVER,
    PLACEHOLDER,
    UNDER,
    assert_no_orphans,
    big,
    summary_with,
)
from tests.integration.test_history_fidelity import chat_requests, route_compaction

pytestmark = pytest.mark.slow

SECTIONS: dict[str, Any] = {
    "models": {
        "main": {"provider": "local", "model": "m", "context_window": 10000, "max_output_tokens": 500}
    },
    "session": {"compaction_threshold": 0.5, "keep_recent_tool_results": 1},
}
SUMMARY = summary_with("deploy ticket OPS-4242")


def talk(daemon: DaemonProcess, scripted: ScriptedOpenAIThread, session_id: str) -> None:
    """Five turns of ~650 tokens with tool calls (two in the last one, so its first result is
    cleared); the last reports usage over the threshold, our own estimate stays below it."""
    for n in range(5):
        calls = [Reply(tool_calls=[ToolCallSpec("current_time", {})], usage=UNDER)] * (2 if n == 4 else 1)
        scripted.enqueue(*calls, Reply(text=f"answer {n}", usage=OVER if n == 4 else UNDER))
        response = daemon.post(session_id, big(n), wait=True)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("setup", [SECTIONS], indirect=True)
def test_sigkill_right_after_compaction_keeps_the_projection(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    route_compaction(scripted, SUMMARY)
    sid = "cli:compact-crash"
    first = start()
    talk(first, scripted, sid)
    # Kill as soon as the compaction is journaled (its snapshot may not be written yet).
    [compacted] = wait_until(
        lambda: journal_rows(setup.db_path, sid, "SessionCompacted"), 10, "the SessionCompacted row", 0.01
    )
    first.sigkill()
    assert compacted["summary"] == SUMMARY and compacted["first_kept_id"]

    second = start()
    context = second.session(sid, "context")["messages"]
    transcript = second.session(sid)["messages"]
    assert (context[0]["role"], context[0]["content"]) == ("system", trusted(SYSTEM_PROMPT))
    assert context[1]["kind"] == "compaction_summary" and SUMMARY in context[1]["content"]
    assert context[2]["id"] == compacted["first_kept_id"] and context[2]["role"] == "user"
    assert_no_orphans(context[2:])
    at = next(i for i, m in enumerate(transcript) if m["id"] == compacted["first_kept_id"])
    assert [m["id"].removeprefix("cleared:") for m in context[2:]] == [m["id"] for m in transcript[at:]]
    for m in context[2:]:
        if m["role"] == "tool":
            assert m["content"].startswith(PLACEHOLDER) == (m["tool_call_id"] in compacted["cleared"])
    assert len(transcript) == 5 * 4 + 2  # every message of every turn is still recorded
    assert any(m["content"].startswith(PLACEHOLDER) for m in context[2:])

    # The same projection after a second crash, and it is exactly what the next call sends.
    second.sigkill()
    third = start()
    assert third.session(sid, "context")["messages"] == context
    scripted.enqueue(Reply(text="back again", usage=UNDER))
    response = third.post(sid, "after the crash", wait=True)
    assert response.status_code == 200, response.text
    sent = as_sent(chat_requests(scripted)[-1]["messages"])
    assert sent[:-1] == as_sent(context)
    # The new message with its turn's tail (the time: the summary took the last one told).
    assert (
        sent[-1][0] == "user" and said(sent[-1][1]) == "after the crash" and sent[-1][1] != "after the crash"
    )
    assert len(journal_rows(setup.db_path, sid, "SessionCompacted")) == 1


@pytest.mark.parametrize("setup", [SECTIONS], indirect=True)
def test_sigkill_during_compaction_loses_no_buffered_message(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    scripted.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
    scripted.route(SUMMARY_MARKER, lambda body: Reply(text=SUMMARY, delay_s=5))
    sid = "cli:compact-midway"
    first = start()
    talk(first, scripted, sid)
    wait_until(lambda: any(SUMMARY_MARKER in str(r["messages"][0]) for r in scripted.requests), 10, "summary")
    scripted.enqueue(Reply(text="reply to the buffered one", usage=UNDER))
    buffered = first.acked(sid, "sent while compacting")
    assert [m["id"] for m in first.session(sid)["messages"] if m.get("pending")] == [buffered]
    first.sigkill()
    assert journal_rows(setup.db_path, sid, "SessionCompacted") == []

    second = start()
    session = wait_until(
        lambda: (s := second.session(sid))["messages"][-1]["content"] == "reply to the buffered one" and s,
        20,
        "the buffered message to be answered after the restart",
    )
    users = [m for m in session["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == [big(n) for n in range(5)] + ["sent while compacting"]
    assert users[-1]["id"] == buffered
    assert [m["content"] for m in admitted_inputs(setup.db_path, sid)].count("sent while compacting") == 1
    # The interrupted compaction left nothing half-done: no message lost, and whatever the
    # projection shows comes from the compaction the restarted session ran itself (it was
    # over the threshold): placeholders of the same messages, and a summary only if that one
    # recorded it.
    context = second.session(sid, "context")["messages"]
    said = [m for m in context[1:] if m.get("kind") != "context"]
    kept = [m["id"] for m in session["messages"]]
    redone = journal_rows(setup.db_path, sid, "SessionCompacted")
    summarised = [r for r in redone if r["summary"]]
    if summarised:
        assert said[0]["kind"] == "compaction_summary" and SUMMARY in said[0]["content"]
        said, kept = said[1:], kept[kept.index(summarised[-1]["first_kept_id"]) :]
    else:
        assert not any(m.get("kind") == "compaction_summary" for m in context)
    assert [m["id"].removeprefix("cleared:") for m in said] == kept
