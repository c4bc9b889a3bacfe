"""The one backoff schedule (netclaw.retry.Backoff): every retry and reconnect waits as it
says — exponential from ``first_s``, capped at ``max_s``, with the random share
``jitter`` — and the waits of each user of it, pinned."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.supervisor import AdapterSupervisor
from netclaw.cli._chat import RECONNECT_BACKOFF
from netclaw.retry import Backoff, RetryPolicy, backoff_delay
from netclaw.sessions._residency.restarts import RESTART_BACKOFF, RESTARTS_BEFORE_GIVING_UP
from netclaw.workers.scheduler import RETRY_BACKOFF

backoffs = st.builds(
    Backoff,
    first_s=st.floats(0.0, 10.0),
    max_s=st.floats(10.0, 600.0),
    factor=st.floats(1.0, 8.0),
    jitter=st.floats(0.0, 1.0),
)


def test_an_exact_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(first_s=0.5, max_s=5.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_is_the_random_share_of_each_wait() -> None:
    full, some = Backoff(first_s=1.0, max_s=60.0), Backoff(first_s=1.0, max_s=60.0, jitter=0.2)
    assert (full.delay(3, lambda: 0.0), full.delay(3, lambda: 1.0)) == (0.0, 8.0)
    assert (some.delay(3, lambda: 0.0), some.delay(3, lambda: 1.0)) == (pytest.approx(6.4), 8.0)


def test_a_retry_policy_waits_with_full_jitter_from_its_base_delay() -> None:
    policy = RetryPolicy(max_retries=9, base_delay_s=1.0, max_delay_s=5.0)
    assert policy.backoff == Backoff(first_s=1.0, max_s=5.0, factor=2.0, jitter=1.0)
    assert [backoff_delay(n, policy, lambda: 0.5) for n in range(5)] == [0.5, 1.0, 2.0, 2.5, 2.5]


def test_nonsense_is_refused() -> None:
    for bad in (
        {"first_s": 2.0, "max_s": 1.0},
        {"first_s": 1.0, "max_s": 2.0, "factor": 0.5},
        {"first_s": 1.0, "max_s": 2.0, "jitter": 2.0},
    ):
        with pytest.raises(ValueError, match="not a backoff"):
            Backoff(**bad)  # type: ignore[arg-type]


@given(backoffs, st.integers(0, 10_000), st.floats(0.0, 1.0))
def test_every_wait_is_within_its_jitter_below_a_growing_capped_ceiling(
    backoff: Backoff, failures: int, rand: float
) -> None:
    ceiling = backoff.ceiling(failures)
    assert backoff.first_s <= ceiling <= backoff.max_s or ceiling == backoff.max_s
    assert backoff.ceiling(failures + 1) >= ceiling  # never shrinks, never overflows
    wait = backoff.delay(failures, lambda: rand)
    assert ceiling * (1 - backoff.jitter) - 1e-9 <= wait <= ceiling + 1e-9


def test_the_waits_of_each_user() -> None:
    exact = lambda backoff, n: [backoff.delay(i) for i in range(n)]  # noqa: E731
    # A session that failed to restart: 0.5 s, 2 s, 8 s, 32 s, 60 s, then it waits for its next message.
    assert exact(RESTART_BACKOFF, RESTARTS_BEFORE_GIVING_UP) == [0.5, 2.0, 8.0, 32.0, 60.0]
    # `netclaw chat` reconnecting to the daemon.
    assert exact(RECONNECT_BACKOFF, 6) == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    # A reminder fire (or the reminder store) failing again and again: 5 s, doubling to a minute.
    assert exact(RETRY_BACKOFF, 6) == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    # A channel adapter started afresh: 1 s doubling to a minute, within 20 % below.
    supervisor = AdapterSupervisor(None)  # type: ignore[arg-type]
    assert supervisor.backoff == Backoff(first_s=1.0, max_s=60.0, jitter=0.2)
