"""The context ladder (sessions/_ladder.py): each decision on its own, then property
tests of whole turns driven the way the actor drives them — never loops, at most
three overflow passes, compaction before trimming, a failed summary backs off."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.config import Settings
from netclaw.history import TrimResult
from netclaw.sessions._core.context import ladder as ladder
from netclaw.sessions._core.context.ladder import (
    MAX_OVERFLOW_PASSES,
    SUMMARY_RETRY_TURNS,
    Budget,
    Compact,
    Fail,
    Ladder,
    Proceed,
    Send,
    Trim,
)

BUDGET = Budget(threshold_tokens=750, calibration_ratio=1.0, context_window=1000)


def trim(tokens_before: int = 900) -> TrimResult:
    return TrimResult(
        messages=(),
        dropped_messages=4,
        dropped_turns=2,
        kept_turns=1,
        tokens_before=tokens_before,
        tokens_after=400,
        budget=500,
        trimmed=True,
        first_kept_id="u_9",
    )


# -- before a call ------------------------------------------------------------------------------


def test_under_the_threshold_sends_with_the_builders_trim() -> None:
    t = trim()
    decision, after = ladder.before_call(
        Ladder(), seq=5, untrimmed_estimate=700, trim=t, turns=1, budget=BUDGET
    )
    assert decision == Send(t)
    assert after.checked_at_seq == 5


def test_over_the_threshold_compacts_before_trimming() -> None:
    decision, after = ladder.before_call(
        Ladder(), seq=5, untrimmed_estimate=800, trim=trim(), turns=1, budget=BUDGET
    )
    assert decision == Compact(forced=False, summarise=True)
    assert after.checked_at_seq == 5


def test_the_threshold_is_in_provider_tokens() -> None:
    # The provider counts 1.5x our estimate: 600 of ours is 900 of theirs.
    budget = Budget(750, 1.5, 1000)
    decision, _ = ladder.before_call(
        Ladder(), seq=1, untrimmed_estimate=600, trim=None, turns=1, budget=budget
    )
    assert decision == Send(None)  # 600 / 1.5 = 400 < 750: the estimate is divided by the ratio
    decision, _ = ladder.before_call(
        Ladder(), seq=1, untrimmed_estimate=1200, trim=None, turns=1, budget=budget
    )
    assert isinstance(decision, Compact)


def test_one_check_per_history_state() -> None:
    first, state = ladder.before_call(
        Ladder(), seq=7, untrimmed_estimate=900, trim=None, turns=1, budget=BUDGET
    )
    assert isinstance(first, Compact)
    # The compaction could not shrink it and recorded nothing: the same state is not compacted again.
    again, _ = ladder.before_call(state, seq=7, untrimmed_estimate=900, trim=None, turns=1, budget=BUDGET)
    assert again == Send(None)


def test_paused_summary_still_compacts_but_without_the_llm_tiers() -> None:
    paused = Ladder(summary_paused_until=10)
    decision, _ = ladder.before_call(paused, seq=1, untrimmed_estimate=900, trim=None, turns=8, budget=BUDGET)
    assert decision == Compact(forced=False, summarise=False)
    decision, _ = ladder.before_call(
        paused, seq=2, untrimmed_estimate=900, trim=None, turns=10, budget=BUDGET
    )
    assert decision == Compact(forced=False, summarise=True)


# -- after a call and between turns -------------------------------------------------------------


def test_after_a_call_the_providers_count_decides() -> None:
    after = ladder.observe(Ladder(), reported_input_tokens=760)
    assert isinstance(ladder.compaction_due(after, turns=1, budget=BUDGET), Compact)
    assert after.last_input_tokens == 760
    after = ladder.observe(after, reported_input_tokens=None)
    assert isinstance(ladder.compaction_due(after, turns=1, budget=BUDGET), Compact)  # the last one stands
    after = ladder.observe(Ladder(), reported_input_tokens=100)
    assert ladder.compaction_due(after, turns=1, budget=BUDGET) == Proceed()


def test_nothing_known_means_nothing_due() -> None:
    assert ladder.compaction_due(Ladder(), turns=1, budget=BUDGET) == Proceed()


# -- overflow -----------------------------------------------------------------------------------


def test_overflow_compacts_first_then_trims_then_fails() -> None:
    state = Ladder().new_turn()
    decisions = []
    for _ in range(MAX_OVERFLOW_PASSES + 1):
        decision, state = ladder.on_overflow(state, turns=1, error="too big")
        decisions.append(decision)
    assert decisions[0] == Compact(forced=True, summarise=True)
    assert decisions[1:MAX_OVERFLOW_PASSES] == [Trim()] * (MAX_OVERFLOW_PASSES - 1)
    assert isinstance(decisions[-1], Fail)
    assert decisions[-1].code == "context_overflow"
    assert "too big" in decisions[-1].message


def test_a_new_turn_starts_the_overflow_ladder_afresh() -> None:
    state = Ladder()
    for _ in range(MAX_OVERFLOW_PASSES):
        _, state = ladder.on_overflow(state, turns=1, error="x")
    state = state.new_turn()
    decision, _ = ladder.on_overflow(state, turns=2, error="x")
    assert isinstance(decision, Compact) and decision.forced


def test_forced_compaction_summarises_even_while_paused() -> None:
    decision, _ = ladder.on_overflow(Ladder(summary_paused_until=99), turns=1, error="x")
    assert decision == Compact(forced=True, summarise=True)


def test_overflow_trim_fails_when_nothing_can_go() -> None:
    t = trim()
    assert ladder.overflow_trim(t, estimate=1200, budget=BUDGET) == Send(t)
    failed = ladder.overflow_trim(None, estimate=1200, budget=BUDGET)
    assert isinstance(failed, Fail)
    assert "newest turn alone" in failed.message and "1000" in failed.message


# -- after compaction ---------------------------------------------------------------------------


def test_forced_compaction_that_freed_nothing_goes_to_the_trim_rung() -> None:
    decision, after = ladder.after_compaction(
        Ladder(last_input_tokens=900), seq=9, turns=2, forced=True, summary_failed=False, freed_nothing=True
    )
    assert decision == Trim()
    assert after.checked_at_seq == 9
    assert after.last_input_tokens is None  # the count described the old prompt


def test_failed_summary_pauses_the_llm_tiers() -> None:
    decision, after = ladder.after_compaction(
        Ladder(), seq=3, turns=4, forced=False, summary_failed=True, freed_nothing=False
    )
    assert decision == Proceed()
    assert after.summary_paused_until == 4 + SUMMARY_RETRY_TURNS


def test_budget_of_settings() -> None:
    settings = Settings(
        models={"main": {"context_window": 10_000, "max_output_tokens": 1000}},
        session={"compaction_threshold": 0.5},
    )
    assert ladder.budget_of(settings, 1.2) == Budget(5000, 1.2, 10_000)


# -- whole turns, driven like the actor ---------------------------------------------------------


@dataclass
class World:
    """A provider and a history that answer the ladder's actions from scripts."""

    estimate: int  # our untrimmed estimate of the prompt
    overflows: list[bool]  # per send: does the provider refuse the prompt?
    compaction_frees: list[bool]  # per compaction: did it clear or summarise anything?
    summary_fails: list[bool]  # per compaction: did the summary fail?
    trim_possible: list[bool]  # per overflow trim: is there an older turn to drop?
    seq: int = 10
    trace: list[str] = field(default_factory=list)

    def pop(self, script: list[bool], default: bool) -> bool:
        return script.pop(0) if script else default


def drive_turn(world: World, state: Ladder, turns: int, budget: Budget) -> tuple[str, Ladder]:
    """The actor's control flow for one turn, with the ladder deciding. Returns how the
    turn ended ("answered" or "failed") and the ladder after it."""
    state = state.new_turn()
    pending: str = "call"
    for _ in range(100):  # far more steps than a turn may take: a loop shows up as a failure
        if pending == "call":
            decision, state = ladder.before_call(
                state, seq=world.seq, untrimmed_estimate=world.estimate, trim=None, turns=turns, budget=budget
            )
            if isinstance(decision, Compact):
                pending, state = compact(world, state, decision, turns)
                continue
            world.trace.append("send")
            if not world.pop(world.overflows, False):
                return "answered", state
            decision, state = ladder.on_overflow(state, turns=turns, error="refused")
            if isinstance(decision, Fail):
                world.trace.append("fail")
                return "failed", state
            if isinstance(decision, Compact):
                pending, state = compact(world, state, decision, turns)
                continue
            pending = "trim"
        if pending == "trim":
            possible = world.pop(world.trim_possible, True)
            send = ladder.overflow_trim(trim() if possible else None, estimate=world.estimate, budget=budget)
            if isinstance(send, Fail):
                world.trace.append("fail")
                return "failed", state
            world.trace.append("trim")
            world.seq += 1
            world.estimate = world.estimate * 2 // 3
            pending = "call"
    raise AssertionError(f"the turn did not end: {world.trace}")


def compact(world: World, state: Ladder, decision: Compact, turns: int) -> tuple[str, Ladder]:
    world.trace.append("compact!" if decision.forced else ("compact" if decision.summarise else "clear"))
    freed = world.pop(world.compaction_frees, False)  # past the script: nothing left to free
    failed = decision.summarise and world.pop(world.summary_fails, False)
    if freed or decision.forced:  # an event is recorded
        world.seq += 1
    if freed:
        world.estimate = world.estimate // 2
    after, state = ladder.after_compaction(
        state,
        seq=world.seq,
        turns=turns,
        forced=decision.forced,
        summary_failed=failed,
        freed_nothing=not freed,
    )
    return ("trim" if isinstance(after, Trim) else "call"), state


worlds = st.builds(
    World,
    estimate=st.integers(100, 5000),
    overflows=st.lists(st.booleans(), max_size=8),
    compaction_frees=st.lists(st.booleans(), max_size=8),
    summary_fails=st.lists(st.booleans(), max_size=8),
    trim_possible=st.lists(st.booleans(), max_size=8),
)


@settings(max_examples=400, deadline=None)
@given(worlds, st.integers(1, 50))
def test_a_turn_always_ends_within_three_overflow_passes(world: World, turns: int) -> None:
    ended, state = drive_turn(world, Ladder(), turns, BUDGET)
    assert ended in ("answered", "failed")
    assert state.overflow_passes <= MAX_OVERFLOW_PASSES + 1
    assert world.trace.count("send") <= MAX_OVERFLOW_PASSES + 1  # the first try and three retries
    assert world.trace.count("compact!") <= 1  # the overflow rung compacts once per turn
    if ended == "failed":
        assert world.trace[-1] == "fail"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 100))
def test_compaction_comes_before_any_budget_trim_when_over_the_threshold(estimate: int, seq: int) -> None:
    decision, _ = ladder.before_call(
        Ladder(), seq=seq, untrimmed_estimate=estimate, trim=trim(estimate), turns=1, budget=BUDGET
    )
    if estimate >= BUDGET.threshold_tokens:
        assert isinstance(decision, Compact)
    else:
        assert isinstance(decision, Send)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10))
def test_a_failed_summary_backs_off_for_three_turns(failed_at: int, later: int) -> None:
    _, state = ladder.after_compaction(
        Ladder(), seq=1, turns=failed_at, forced=False, summary_failed=True, freed_nothing=False
    )
    turns = failed_at + later
    decision, _ = ladder.before_call(
        state, seq=2, untrimmed_estimate=10_000, trim=None, turns=turns, budget=BUDGET
    )
    assert isinstance(decision, Compact)
    assert decision.summarise == (later >= SUMMARY_RETRY_TURNS)
    forced, _ = ladder.on_overflow(state.new_turn(), turns=turns, error="x")
    assert forced == Compact(forced=True, summarise=True)  # the provider refused: summarise anyway


@settings(max_examples=200, deadline=None)
@given(worlds)
def test_the_first_overflow_of_a_turn_compacts_before_it_trims(world: World) -> None:
    world.overflows = [True, *world.overflows]
    world.estimate = 100  # under the threshold: the first send happens
    drive_turn(world, Ladder(), 1, BUDGET)
    assert world.trace[0] == "send"
    assert world.trace[1] == "compact!"
    if "trim" in world.trace:
        assert world.trace.index("compact!") < world.trace.index("trim")


def test_an_overflow_far_below_the_window_blames_the_servers_window() -> None:
    failed = ladder.overflow_trim(None, estimate=298, budget=Budget(24_000, 1.0, 32_768))
    assert isinstance(failed, Fail) and failed.code == "context_overflow"
    assert "about 298 tokens" in failed.message and "models.main.context_window says 32768" in failed.message
    assert "smaller than configured" in failed.message


# -- failed summaries back off ------------------------------------------------------------------


def test_failed_summaries_back_off_exponentially_then_give_up_until_a_forced_one() -> None:
    from netclaw.sessions._core.context.ladder import SUMMARY_GIVE_UP, summary_pause

    assert [summary_pause(n) for n in range(0, 8)] == [0, 3, 6, 12, 24, 48, 48, 48]
    state, turn, retries = Ladder(), 0, []
    for _ in range(40 * 12):
        turn += 1
        decision = ladder.compaction_due(replace(state, last_input_tokens=900), turns=turn, budget=BUDGET)
        assert isinstance(decision, Compact)
        if decision.summarise:  # the LLM tiers run, and fail
            retries.append(turn)
            _, state = ladder.after_compaction(
                state, seq=turn, turns=turn, forced=False, summary_failed=True, freed_nothing=False
            )
    assert retries == [1, 4, 10, 22, 46]  # 3, 6, 12, 24 turns apart; then trimming alone
    assert state.summary_failures == SUMMARY_GIVE_UP and state.summaries_given_up
    forced, state = ladder.on_overflow(state, turns=turn, error="x")
    assert forced == Compact(forced=True, summarise=True)  # a forced compaction still tries
    _, state = ladder.after_compaction(
        state, seq=turn, turns=turn, forced=True, summary_failed=False, freed_nothing=False, summarised=True
    )
    assert state.summary_failures == 0 and not state.summaries_given_up
    decision = ladder.compaction_due(replace(state, last_input_tokens=900), turns=turn + 1, budget=BUDGET)
    assert decision == Compact(forced=False, summarise=True)


def test_a_recovered_ladder_keeps_the_backoff_it_had() -> None:
    recovered = Ladder.recovered(None, summary_failures=2, failed_turn=10)
    assert recovered.summary_paused_until == 16 and recovered.summary_failures == 2
    decision = ladder.compaction_due(replace(recovered, last_input_tokens=900), turns=12, budget=BUDGET)
    assert decision == Compact(forced=False, summarise=False)
