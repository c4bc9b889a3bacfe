"""Memory at passivation, planned (pure): before a session goes to sleep, the durable
observations of the turns since its last extraction are saved (plan, here → run on the
loop, time-boxed, :func:`netclaw.sessions._shell.loop_ops.run_extraction` → recorded by the session).

One LLM call on the compaction model (the same prompt as compaction's memory flush,
with the saved memories related to what was said, so the model can say which one a new
item replaces),
bounded by the passivation grace period plus a small margin. Skipped for public
sessions and when nothing new was said. The run only extracts; the actor writes the
memories and the ``MemoriesExtracted`` event when the session is still passivating,
so a message that aborts the passivation leaves nothing half-written.
"""

from __future__ import annotations

from dataclasses import dataclass

from netclaw.config import ModelConfig
from netclaw.messages import ChatMessage
from netclaw.sessions._core.journal.state import SessionState

EXTRACTION_MARGIN_S = 2.0


@dataclass(frozen=True, slots=True)
class ExtractionPlan:
    session_id: str
    audience: str
    through_turn: int  # the newest turn it covers
    messages: tuple[ChatMessage, ...]
    model: ModelConfig
    budget_s: float
    scope: str | None = None  # where its memories belong; the saved ones it is shown come from here


def plan_extraction(
    state: SessionState, *, audience: str, model: ModelConfig, grace_s: float, scope: str | None = None
) -> ExtractionPlan | None:
    """What to extract, or None: a public session, nothing new since the last time, or
    no grace period to do it in."""
    if audience == "public" or grace_s <= 0 or state.turns <= state.memory_through_turn:
        return None
    messages = _since_turn(state.transcript, state.memory_through_turn)
    if not any(m.is_real_user and m.content.strip() for m in messages):
        return None
    return ExtractionPlan(
        session_id=state.session_id,
        audience=audience,
        through_turn=state.turns,
        messages=messages,
        model=model,
        budget_s=grace_s + EXTRACTION_MARGIN_S,
        scope=scope,
    )


def _since_turn(transcript: tuple[ChatMessage, ...], turn: int) -> tuple[ChatMessage, ...]:
    """The transcript from the start of turn ``turn + 1`` (each turn starts with its real
    user message, in order)."""
    seen = 0
    for index, message in enumerate(transcript):
        if message.is_real_user:
            seen += 1
            if seen > turn:
                return transcript[index:]
    return ()
