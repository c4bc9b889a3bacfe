"""The one retry helper (netclaw.retry) with the provider classifier: backoff with full
jitter, Retry-After honoured exactly, bounded, stopped by can_retry, non-retryable
errors raised at once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from netclaw.errors import (
    ContextOverflow,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from netclaw.providers._classify import PROVIDER_MAX_RETRY_AFTER_S, retry_verdict
from netclaw.retry import Retry, RetryPolicy, backoff_delay, with_retries


class Script:
    """An attempt function failing with the given errors, then returning "ok"."""

    def __init__(self, *errors: ProviderError | Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def unavailable() -> ProviderUnavailable:
    return ProviderUnavailable("down")


async def run(
    script: Script,
    sleeps: Sleeps,
    *,
    max_retries: int = 4,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    **kw: Any,
) -> str:
    policy = RetryPolicy(
        max_retries=max_retries,
        base_delay_s=base_delay,
        max_delay_s=max_delay,
        max_retry_after_s=PROVIDER_MAX_RETRY_AFTER_S,
    )
    kw.setdefault("can_retry", lambda: True)
    return await with_retries(
        script,
        classify=retry_verdict,
        policy=policy,
        what="test",
        sleep=sleeps,
        logger=logging.getLogger("netclaw.providers"),
        **kw,
    )


async def test_backoff_is_exponential_with_full_jitter() -> None:
    sleeps = Sleeps()
    script = Script(*(unavailable() for _ in range(4)))
    result = await run(script, sleeps, base_delay=0.5, max_delay=3.0, rand=lambda: 0.5)
    assert result == "ok"
    assert script.calls == 5
    assert sleeps.delays == [0.25, 0.5, 1.0, 1.5]  # half of 0.5, 1, 2, min(4, 3)


async def test_jitter_bounds_with_real_random() -> None:
    for _ in range(20):
        sleeps = Sleeps()
        await run(Script(*(unavailable() for _ in range(4))), sleeps, base_delay=0.1)
        for attempt, delay in enumerate(sleeps.delays):
            assert 0.0 <= delay <= 0.1 * 2**attempt


async def test_retry_after_honoured_exactly() -> None:
    sleeps = Sleeps()
    script = Script(RateLimited("slow", retry_after=7.5), RateLimited("slow"))
    assert await run(script, sleeps, rand=lambda: 0.0) == "ok"
    assert sleeps.delays == [7.5, 0.0]  # the second had no retry_after: backoff


async def test_retry_after_above_cap_gives_up() -> None:
    sleeps = Sleeps()
    script = Script(RateLimited("slow", retry_after=3600))
    with pytest.raises(RateLimited):
        await run(script, sleeps)
    assert sleeps.delays == []
    assert script.calls == 1


async def test_can_retry_false_stops_retries() -> None:
    sleeps = Sleeps()
    script = Script(unavailable())
    with pytest.raises(ProviderUnavailable):
        await run(script, sleeps, can_retry=lambda: False)
    assert script.calls == 1
    assert sleeps.delays == []


async def test_can_retry_checked_per_failure() -> None:
    sleeps = Sleeps()
    script = Script(unavailable(), unavailable())
    flags = iter([True, False])
    with pytest.raises(ProviderUnavailable):
        await run(script, sleeps, can_retry=lambda: next(flags))
    assert script.calls == 2


async def test_retries_bounded() -> None:
    sleeps = Sleeps()
    script = Script(*(unavailable() for _ in range(3)))
    with pytest.raises(ProviderUnavailable):
        await run(script, sleeps, max_retries=2)
    assert script.calls == 3
    assert len(sleeps.delays) == 2


async def test_zero_retries() -> None:
    script = Script(unavailable())
    with pytest.raises(ProviderUnavailable):
        await run(script, Sleeps(), max_retries=0)
    assert script.calls == 1


@pytest.mark.parametrize(
    "error",
    [ContextOverflow("big"), ProviderAuthError("key"), ProviderBadRequest("no"), ValueError("x")],
)
async def test_non_retryable_raised_at_once(error: Exception) -> None:
    sleeps = Sleeps()
    script = Script(error)
    with pytest.raises(type(error)):
        await run(script, sleeps)
    assert script.calls == 1
    assert sleeps.delays == []


async def test_retries_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="netclaw.providers")
    await run(Script(ProviderUnavailable("HTTP 503 down")), Sleeps())
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.WARNING
    assert "retry 1/4" in record.getMessage()
    assert "HTTP 503 down" in record.getMessage()


def test_classifier_for_other_failures() -> None:
    # Slack and Discord bring their own classifiers; the loop is the same.
    assert retry_verdict(ValueError("x")) is None
    assert retry_verdict(RateLimited("slow", retry_after=2.0)) == Retry(2.0)
    assert retry_verdict(ProviderUnavailable("down")) == Retry(None)


def test_backoff_delay_is_capped() -> None:
    policy = RetryPolicy(max_retries=9, base_delay_s=1.0, max_delay_s=5.0)
    assert [backoff_delay(n, policy, lambda: 1.0) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


async def test_custom_classifier_retries_what_it_names() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("reset")
        return "ok"

    sleeps = Sleeps()
    result = await with_retries(
        flaky,
        classify=lambda exc: Retry(0.25) if isinstance(exc, ConnectionError) else None,
        policy=RetryPolicy(max_retries=5),
        what="flaky",
        sleep=sleeps,
    )
    assert result == "ok"
    assert sleeps.delays == [0.25, 0.25]
