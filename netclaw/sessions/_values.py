"""Small values a session's state holds: the active turn, a tool round waiting for
decisions (or recorded before it runs), and how a turn ended (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netclaw.messages import ChatMessage
from netclaw.sessions._events import ApprovalRequest, Decision, TurnStatus


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
