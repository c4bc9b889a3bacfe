"""Where a session stands, as ``/status`` tells people (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netclaw.config import Settings
from netclaw.llm import ToolSchema
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


def status_report(
    state: SessionState, phase: Phase, prompts: PromptBuilder, tools: Sequence[ToolSchema], settings: Settings
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
    )
