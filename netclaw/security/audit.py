"""The audit trail: who did what, when (pure).

Two sources, one list:

- **The journal**, for what happens inside sessions: tool calls asked for approval, each
  decision (who, which call, with what arguments), each tool run and its outcome, resets.
  The journal is append-only and records each of these exactly once, across crashes and
  retries, so the trail is derived from it (:func:`from_journal`) rather than written twice.
- **The audit table**, for what happens outside sessions: config reloads, session
  deletions, memory deletions, API token changes. Before a session's journal is erased its
  entries are copied there (keyed, so a repeated copy adds nothing), so deleting a session
  does not delete its trail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Journal event types the trail reads (InputAdmitted and TurnStarted only for whose turn it is).
JOURNAL_TYPES = (
    "InputAdmitted",
    "TurnStarted",
    "ApprovalRequested",
    "ApprovalDecided",
    "StepRecorded",
    "SessionReset",
)
MAX_ARGUMENTS_CHARS = 2000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float  # unix time
    kind: str  # approval_requested, approval_decided, tool_run, session_reset, session_deleted, ...
    actor: str  # who: a person, a token ("token:ci"), "control" (the control token), "model", "daemon"
    session_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None  # identity of an entry derived from the journal (session:seq:n)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind,
            "actor": self.actor,
            "session_id": self.session_id,
            "detail": dict(self.detail),
        }


def _short(text: str) -> str:
    return text if len(text) <= MAX_ARGUMENTS_CHARS else text[:MAX_ARGUMENTS_CHARS] + "…"


def _outcome(content: str, is_error: bool) -> str:
    if not is_error:
        return "ok"
    if content.startswith("error: the call to ") or " is not available " in content:
        return "refused"
    return "error"


JournalRow = tuple[str, int, str, float, str]  # persistence_id, seq, type, ts, payload (JSON)


def from_journal(rows: Iterable[JournalRow]) -> list[AuditEntry]:
    """The trail of the given journal rows, which must come per session in ``seq`` order
    (each session's rows together). Each entry's ``key`` names the event it came from."""
    entries: list[AuditEntry] = []
    speakers: dict[str, str] = {}  # message id → who sent it
    turn_speaker: dict[int, str] = {}
    requests: dict[str, Mapping[str, Any]] = {}
    current: str | None = None
    for session_id, seq, type_name, ts, payload in rows:
        if session_id != current:
            current = session_id
            speakers, turn_speaker, requests = {}, {}, {}
        data = json.loads(payload)
        key = f"{session_id}:{seq}"
        match type_name:
            case "InputAdmitted":
                message = data.get("message", data)
                who = message.get("speaker") or message.get("user") or "unknown"
                speakers[str(message.get("id"))] = str(who)
            case "TurnStarted":
                turn_speaker[int(data["turn"])] = speakers.get(str(data["message_id"]), "unknown")
            case "ApprovalRequested":
                turn = int(data["turn"])
                for n, request in enumerate(data["requests"]):
                    requests[str(request["id"])] = request
                    entries.append(
                        AuditEntry(
                            ts,
                            "approval_requested",
                            turn_speaker.get(turn, "unknown"),
                            session_id,
                            {
                                "approval_id": request["id"],
                                "tool": request["tool"],
                                "arguments": _short(str(request["arguments"])),
                                "turn": turn,
                            },
                            f"{key}:{n}",
                        )
                    )
            case "ApprovalDecided":
                request = requests.get(str(data["approval_id"]), {})
                entries.append(
                    AuditEntry(
                        ts,
                        "approval_decided",
                        str(data["by"]),
                        session_id,
                        {
                            "approval_id": data["approval_id"],
                            "decision": data["decision"],
                            "tool": request.get("tool"),
                            "arguments": _short(str(request.get("arguments", ""))),
                        },
                        key,
                    )
                )
            case "StepRecorded":
                turn = int(data["turn"])
                calls = {}
                for message in data["messages"]:
                    for call in message.get("tool_calls") or ():
                        calls[str(call["id"])] = call
                n = 0
                for message in data["messages"]:
                    if message.get("role") != "tool":
                        continue
                    call = calls.get(str(message.get("tool_call_id")), {})
                    content = str(message.get("content", ""))
                    entries.append(
                        AuditEntry(
                            ts,
                            "tool_run",
                            turn_speaker.get(turn, "unknown"),
                            session_id,
                            {
                                "call_id": message.get("tool_call_id"),
                                "tool": call.get("name") or message.get("name"),
                                "arguments": _short(str(call.get("arguments", ""))),
                                "outcome": _outcome(content, bool(message.get("is_error"))),
                                "turn": turn,
                            },
                            f"{key}:{n}",
                        )
                    )
                    n += 1
            case "SessionReset":
                entries.append(AuditEntry(ts, "session_reset", str(data["by"]), session_id, {}, key))
    return entries


def select(
    entries: Iterable[AuditEntry], *, since: float | None = None, session_id: str | None = None
) -> list[AuditEntry]:
    """Entries at or after ``since`` (of ``session_id``), oldest first."""
    found = [
        e
        for e in entries
        if (since is None or e.at >= since) and (session_id is None or e.session_id == session_id)
    ]
    found.sort(key=lambda e: e.at)
    return found
