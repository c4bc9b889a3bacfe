"""What a session answers about itself (pure): ``/status``, a new subscriber's greeting,
the replies its conversation is still owed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.llm import ToolSchema
from netclaw.sessions._approvals import request_outputs
from netclaw.sessions._phases import Phase
from netclaw.sessions._prompt import PromptBuilder
from netclaw.sessions._state import SessionState


@dataclass(frozen=True, slots=True)
class StatusReport:
    phase: str
    model: str
    context_tokens: int  # our estimate of the model-visible context, in the provider's tokens
    context_window: int
    turns: int
    queued: int  # admitted messages waiting for their turn
    title: str | None
    approvals: tuple[str, ...] = ()  # tools whose calls wait for a decision
    audience: str = "personal"  # whom the session serves (what it may see: tools, skills)


def status_report(
    state: SessionState,
    phase: Phase,
    prompts: PromptBuilder,
    tools: Sequence[ToolSchema],
    settings: Settings,
    audience: str = "personal",
) -> StatusReport:
    model = settings.models.main
    return StatusReport(
        phase=phase.value,
        model=model.model,
        context_tokens=int(prompts.estimate(state, tools) * prompts.calibration.ratio),
        context_window=model.context_window,
        turns=state.turns,
        queued=len(state.inbox),
        title=state.title,
        approvals=tuple(r.tool for r in state.pending_round.open) if state.pending_round is not None else (),
        audience=audience,
    )


def greeting(state: SessionState, phase: Phase) -> tuple[out.Output, ...]:
    """What a new subscriber is shown first: where the session stands, and what waits for
    a decision (that is how a channel re-announces open approvals)."""
    joined = out.Joined(session_id=state.session_id, title=state.title, turns=state.turns, phase=phase.value)
    pending = state.pending_round
    if pending is None:
        return (joined,)
    return (joined, *request_outputs(state.session_id, pending))


def owed_replies(state: SessionState) -> list[tuple[int, str, float]]:
    """The replies the conversation is still owed: (turn, text, recorded at)."""
    owed = []
    for turn_no, message_id in sorted(state.undelivered.items()):
        message = state.find_message(message_id)
        if message is not None:
            owed.append((turn_no, message.content, message.ts))
    return owed
