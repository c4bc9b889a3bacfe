"""Retry transient provider failures, but only before anything was streamed.

A retry after the user has seen part of an answer would show (and record) it
twice, so the caller passes ``can_retry`` ("nothing streamed yet") and we stop
the moment it turns False.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from netclaw.errors import ProviderError, RateLimited

log = logging.getLogger("netclaw.providers")

T = TypeVar("T")

# Longest server-requested wait we sit through; beyond it the turn would stall
# for minutes, so the error goes to the user instead.
MAX_RETRY_AFTER_S = 120.0


def backoff_delay(attempt: int, *, base_delay: float, max_delay: float, rand: Callable[[], float]) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(max_delay, base * 2**attempt)]."""
    ceiling = min(max_delay, base_delay * (2.0**attempt))
    return ceiling * rand()


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    can_retry: Callable[[], bool],
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    max_retry_after: float = MAX_RETRY_AFTER_S,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``attempt``; on a retryable :class:`ProviderError` wait and run it again.

    At most ``max_retries`` retries (``max_retries + 1`` attempts). A
    :class:`RateLimited` with ``retry_after`` waits exactly that long, or gives up
    at once when the server asks for more than ``max_retry_after`` seconds.
    Anything else (non-retryable errors, non-provider exceptions, cancellation)
    propagates immediately.
    """
    retries = 0
    while True:
        try:
            return await attempt()
        except ProviderError as exc:
            if not exc.retryable or retries >= max_retries or not can_retry():
                raise
            retry_after = exc.retry_after if isinstance(exc, RateLimited) else None
            if retry_after is not None:
                if retry_after > max_retry_after:
                    log.warning(
                        "not retrying: server asked to wait %.1f s (more than %.0f s): %s",
                        retry_after,
                        max_retry_after,
                        exc,
                    )
                    raise
                delay = retry_after
            else:
                delay = backoff_delay(retries, base_delay=base_delay, max_delay=max_delay, rand=rand)
            retries += 1
            log.warning(
                "retry %d/%d in %.2f s after %s: %s",
                retries,
                max_retries,
                delay,
                type(exc).__name__,
                exc,
            )
            await sleep(delay)
