"""Small values a session's state holds: the active turn, a tool round waiting for
decisions (or recorded before it runs), and how a turn ended (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netclaw.messages import ChatMessage
from netclaw.records import builder
from netclaw.sessions._core.journal.events import (
    ApprovalRequest,
    Decision,
    SessionCompacted,
    TurnRecorded,
    TurnStatus,
)

MAX_OUTCOMES = 1_000  # how recent turns ended, by the message that started them (?wait=1)
MAX_FAILURES_SHOWN = 10_000  # failed turns remembered for the transcript view
MAX_CLOSED_APPROVALS = 200  # decided requests remembered, so a late second decision is a 409


@dataclass(frozen=True, slots=True)
class ActiveTurn:
    turn: int
    message_id: str
    steps: int = 0  # tool iterations already recorded (a resumed turn continues from here)
    model: str | None = None  # the fallback this turn switched to (None: the session's model)


@dataclass(frozen=True, slots=True)
class PendingRound:
    """A tool round waiting for decisions (``ApprovalRequested``), or recorded before it
    runs (``RoundStarted``: no requests)."""

    turn: int
    assistant: ChatMessage
    requests: tuple[ApprovalRequest, ...]
    decisions: Mapping[str, tuple[Decision, str]] = field(default_factory=dict)  # id → (decision, by)

    @property
    def open(self) -> tuple[ApprovalRequest, ...]:
        return tuple(r for r in self.requests if r.id not in self.decisions)

    def find(self, approval_id: str) -> ApprovalRequest | None:
        return next((r for r in self.requests if r.id == approval_id), None)

    def ended(self) -> dict[str, tuple[str, str]]:
        """The requests still open when the round's turn ends: closed with it."""
        return {r.id: ("cancelled", "the turn ended") for r in self.open}

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "assistant": self.assistant.to_dict(),
            "requests": [r.to_dict() for r in self.requests],
            "decisions": {k: list(v) for k, v in self.decisions.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingRound:
        return cls(
            int(d["turn"]),
            ChatMessage.from_dict(d["assistant"]),
            tuple(ApprovalRequest.from_dict(r) for r in d["requests"]),
            {k: (v[0], str(v[1])) for k, v in d.get("decisions", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    turn: int
    status: TurnStatus
    reply: str | None
    error: Mapping[str, str] | None = None
    # The assistant message the reply is (snapshots refer to it); bookkeeping, not part of
    # what an outcome is.
    reply_id: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "status": self.status, "reply": self.reply, "error": self.error}


_outcome = builder(TurnOutcome)  # every field, in order: one per recorded turn (recovery's fold)


def remember_outcome(
    outcomes: Mapping[str, TurnOutcome],
    failures: Mapping[str, TurnOutcome],
    event: TurnRecorded,
    answer: ChatMessage | None,
    *,
    owned: bool = False,
) -> tuple[dict[str, TurnOutcome], Mapping[str, TurnOutcome]]:
    """How the turn ``event`` records ended, added to the outcomes by the message that
    started it (and to the failures when it did not complete), the oldest forgotten past
    the bounds. ``owned``: the mappings are the fold's own (dicts), changed in place."""
    outcome = _outcome(
        event.turn,
        event.status,
        answer.content if answer is not None else None,
        event.error,
        answer.id if answer is not None else None,
    )
    if owned:
        assert isinstance(outcomes, dict) and isinstance(failures, dict)
        remembered, failed = outcomes, failures
        remembered[event.message_id] = outcome  # where {**outcomes, id: outcome} has it
    else:
        remembered = {**outcomes, event.message_id: outcome}
    if len(remembered) > MAX_OUTCOMES:
        del remembered[next(iter(remembered))]
    if event.status == "completed":
        return remembered, failures
    if owned:
        failed[event.message_id] = outcome
    else:
        failed = {**failures, event.message_id: outcome}
    if len(failed) > MAX_FAILURES_SHOWN:
        del failed[next(iter(failed))]
    return remembered, failed


def closed_with(
    known: Mapping[str, tuple[str, str]], new: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[str, str]]:
    """The decided approvals remembered (approval id → decision, by), newest kept."""
    merged = {**known, **new}
    while len(merged) > MAX_CLOSED_APPROVALS:
        del merged[next(iter(merged))]
    return merged


def spent_by(event: TurnRecorded | SessionCompacted) -> tuple[int, float]:
    """What a turn's or a compaction's calls spent: tokens (input + output) and their cost."""
    spent = event.spent or {}
    return int(spent.get("input_tokens", 0)) + int(spent.get("output_tokens", 0)), float(event.cost or 0.0)
