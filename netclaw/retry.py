"""One retry policy for every remote call: providers, Slack, Discord.

The caller brings a *classifier* — "is this failure worth another try, and did the
other side say when?" — and a :class:`RetryPolicy`; :func:`with_retries` brings the
loop: full-jitter exponential backoff, a server's ``Retry-After`` honoured exactly
(or the call given up when it asks for longer than the policy will wait), and one
log line per retry.
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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int  # retries after the first attempt
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0  # a longer server-requested wait gives up instead


@dataclass(frozen=True, slots=True)
class Retry:
    """A classifier's verdict: try again, after ``after`` seconds if the server said so."""

    after: float | None = None


Classifier = Callable[[BaseException], Retry | None]


def backoff_delay(attempt: int, policy: RetryPolicy, rand: Callable[[], float] = random.random) -> float:
    """Full jitter: uniform in [0, min(max_delay, base · 2^attempt)] (``attempt`` from 0)."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * (2.0**attempt))
    return ceiling * rand()


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
