"""What the model sees on each call: projection → orphan sweep → token count → whole-turn trim.

Pure (no actors, no I/O). Each session owns one builder: its token cache and its
calibration (how much our estimate under-counts for this session's content).

The request is laid out from the most to the least stable part, so that two calls of a
session share everything above the newest turn and the provider bills it as cached: the
tools (sorted by name, :mod:`netclaw.sessions._core.context.build`), the static system prompt
(:func:`netclaw.skills.system_prompt`: the configured prompt, the note on untrusted content,
the skills index), the compaction summary and the trim
breadcrumb (they change only at a compaction or a trim), the transcript as recorded — with
each turn's volatile tail (:mod:`netclaw.sessions._core.context.tail`) recorded in it, where it stays. A trim cuts to
the low-water mark (``history.low_water`` of the budget), so it is rare.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import is_not
from typing import Any

from netclaw.history import (
    BudgetCalibration,
    SweepResult,
    TokenCounter,
    TrimResult,
    make_breadcrumb,
    sweep_orphans,
    trim_fraction_target,
    trim_to_budget,
    well_formed_after,
)
from netclaw.history.compaction import apply_clearing, summary_message
from netclaw.llm import ToolSchema
from netclaw.messages import ChatMessage, system
from netclaw.sessions._core.journal.state import SessionState

log = logging.getLogger(__name__)

# When the provider reports more input tokens than the budget, the next prompt must
# shrink by estimate/reported, however large the gap (base64, minified code, a
# tokenizer unlike ours). The floor only stops a nonsensical report from cutting the
# budget to nothing; a wrong-but-plausible one costs a visible trim, never an overflow.
CALIBRATION_FLOOR = 0.05


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: tuple[ChatMessage, ...]
    estimate: int  # our token estimate of messages + tool schemas
    trim: TrimResult | None  # a trim that must be recorded before this prompt is sent


class HeadMessages:
    """The messages before the transcript (system prompt, summary, breadcrumb), each made
    once while it stays the same: the very same objects every call, so that whatever
    recognises a message by identity (the token counts here, the provider's wire cache
    and the request prefix it keeps) does not encode them anew on every turn. A handful
    per session: cleared when it grows past a few (a new prompt, a compaction)."""

    __slots__ = ("_made",)

    def __init__(self) -> None:
        self._made: dict[Hashable, ChatMessage] = {}

    def get(self, key: Hashable, make: Callable[[], ChatMessage]) -> ChatMessage:
        hit = self._made.get(key)
        if hit is None:
            if len(self._made) >= 8:
                self._made.clear()
            hit = self._made[key] = make()
        return hit


def _fresh(key: Hashable, make: Callable[[], ChatMessage]) -> ChatMessage:
    return make()


def build_context(
    state: SessionState, system_prompt: str, heads: HeadMessages | None = None
) -> list[ChatMessage]:
    """The model-visible projection as recorded: the system prompt, the compaction
    summary, a breadcrumb where turns were trimmed, then the kept transcript with
    cleared tool results shown as placeholders. With ``heads``, the messages before the
    transcript are the ones made for an equal head before."""
    made = heads.get if heads is not None else _fresh
    head = [made(("system", system_prompt), lambda: system(system_prompt))]
    visible = state.visible
    if state.summary is not None:
        summary, n, ts = state.summary, state.compactions, visible[0].ts if visible else 0.0
        head.append(
            made(("summary", summary, n, ts), lambda: summary_message(summary, id=f"summary:{n}", ts=ts))
        )
    if state.trimmed and visible:
        first = visible[0]
        head.append(made(("breadcrumb", first.id, first.ts), lambda: make_breadcrumb(first)))
    if state.cleared:
        return [*head, *apply_clearing(visible, state.cleared)]
    return [*head, *visible]


def tool_dicts(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]


class PromptBuilder:
    def __init__(
        self, system_prompt: str, budget: int, counter: TokenCounter | None = None, *, low_water: float = 1.0
    ) -> None:
        self.system_prompt = system_prompt
        self.budget = budget
        self.low_water = low_water  # a trim cuts to this fraction of the budget
        self.counter = counter or TokenCounter()
        self.calibration = BudgetCalibration(min_ratio=CALIBRATION_FLOOR)
        # The transcript part of the last context and its counts (see _counts).
        self._counted: tuple[list[ChatMessage], list[int]] = ([], [])
        self._heads = HeadMessages()
        self._formed: tuple[tuple[ChatMessage, ...], frozenset[str]] = ((), frozenset())
        # The last tool set (its key, its schemas held) and its fixed overhead (_fixed_overhead).
        self._fixed: tuple[tuple[Hashable, ...], tuple[ToolSchema, ...], int] = (
            (),
            (),
            self.counter.fixed_overhead(),
        )

    def effective_budget(self) -> int:
        return self.calibration.effective_budget(self.budget)

    def build(self, state: SessionState, tools: Sequence[ToolSchema]) -> Prompt:
        """The prompt for the next call: over the (calibrated) budget, trimmed to its
        low-water mark."""
        budget = self.effective_budget()
        return self._fit(state, tools, budget, int(budget * self.low_water))

    def shrink_after_overflow(
        self, state: SessionState, tools: Sequence[ToolSchema], estimate: int
    ) -> TrimResult | None:
        """The provider refused a prompt we estimated at ``estimate``: trim to ~2/3 of it.

        None when nothing can go (only the newest turn is left).
        """
        # Two thirds of the conversation, not of the whole prompt: the system prompt and tool
        # schemas cannot be trimmed, and counting them would cut far more than a third.
        fixed = self._fixed_overhead(tools) + self.counter.count_message(self._context(state)[0])
        prompt = self._fit(state, tools, fixed + trim_fraction_target(max(estimate - fixed, 0)))
        return prompt.trim

    def estimate(self, state: SessionState, tools: Sequence[ToolSchema]) -> int:
        """Our token estimate of the projection as recorded (no trim)."""
        context = self._context(state)
        return self._fixed_overhead(tools) + sum(self.counter.count_all(context))

    def observe_usage(self, estimate: int, reported_input_tokens: int) -> None:
        self.calibration.observe(estimate, reported_input_tokens)

    def _fit(
        self, state: SessionState, tools: Sequence[ToolSchema], budget: int, target: int | None = None
    ) -> Prompt:
        # Trim before the sweep: a trim cuts only at turn starts, so it never splits a
        # call from its result, and the sweep then walks just the kept part.
        fixed = self._fixed_overhead(tools)
        context = self._context(state)
        counts = self._counts(context, len(context) - len(state.visible))
        estimate = fixed + sum(counts)
        trim: TrimResult | None = None
        fitting: Sequence[ChatMessage] = context
        if estimate > budget:  # within it, a trim leaves the context as it is: not even asked
            result = trim_to_budget(context, budget, self.counter.count_message, fixed, counts, target=target)
            fitting, estimate = result.messages, result.tokens_after
            trim = result if result.trimmed else None
        swept = self._sweep(state, fitting)
        if swept.changed:
            estimate = fixed + sum(map(self.counter.count_message, swept.messages))
        return Prompt(swept.messages, estimate, trim)

    def _context(self, state: SessionState) -> list[ChatMessage]:
        return build_context(state, self.system_prompt, self._heads)

    def _fixed_overhead(self, tools: Sequence[ToolSchema]) -> int:
        """Priming and tool schemas, counted again only when the tool set changed: a
        registry hands new schema objects every call, over the same parameter objects (the
        key holds their ids; the schemas kept hold the objects, so an id is not reused)."""
        key = tuple((t.name, t.description, id(t.parameters)) for t in tools)
        held_key, _, fixed = self._fixed
        if key != held_key:
            fixed = self.counter.fixed_overhead(tool_dicts(tools))
            self._fixed = (key, tuple(tools), fixed)
        return fixed

    def _counts(self, context: list[ChatMessage], head: int) -> list[int]:
        """Token counts of ``context``, whose first ``head`` messages come before the
        transcript (system prompt, summary, breadcrumb). A transcript only grows, so its
        messages that are the very objects of the last call, in the same places, keep the
        last call's counts (a C-speed identity scan); only the rest are looked up — a long
        session no longer looks up thousands of counts a turn."""
        body = context[head:]
        previous, counts = self._counted
        if len(previous) <= len(body) and body[: len(previous)] == previous:  # the rule: one C loop
            same = len(previous)
        else:
            same = next(compress(count(), map(is_not, previous, body)), min(len(previous), len(body)))
        body_counts = counts[:same] + self.counter.count_all(body[same:])
        self._counted = (body, body_counts)
        return self.counter.count_all(context[:head]) + body_counts

    def _sweep(self, state: SessionState, messages: Sequence[ChatMessage]) -> SweepResult:
        # The last prompt found well formed, and the calls it answered: a prompt that begins
        # with it (a growing transcript) is checked from where it ended.
        held, answered = self._formed
        fitting = tuple(messages)
        if held and fitting[: len(held)] == held:  # C speed: the same objects compare by identity
            known = well_formed_after(fitting, len(held), answered)
        else:
            known = well_formed_after(fitting, 0, frozenset())
        if known is not None:
            self._formed = (fitting, known)
            return SweepResult(messages=fitting, removed_results=(), synthesized=(), changed=False)
        self._formed = ((), frozenset())
        swept = sweep_orphans(fitting)
        if swept.changed:  # a safety net: recorded history should never need it
            log.warning(
                "%s: orphan sweep removed results %s and synthesized results for %s",
                state.session_id,
                list(swept.removed_results),
                list(swept.synthesized),
            )
        return swept
