"""When a group commit waits for company (netclaw.persistence._commit_delay): pure rules,
time as an input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from netclaw.persistence._commit_delay import MID_TURN_FOR_S, RATE_WINDOW, CommitDelay

DELAY = 0.005
WINDOW = DELAY * RATE_WINDOW


def busy(delay: CommitDelay, sessions: int, now: float) -> None:
    """``sessions`` sessions each admitted an input within the last window: all mid-turn."""
    for i in range(sessions):
        delay.arrived(now - WINDOW / 2 + i * 1e-5, f"s{i}", pending=1)


def test_many_sessions_mid_turn_make_a_commit_wait_at_most_the_delay() -> None:
    delay = CommitDelay(DELAY)
    busy(delay, 30, now=10.0)
    assert delay.until(10.0, {"s0"}) == 10.0 + DELAY


def test_the_wait_ends_once_every_session_mid_turn_is_in_the_batch() -> None:
    delay = CommitDelay(DELAY)
    busy(delay, 30, now=10.0)
    batch = {f"s{i}" for i in range(29)}
    assert delay.awaited(batch)
    batch.add("s29")
    assert not delay.awaited(batch)


def test_a_session_whose_turn_ended_is_not_waited_for() -> None:
    delay = CommitDelay(DELAY)
    busy(delay, 30, now=10.0)
    for i in range(1, 30):
        delay.arrived(10.0, f"s{i}", pending=0)
    assert not delay.awaited({"s0"})
    assert delay.until(10.0, {"s0"}) is None


def test_too_few_appends_of_others_lately_means_no_wait() -> None:
    delay = CommitDelay(DELAY)
    busy(delay, RATE_WINDOW - 1, now=10.0)  # less than one other expected within the delay
    assert delay.until(10.0, {"someone-else"}) is None
    delay.arrived(10.0, "s-new", pending=1)
    assert delay.until(10.0, {"someone-else"}) == 10.0 + DELAY


def test_old_arrivals_leave_the_rate() -> None:
    delay = CommitDelay(DELAY)
    busy(delay, 30, now=10.0)
    assert delay.until(10.0 + 2 * WINDOW, {"s0"}) is None  # all mid-turn still, but quiet


def test_an_erased_or_long_silent_session_is_not_waited_for() -> None:
    delay = CommitDelay(DELAY)
    delay.arrived(0.0, "gone", pending=1)
    delay.arrived(0.0, "slow", pending=1)
    delay.forget("gone")
    assert delay.awaited(set())
    later = MID_TURN_FOR_S + 1.0
    for i in range(30):
        delay.arrived(later, f"s{i}", pending=None)  # busy, but saying nothing of their turns
    assert delay.until(later, set()) is None
    assert not delay.awaited(set())


def test_no_delay_never_waits() -> None:
    delay = CommitDelay(0.0)
    busy(delay, 100, now=10.0)
    assert delay.until(10.0, {"s0"}) is None


@given(st.lists(st.tuples(st.floats(0, 0.02), st.integers(0, 3)), max_size=200))
def test_a_lone_session_never_waits(steps: list[tuple[float, int]]) -> None:
    delay, now = CommitDelay(DELAY), 0.0
    for gap, pending in steps:
        now += gap
        delay.arrived(now, "only", pending)
        assert delay.until(now, {"only"}) is None


@given(st.lists(st.floats(0, 0.01), max_size=200), st.integers(2, 5))
def test_sessions_taking_turns_one_after_another_never_wait(gaps: list[float], sessions: int) -> None:
    """Each turn's input and end appended before the next session's input: whoever
    appends, nobody else is mid-turn."""
    delay, now = CommitDelay(DELAY), 0.0
    for n, gap in enumerate(gaps):
        sid = f"s{n % sessions}"
        now += gap
        delay.arrived(now, sid, pending=1)
        assert delay.until(now, {sid}) is None
        delay.arrived(now, sid, pending=0)
        assert delay.until(now, {sid}) is None


@given(
    st.lists(st.tuples(st.floats(0, 0.002), st.integers(0, 40), st.one_of(st.none(), st.integers(0, 2)))),
    st.sets(st.integers(0, 40)),
)
def test_a_wait_is_never_longer_than_the_delay_nor_for_nobody(
    steps: list[tuple[float, int, int | None]], batch_ids: set[int]
) -> None:
    delay, now = CommitDelay(DELAY), 0.0
    batch = {f"s{i}" for i in batch_ids}
    for gap, sid, pending in steps:
        now += gap
        delay.arrived(now, f"s{sid}", pending)
        until = delay.until(now, batch)
        if until is not None:
            assert until == now + DELAY
            assert delay.awaited(batch)
