"""One retry policy for every remote call (providers, Slack, Discord), and the one
backoff schedule for every retry and reconnect.

The caller brings a *classifier* — "is this failure worth another try, and did the
other side say when?" — and a :class:`RetryPolicy`; :func:`with_retries` brings the
loop: full-jitter exponential backoff, a server's ``Retry-After`` honoured exactly
(or the call given up when it asks for longer than the policy will wait), and one
log line per retry.

Whatever else waits before trying again — a channel adapter started afresh, an MCP
server reconnected, a session restarted, a reminder fire retried, a chat stream or the
CLI's event stream re-subscribed — waits as a :class:`Backoff` says.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


MAX_EXPONENT = 64  # past this many failures in a row the wait is the cap anyway (no float overflow)


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before the next attempt after ``failures`` failures in a row (from 0):
    ``first_s`` growing ``factor``-fold per failure, capped at ``max_s``, jittered.

    ``jitter`` is the random share of each wait, so that many clients (daemons, adapters,
    servers) do not retry in lockstep: 1 is "full jitter" (uniform in [0, w], for calls
    many clients make at once), 0.2 keeps it within [0.8 w, w], 0 is exact (a local
    retry nothing contends with).
    """

    first_s: float
    max_s: float
    factor: float = 2.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if not (0 <= self.first_s <= self.max_s and self.factor >= 1 and 0 <= self.jitter <= 1):
            raise ValueError(
                f"not a backoff: {self!r} (need 0 <= first_s <= max_s, factor >= 1, jitter in [0, 1])"
            )

    def ceiling(self, failures: int) -> float:
        """The wait before jitter: ``min(max_s, first_s * factor ** failures)``."""
        return min(self.max_s, self.first_s * self.factor ** min(max(failures, 0), MAX_EXPONENT))

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """The wait, jittered within [(1 - jitter) * ceiling, ceiling]."""
        ceiling = self.ceiling(failures)
        return ceiling * (1.0 - self.jitter + self.jitter * rand())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int  # retries after the first attempt
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0  # a longer server-requested wait gives up instead

    @property
    def backoff(self) -> Backoff:
        """Its waits between retries (full jitter, from ``base_delay_s`` to ``max_delay_s``)."""
        return Backoff(first_s=self.base_delay_s, max_s=self.max_delay_s)


@dataclass(frozen=True, slots=True)
class Retry:
    """A classifier's verdict: try again, after ``after`` seconds if the server said so."""

    after: float | None = None


Classifier = Callable[[BaseException], Retry | None]


def backoff_delay(attempt: int, policy: RetryPolicy, rand: Callable[[], float] = random.random) -> float:
    """The wait before retry ``attempt + 1`` under ``policy`` (its :class:`Backoff`): uniform
    in [0, min(max_delay, base · 2^attempt)]."""
    return policy.backoff.delay(attempt, rand)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    classify: Classifier,
    policy: RetryPolicy,
    what: str,
    can_retry: Callable[[], bool] = lambda: True,
    logger: logging.Logger = log,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``call``; while ``classify`` says a failure is worth it, wait and run it again.

    At most ``policy.max_retries`` retries. ``can_retry`` is asked before each one (a
    provider stops once part of an answer was shown). Failures the classifier rejects,
    and cancellation, propagate at once; so does the last one.
    """
    retries = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            verdict = classify(exc)
            if verdict is None or retries >= policy.max_retries or not can_retry():
                raise
            if verdict.after is not None:
                if verdict.after > policy.max_retry_after_s:
                    logger.warning(
                        "%s: not retrying: the server asked to wait %.1f s (more than %.0f s): %s",
                        what,
                        verdict.after,
                        policy.max_retry_after_s,
                        exc,
                    )
                    raise
                delay = max(verdict.after, 0.0)
            else:
                delay = backoff_delay(retries, policy, rand)
            retries += 1
            logger.warning(
                "%s: retry %d/%d in %.2f s after %s: %s",
                what,
                retries,
                policy.max_retries,
                delay,
                type(exc).__name__,
                exc,
            )
            await sleep(delay)
