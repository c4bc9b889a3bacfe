"""Compaction, planned and recorded (pure): tier 1 (clear old tool results) and the
plan for tiers 2 and 3 (memory flush, then a structured summary), and the
``SessionCompacted`` event an outcome becomes.

The LLM tiers run on the I/O loop (:func:`netclaw.sessions._shell.loop_ops.run_compaction`): first the
memory flush — so what the summary may lose is already durable — then the summary,
retried once if it lacks required sections and cancelled if it still does, all within
a time budget; running out cancels the summary, never the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from netclaw import outputs as out
from netclaw.config import ModelConfig, Settings
from netclaw.history.compaction import (
    SUMMARY_MAX_CHARS,
    apply_clearing,
    clearable_results,
    summary_boundary,
)
from netclaw.llm import ToolSchema, Usage
from netclaw.messages import ChatMessage
from netclaw.security.policy import memory_scope_of
from netclaw.sessions._core.context.prompt import PromptBuilder, build_context
from netclaw.sessions._core.journal.events import SessionCompacted
from netclaw.sessions._core.journal.state import SessionState
from netclaw.spend import cost_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    session_id: str
    audience: str
    scope: str | None  # where the memories it saves belong
    turn: int  # the session's turn when it ran (provenance of the memories it saves)
    to_summarise: tuple[ChatMessage, ...]  # older visible messages, cleared results as placeholders
    prior_summary: str | None
    model: ModelConfig
    max_chars: int
    budget_s: float


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    summary: str | None  # None: no summary (cancelled; `note` says why)
    memories_saved: int
    flushed: bool
    note: str | None = None
    usage: Usage | None = None  # what its LLM calls spent, summed


# -- planning (pure; runs on the actor) ---------------------------------------------------

# The kept (unsummarised) part aims at this fraction of the compaction threshold, so a
# compaction buys room for several turns before the next one.
KEEP_FRACTION = 0.3


@dataclass(frozen=True, slots=True)
class CompactionStart:
    """What tier 1 decided, and the LLM tiers' plan if they must run."""

    cleared: tuple[str, ...]  # tool_call_ids newly cleared
    tokens_before: int
    messages_before: int
    plan: CompactionPlan | None  # None: stop after tier 1
    first_kept_id: str | None
    note: str | None = None


def plan_compaction(
    state: SessionState,
    prompts: PromptBuilder,
    tools: Sequence[ToolSchema],
    settings: Settings,
    *,
    threshold_tokens: int,
    audience: str,
    forced: bool,
    summarise: bool = True,
) -> CompactionStart:
    """Tier 1 (clear old tool results) and, if still needed, the plan for tiers 2 and 3.

    ``forced``: the provider refused the prompt as too large, so summarise even if our
    estimate says clearing was enough. ``summarise``: False while the LLM tiers are
    paused after a failed summary.
    """
    keep_recent = settings.session.keep_recent_tool_results
    before = build_context(state, prompts.system_prompt)
    tokens_before = prompts.estimate(state, tools)  # same units as tokens_after
    cleared = tuple(clearable_results(state.visible, keep_recent, state.cleared))
    after_clear = replace(state, cleared=state.cleared | frozenset(cleared))
    # Our estimate, scaled by how much this session's provider has counted above it.
    provider_view = prompts.estimate(after_clear, tools) / prompts.calibration.ratio
    start = CompactionStart(cleared, tokens_before, len(before), None, None)
    # Clearing alone is enough only when it makes room for many turns (down to the low-water
    # mark): a compaction rewrites the prompt's history, so the provider's cache of it is lost
    # each time — one that frees a sliver would be due again a turn later.
    if provider_view < threshold_tokens * settings.history.low_water and not forced:
        return start
    if not summarise:
        return replace(start, note="summary paused after a recent failure; clearing only")
    visible = apply_clearing(after_clear.visible, after_clear.cleared)
    # The threshold is in the provider's tokens; the boundary is measured in ours.
    keep_tokens = int(threshold_tokens * KEEP_FRACTION * prompts.calibration.ratio)
    if forced:  # the provider refused this prompt: keep at most a third of the conversation
        keep_tokens = min(keep_tokens, sum(prompts.counter.count_all(visible)) // 3)
    boundary = summary_boundary(visible, keep_tokens, prompts.counter.count_message)
    if boundary is None:
        return replace(start, note="nothing older than the newest turn to summarise")
    plan = CompactionPlan(
        session_id=state.session_id,
        audience=audience,
        scope=memory_scope_of(state.session_id, state.place),
        turn=state.turns,
        to_summarise=tuple(visible[:boundary]),
        prior_summary=state.summary,
        model=settings.compaction_model,
        max_chars=SUMMARY_MAX_CHARS,
        budget_s=settings.session.compaction_timeout_s,
    )
    return replace(start, plan=plan, first_kept_id=visible[boundary].id)


def compaction_event(
    start: CompactionStart, outcome: CompactionOutcome | None, messages_after: int, tokens_after: int
) -> SessionCompacted:
    tiers = ["clear_tool_results"] if start.cleared else []
    if outcome is not None and outcome.flushed:
        tiers.append("memory_flush")
    summary = outcome.summary if outcome is not None else None
    if summary is not None:
        tiers.append("summary")
    usage = outcome.usage if outcome is not None else None
    model = start.plan.model if start.plan is not None else None
    return SessionCompacted(
        cleared=start.cleared,
        summary=summary,
        first_kept_id=start.first_kept_id if summary is not None else None,
        tiers=tuple(tiers),
        memories_saved=outcome.memories_saved if outcome is not None else 0,
        messages_before=start.messages_before,
        messages_after=messages_after,
        tokens_before=start.tokens_before,
        tokens_after=tokens_after,
        note=(outcome.note if outcome is not None else None) or start.note,
        summary_failed=start.plan is not None and summary is None,
        spent=spent_of(usage) if usage is not None else None,
        model=model.model if usage is not None and model is not None else None,
        cost=round(cost_of(usage, model.price), 9) if usage is not None and model is not None else None,
    )


def spent_of(usage: Usage) -> dict[str, int]:
    """A call's (or calls') tokens as the journal records them."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def compaction_record(
    state: SessionState,
    start: CompactionStart,
    outcome: CompactionOutcome | None,
    prompts: PromptBuilder,
    tools: Sequence[ToolSchema],
    now: float,
) -> SessionCompacted:
    """The event for a compaction that ran (or was cancelled), measured on the
    projection it leaves behind (as folded at ``now``)."""
    preview = state.apply(compaction_event(start, outcome, 0, 0), state.seq + 1, now)
    return compaction_event(
        start,
        outcome,
        len(build_context(preview, prompts.system_prompt)),
        prompts.estimate(preview, tools),
    )


def compaction_output(session_id: str, event: SessionCompacted) -> out.Compaction:
    return out.Compaction(
        session_id=session_id,
        messages_before=event.messages_before,
        messages_after=event.messages_after,
        tool_results_cleared=len(event.cleared),
        summarized=event.summary is not None,
        memories_saved=event.memories_saved,
        tokens_before=event.tokens_before,
        tokens_after=event.tokens_after,
        tiers=event.tiers,
        note=event.note,
    )


def describe_compaction(event: SessionCompacted) -> str:
    """One sentence for people about what a compaction did."""
    done = []
    if event.summary is not None:
        done.append("summarised the earlier conversation")
    if event.cleared:
        done.append(f"cleared {len(event.cleared)} old tool result(s)")
    if event.memories_saved:
        done.append(f"saved {event.memories_saved} {'memory' if event.memories_saved == 1 else 'memories'}")
    what = ", ".join(done) if done else "changed nothing"
    note = f" ({event.note})" if event.note else ""
    return f"Compacted: {what}; the context went from {event.tokens_before} to {event.tokens_after} tokens{note}."


def failing_notice(
    session_id: str, event: SessionCompacted, failures: int, retry_at: int | None, turns: int
) -> out.Notice:
    """What people are told when compaction could not summarise: why, and what happens now."""
    why = event.note or "the summary failed"
    if retry_at is None:
        then = (
            f"after {failures} failures in a row it stops trying on its own: older turns are trimmed "
            "instead until a summary succeeds (/compact tries now)"
        )
    else:
        then = f"older turns are trimmed meanwhile; it tries again in {max(retry_at - turns, 0)} turn(s)"
    return out.Notice(
        session_id=session_id,
        text=f"Compaction could not summarise the conversation ({why}); {then}.",
        kind="compaction_failing",
    )
