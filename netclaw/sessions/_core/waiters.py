"""Callers waiting for a turn's outcome (``?wait=1``), by the user message that started
it (pure). Every reply is answered exactly once: when its turn is recorded, or refused
when the session stops first."""

from __future__ import annotations

from netclaw.process.runtime import Reply
from netclaw.sessions._core.effects import Answer, Effect, Refuse
from netclaw.sessions._core.journal.state import SessionState, TurnOutcome


class Waiters:
    __slots__ = ("_replies",)

    def __init__(self) -> None:
        self._replies: dict[str, list[Reply[TurnOutcome]]] = {}

    def add(self, state: SessionState, message_id: str, reply: Reply[TurnOutcome]) -> list[Effect]:
        """Answer at once if the turn is already recorded, else when it is."""
        outcome = state.outcomes.get(message_id)
        if outcome is not None:
            return [Answer(reply, outcome)]
        self._replies.setdefault(message_id, []).append(reply)
        return []

    def resolve(self, state: SessionState, message_id: str) -> list[Effect]:
        outcome = state.outcomes.get(message_id)
        replies = self._replies.pop(message_id, [])
        return [Answer(reply, outcome) for reply in replies] if outcome is not None else []

    def refuse_all(self, error: Exception) -> list[Effect]:
        refused: list[Effect] = [Refuse(r, error) for replies in self._replies.values() for r in replies]
        self._replies.clear()
        return refused
