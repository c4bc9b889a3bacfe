"""What a session answers about itself (pure): ``/status``, a new subscriber's greeting,
the replies its conversation is still owed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from netclaw import outputs as out
from netclaw.config import ModelConfig, Settings
from netclaw.llm import ToolSchema, Usage
from netclaw.sessions._core.approvals import request_outputs
from netclaw.sessions._core.context.prompt import PromptBuilder
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase
from netclaw.spend import utc_day


@dataclass(frozen=True, slots=True)
class StatusReport:
    phase: str
    model: str  # the model id the session talks to
    context_tokens: int  # our estimate of the model-visible context, in the provider's tokens
    context_window: int
    turns: int
    queued: int  # admitted messages waiting for their turn
    title: str | None
    approvals: tuple[str, ...] = ()  # tools whose calls wait for a decision
    model_name: str = "main"  # its name under `models`
    pinned: bool = False  # a person chose it (/model NAME)
    tokens_today: int = 0  # this session's provider tokens today (UTC), recorded turns
    cost_today: float = 0.0  # what they cost (currency)
    currency: str = "USD"
    last_input_tokens: int | None = None  # the provider's count of the last call's prompt
    last_cache_read_tokens: int = 0  # ... of which read from its prompt cache
    audience: str = "personal"  # whom the session serves (what it may see: tools, skills)


class Seen(Protocol):
    """What the session's model is shown (``ModelContext``, which sits above this module)."""

    @property
    def prompts(self) -> PromptBuilder: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def audience(self) -> str: ...
    @property
    def model_name(self) -> str: ...
    @property
    def last_usage(self) -> Usage | None: ...

    def tools(self) -> Sequence[ToolSchema]: ...

    def chosen(self, state: SessionState) -> str: ...


@dataclass(frozen=True, slots=True)
class VoiceChoice:
    """Whether a session's replies are also spoken (``/voice``): ``on``; ``chosen`` by a
    person for this conversation (else the audience's ``voice_replies``); ``available``:
    a text-to-speech endpoint is configured."""

    session_id: str
    on: bool
    chosen: bool
    available: bool

    def text(self) -> str:
        how = "chosen for this conversation" if self.chosen else "this audience's default"
        if not self.available:
            return (
                f"Spoken replies are {'on' if self.on else 'off'} ({how}), but no text-to-speech "
                "endpoint is configured (speech.synthesis): replies stay text."
            )
        if self.on:
            return f"Replies here are spoken too ({how}); /voice off stops it."
        return f"Replies here are text only ({how}); /voice on speaks them too."


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model a session uses from its next turn on (``/model``, the API, the CLI)."""

    session_id: str
    model: str  # its name under `models`
    model_id: str
    pinned: bool  # chosen by a person; False: models.main by default
    available: tuple[str, ...]  # every name a person may choose

    def to_json(self) -> dict[str, object]:
        return {
            "session_id": self.session_id,
            "model": self.model,
            "model_id": self.model_id,
            "pinned": self.pinned,
            "available": list(self.available),
        }


def status_report(state: SessionState, phase: Phase, context: Seen, now: float) -> StatusReport:
    prompts, model, settings = context.prompts, context.model, context.settings
    name = context.model_name
    if phase not in (Phase.PROCESSING, Phase.COMPACTING):
        # Between turns, the model the next turn starts on: a fallback that took over the
        # last turn is not the session's model (the context still holds it until then).
        name = context.chosen(state)
        model = settings.models.get(name) or settings.models.main
    day = utc_day(now)
    last = context.last_usage
    return StatusReport(
        phase=phase.value,
        model=model.model,
        context_tokens=int(prompts.estimate(state, context.tools()) * prompts.calibration.ratio),
        context_window=model.context_window,
        turns=state.turns,
        queued=len(state.inbox),
        title=state.title,
        approvals=tuple(r.tool for r in state.pending_round.open) if state.pending_round is not None else (),
        model_name=name,
        pinned=state.model_pin is not None,
        tokens_today=state.tokens_spent_on(day),
        cost_today=state.cost_spent_on(day),
        currency=settings.spend.currency,
        last_input_tokens=last.input_tokens if last is not None else None,
        last_cache_read_tokens=last.cache_read_tokens if last is not None else 0,
        audience=context.audience,
    )


def model_choice(state: SessionState, context: Seen) -> ModelChoice:
    name = context.chosen(state)
    model = context.settings.models.get(name) or context.settings.models.main
    available = tuple(context.settings.models.named())
    return ModelChoice(state.session_id, name, model.model, state.model_pin is not None, available)


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
