"""The audit trail derived from journal events (pure): approvals with who decided and what,
tool runs with their outcome and whose turn it was, resets — each event once."""

from __future__ import annotations

import json

from netclaw.messages import ChatMessage, ToolCall
from netclaw.security.audit import from_journal, select
from netclaw.security.policy import Place
from netclaw.sessions._core.journal.codec import encode
from netclaw.sessions._core.journal.events import (
    ApprovalDecided,
    ApprovalRequest,
    ApprovalRequested,
    InputAdmitted,
    SessionReset,
    StepRecorded,
    TurnStarted,
)


def rows(session: str, *events: object) -> list[tuple[str, int, str, float, str]]:
    out = []
    for seq, event in enumerate(events, 1):
        kind, payload = encode(event)  # type: ignore[arg-type]
        out.append((session, seq, kind, float(seq), payload))
    return out


def test_approvals_tool_runs_and_resets_with_who_and_what() -> None:
    user = ChatMessage("u1", "user", "deploy", 0.0, speaker="slack:U1", speaker_role="ops")
    call = ToolCall("c1", "deploy", '{"env":"prod"}')
    other = ToolCall("c2", "web_fetch", "{}")
    assistant = ChatMessage("a1", "assistant", "", 0.0, tool_calls=(call, other))
    request = ApprovalRequest("ap-1", "c1", "deploy", '{"env":"prod"}', 1.0, 2.0)
    results = (
        ChatMessage("t1", "tool", "deployed", 0.0, tool_call_id="c1", name="deploy"),
        ChatMessage(
            "t2",
            "tool",
            "error: tool 'web_fetch' is not available to personal sessions",
            0.0,
            tool_call_id="c2",
            is_error=True,
        ),
    )
    entries = from_journal(
        rows(
            "slack:C1:1",
            InputAdmitted(user, Place()),
            TurnStarted(1, "u1"),
            ApprovalRequested(1, assistant, (request,)),
            ApprovalDecided("ap-1", "approve", "Ana"),
            StepRecorded(1, (assistant, *results)),
            SessionReset("Bo"),
        )
    )
    assert [(e.kind, e.actor) for e in entries] == [
        ("approval_requested", "slack:U1"),
        ("approval_decided", "Ana"),
        ("tool_run", "slack:U1"),
        ("tool_run", "slack:U1"),
        ("session_reset", "Bo"),
    ]
    assert entries[1].detail["tool"] == "deploy" and json.loads(entries[1].detail["arguments"]) == {
        "env": "prod"
    }
    assert [e.detail["outcome"] for e in entries[2:4]] == ["ok", "refused"]
    assert len({e.key for e in entries}) == len(entries)  # each event's entries have their own key
    assert [e.kind for e in select(entries, since=5.0)] == ["tool_run", "tool_run", "session_reset"]
