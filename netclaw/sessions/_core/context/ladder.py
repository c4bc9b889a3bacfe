"""The context ladder: what to do about the prompt's size before, after and between
provider calls (pure; the actor only carries the decisions out).

Rungs, in order of cost to the conversation:

1. **Compact** — tier 1 clears old tool results, tiers 2 and 3 flush memories and
   summarise. Nothing is lost that was not first summarised and flushed.
2. **Trim** — drop whole old turns behind a breadcrumb (visible, journaled).
3. **Fail** — only the newest turn is left and it still does not fit: say so.

Decisions:

- :func:`before_call` — the calibrated estimate of the untrimmed prompt crosses the
  compaction threshold → :class:`Compact`, once per history state (a compaction that
  could not shrink enough is not retried in a loop); else :class:`Send` (with the
  budget trim the prompt builder computed, if any).
- :func:`observe` — what the provider counted of our prompt; then
  :func:`compaction_due` — it counted past the threshold → :class:`Compact` before the
  next call (after a tool round) or the next turn.
- :func:`on_overflow` — the provider refused the prompt: compact once per turn, then
  trim to ~2/3, at most :data:`MAX_OVERFLOW_PASSES` passes, then :class:`Fail`.
- :func:`after_compaction` — a forced compaction that freed nothing goes straight to
  the trim rung (the same prompt would overflow again); a failed summary pauses the
  LLM tiers, longer after each failure in a row (:func:`summary_pause`: 3, 6, 12, 24,
  then 48 turns; tier 1 and trimming keep the prompt within budget meanwhile), and after
  :data:`SUMMARY_GIVE_UP` failures in a row only a forced compaction (an overflow,
  ``/compact``) tries again: the session lives on trimming alone until one succeeds.

Invariants (property-tested in ``tests/unit/test_ladder.py``): a turn never loops —
at most ``MAX_OVERFLOW_PASSES`` overflow recoveries, at most one compaction per
history state before a call; compaction is chosen before trimming whenever the
threshold is crossed; a failed summary backs off.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from netclaw.config import ModelConfig, Settings
from netclaw.history import TrimResult

MAX_OVERFLOW_PASSES = 3
SUMMARY_RETRY_TURNS = 3  # after the first failed summary in a row
SUMMARY_MAX_PAUSE_TURNS = 48
SUMMARY_GIVE_UP = 5  # failures in a row after which only a forced compaction summarises


def summary_pause(failures: int) -> int:
    """Turns the LLM tiers rest after ``failures`` failed summaries in a row."""
    if failures <= 0:
        return 0
    return min(SUMMARY_RETRY_TURNS << min(failures - 1, 16), SUMMARY_MAX_PAUSE_TURNS)


@dataclass(frozen=True, slots=True)
class Budget:
    threshold_tokens: int  # compaction_threshold * context_window, in the provider's tokens
    calibration_ratio: float  # provider tokens per token of our estimate (≥ 1 in practice)
    context_window: int
    model: str = "main"  # its name under `models` (error messages name its key)


def budget_of(
    settings: Settings, calibration_ratio: float, model: ModelConfig | None = None, name: str = "main"
) -> Budget:
    """The budget of a session that talks to ``model`` (named ``name``; default main)."""
    window = (model or settings.models.main).context_window
    return Budget(int(settings.session.compaction_threshold * window), calibration_ratio, window, name)


@dataclass(frozen=True, slots=True)
class Ladder:
    """What the session already tried; one value instead of flags across objects."""

    last_input_tokens: int | None = None  # the provider's latest count of our prompt
    checked_at_seq: int = -1  # the history state last checked (or compacted) before a call
    summary_paused_until: int = 0  # after a failed summary: the turn the LLM tiers resume
    overflow_passes: int = 0  # this turn
    compacted_this_turn: bool = False  # the overflow ladder's first rung ran this turn
    summary_failures: int = 0  # failed summaries in a row (journaled: see SessionState)

    def new_turn(self) -> Ladder:
        return replace(self, overflow_passes=0, compacted_this_turn=False)

    @classmethod
    def recovered(cls, last_input_tokens: int | None, summary_failures: int, failed_turn: int) -> Ladder:
        """What a recovered session knows: the provider's last count, and its summaries'
        record (so a restart does not reset the backoff)."""
        paused = failed_turn + summary_pause(summary_failures)
        return cls(last_input_tokens, summary_paused_until=paused, summary_failures=summary_failures)

    @property
    def summaries_given_up(self) -> bool:
        return self.summary_failures >= SUMMARY_GIVE_UP


# -- decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Call the provider with this prompt; record ``trim`` first if there is one."""

    trim: TrimResult | None = None


@dataclass(frozen=True, slots=True)
class Compact:
    forced: bool  # the provider refused the prompt: summarise even if clearing looks enough
    summarise: bool  # the LLM tiers may run (not paused after a failed summary)


@dataclass(frozen=True, slots=True)
class Trim:
    """Shrink the refused prompt to ~2/3 of the conversation, then send it again."""


@dataclass(frozen=True, slots=True)
class Fail:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Proceed:
    """Nothing to do: carry on (call again, or go to the next turn)."""


Decision = Send | Compact | Trim | Fail | Proceed


def _summarise(ladder: Ladder, turns: int, forced: bool) -> bool:
    return forced or (not ladder.summaries_given_up and turns >= ladder.summary_paused_until)


def before_call(
    ladder: Ladder, *, seq: int, untrimmed_estimate: int, trim: TrimResult | None, turns: int, budget: Budget
) -> tuple[Send | Compact, Ladder]:
    """Before each provider call. ``untrimmed_estimate`` is our count of the whole
    projection (before any budget trim); ``trim`` the trim the builder would apply."""
    if seq == ladder.checked_at_seq:
        return Send(trim), ladder
    ladder = replace(ladder, checked_at_seq=seq)
    if untrimmed_estimate / budget.calibration_ratio >= budget.threshold_tokens:
        # Compact before trimming: what a trim drops is neither summarised nor flushed.
        return Compact(forced=False, summarise=_summarise(ladder, turns, False)), ladder
    return Send(trim), ladder


def observe(ladder: Ladder, *, reported_input_tokens: int | None) -> Ladder:
    """After a call that answered: remember the provider's count of our prompt."""
    if reported_input_tokens is None:
        return ladder
    return replace(ladder, last_input_tokens=reported_input_tokens)


def compaction_due(ladder: Ladder, *, turns: int, budget: Budget) -> Compact | Proceed:
    """Between turns and at recovery: the last count we have is over the threshold."""
    tokens = ladder.last_input_tokens
    if tokens is not None and tokens >= budget.threshold_tokens:
        return Compact(forced=False, summarise=_summarise(ladder, turns, False))
    return Proceed()


def on_overflow(ladder: Ladder, *, turns: int, error: str) -> tuple[Compact | Trim | Fail, Ladder]:
    """The provider refused the prompt as too large."""
    passes = ladder.overflow_passes + 1
    ladder = replace(ladder, overflow_passes=passes)
    if passes > MAX_OVERFLOW_PASSES:
        return Fail(
            "context_overflow",
            f"the prompt still exceeds the model's context window after {MAX_OVERFLOW_PASSES} "
            f"recovery passes: {error}",
        ), ladder
    if not ladder.compacted_this_turn:
        return Compact(forced=True, summarise=True), replace(ladder, compacted_this_turn=True)
    return Trim(), ladder


def overflow_trim(trim: TrimResult | None, *, estimate: int, budget: Budget) -> Send | Fail:
    """The trim rung, once the builder computed what ~2/3 of the conversation keeps."""
    if trim is None:
        if estimate * 2 <= budget.context_window:
            # Far below the configured window, yet refused: the server's window is smaller.
            return Fail(
                "context_overflow",
                f"the model server refused a prompt of about {estimate} tokens as too long, but "
                f"models.{budget.model}.context_window says {budget.context_window}: the server's own "
                "context window is probably smaller than configured (Ollama's default num_ctx is "
                f"small). Set models.{budget.model}.context_window to what the server really allows, "
                "or raise the server's context length",
            )
        return Fail(
            "context_overflow",
            "the newest turn alone does not fit the model's context window "
            f"({budget.context_window} tokens; this prompt was estimated at {estimate}); "
            "shorten the message or use a model with a larger window",
        )
    return Send(trim)


def after_compaction(
    ladder: Ladder,
    *,
    seq: int,
    turns: int,
    forced: bool,
    summary_failed: bool,
    freed_nothing: bool,
    summarised: bool = False,
) -> tuple[Trim | Proceed, Ladder]:
    """A compaction ended (``seq``: the history state it left). The provider's count
    described the old prompt, so it is forgotten."""
    ladder = replace(ladder, checked_at_seq=seq, last_input_tokens=None)
    if summarised:
        ladder = replace(ladder, summary_failures=0, summary_paused_until=0)
    elif summary_failed:
        # Not retried on every message: tier 1 and the trim backstop carry on meanwhile.
        failures = ladder.summary_failures + 1
        pause = summary_pause(failures)
        ladder = replace(ladder, summary_failures=failures, summary_paused_until=turns + pause)
    if forced and freed_nothing:
        return Trim(), ladder  # the same prompt would overflow again
    return Proceed(), ladder
