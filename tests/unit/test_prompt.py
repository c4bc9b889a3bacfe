"""The prompt builder's token counts stay exact as a session grows and is trimmed."""

from __future__ import annotations

from netclaw.messages import ChatMessage
from netclaw.sessions._core.context.prompt import PromptBuilder
from netclaw.sessions._core.journal.events import InputAdmitted, TurnRecorded, TurnStarted
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.turn import trim_step


def grown(state: SessionState, turn: int, size: int) -> SessionState:
    user = ChatMessage(f"u{turn}", "user", f"question {turn} " + "word " * size, float(turn))
    reply = ChatMessage(f"a{turn}", "assistant", f"answer {turn} " + "more " * size, float(turn))
    for event in (
        InputAdmitted(user),
        TurnStarted(turn, user.id),
        TurnRecorded(turn, user.id, "completed", (reply,)),
    ):
        state = state.apply(event, state.seq + 1, float(turn))
    return state


def test_counts_carried_over_from_the_last_call_equal_a_fresh_count() -> None:
    kept = PromptBuilder("be brief", budget=5_000)
    state = SessionState("cli:p")
    trims = 0
    for turn in range(1, 40):
        state = grown(state, turn, size=turn % 7 * 20)
        prompt = kept.build(state, [])
        fresh = PromptBuilder("be brief", budget=5_000).build(state, [])
        assert prompt.estimate == fresh.estimate
        assert [m.id for m in prompt.messages] == [m.id for m in fresh.messages]
        assert (prompt.trim is None) == (fresh.trim is None)
        if prompt.trim is not None:  # recorded, as the actor does: the transcript shrinks
            trims += 1
            event, _ = trim_step(state.session_id, prompt.trim, "budget")
            state = state.apply(event, state.seq + 1, float(turn))
    assert trims > 1
