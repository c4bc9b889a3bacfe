"""Can the model be reached? The ``provider`` field of ``/healthz``.

The main provider is wrapped (:class:`WatchedProvider`): a model call that fails because
the provider cannot be reached or refuses the key (``provider_unavailable`` after the
retries — connection, timeout, 5xx — and ``provider_auth``) counts as a failure, a call
that succeeds resets the count; other failures (a rate limit, a request too large) say
nothing about reachability and change nothing. A check (the models listing, as
``netclaw doctor`` does) runs at start-up and then every :data:`CHECK_INTERVAL_S`
(:data:`FAILING_INTERVAL_S` while failing) and counts the same way — a model the server
does not have counts too.

After :data:`DEGRADED_AFTER` failures in a row the provider is ``unreachable`` and
``/healthz`` is ``503 degraded`` naming it, so a container's HEALTHCHECK or a load balancer
sees a daemon whose every turn would fail. One success makes it ``ok`` again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from netclaw.errors import ModelNotServed, ProviderAuthError, ProviderError, ProviderUnavailable
from netclaw.providers import Completion, OnDelta, Provider, ProviderRequest

log = logging.getLogger("netclaw.daemon")

DEGRADED_AFTER = 3  # failures in a row (calls or checks)
CHECK_INTERVAL_S = 60.0
FAILING_INTERVAL_S = 10.0
CHECK_TIMEOUT_S = 10.0
# What says the provider cannot be used at all (rather than "not this request").
UNREACHABLE = (ProviderUnavailable, ProviderAuthError, ModelNotServed)


class ProviderHealth:
    """The main provider's reachability, from calls and checks. Updated and read on the
    I/O loop (calls and checks run there; ``/healthz`` is answered there)."""

    def __init__(self, name: str, model: str) -> None:
        self.name = name
        self.model = model
        self.failures = 0  # in a row
        self.detail = "not checked yet"
        self.checked_at: float | None = None

    @property
    def state(self) -> str:
        if self.checked_at is None:
            return "unknown"
        if self.failures == 0:
            return "ok"
        return "unreachable" if self.failures >= DEGRADED_AFTER else "failing"

    @property
    def degraded(self) -> bool:
        return self.failures >= DEGRADED_AFTER

    def succeeded(self, detail: str) -> None:
        if self.degraded:
            log.info("provider %s is reachable again: %s", self.name, detail)
        self.failures = 0
        self.detail = detail
        self.checked_at = time.time()

    def failed(self, exc: Exception) -> None:
        self.failures += 1
        self.detail = str(exc) or type(exc).__name__
        self.checked_at = time.time()
        if self.failures == DEGRADED_AFTER:
            log.error(
                "provider %s failed %d times in a row (%s); /healthz reports degraded until it answers",
                self.name,
                self.failures,
                self.detail,
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "state": self.state,
            "detail": self.detail,
            "failures_in_a_row": self.failures,
            "checked_at": self.checked_at,
        }

    def problem(self) -> str | None:
        """For ``/healthz``'s reasons, once degraded."""
        if not self.degraded:
            return None
        return f"provider {self.name} is unreachable ({self.failures} failures in a row): {self.detail}"

    async def watch(self, provider: Provider) -> None:
        """Forever: check now, then every interval. The first result is logged (as start-up
        always did); later, the changes of state are (see :meth:`failed`, :meth:`succeeded`)."""
        while True:
            first = self.checked_at is None
            try:
                detail = await asyncio.wait_for(provider.check(self.model), CHECK_TIMEOUT_S)
            except UNREACHABLE as exc:
                self.failed(exc)
            except TimeoutError:
                self.failed(TimeoutError(f"no answer within {CHECK_TIMEOUT_S:g}s"))
            except ProviderError as exc:  # it answered; what it said is not about reachability
                self.succeeded(f"answers, but: {exc}")
            except Exception as exc:  # noqa: BLE001 - a check must never end the watch
                self.failed(exc)
            else:
                if first:
                    log.info("provider %s: %s", self.name, detail)
                self.succeeded(detail)
            if first and self.failures:
                log.warning(
                    "provider %s is not usable yet: %s (turns will fail until it is)", self.name, self.detail
                )
            await asyncio.sleep(FAILING_INTERVAL_S if self.failures else CHECK_INTERVAL_S)


class WatchedProvider:
    """The main provider, its calls counted in :class:`ProviderHealth` (everything else
    passes through unchanged)."""

    def __init__(self, inner: Provider, health: ProviderHealth) -> None:
        self.inner = inner
        self.health = health
        self.name = inner.name

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        try:
            completion = await self.inner.complete(request, on_delta)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            raise
        self.health.succeeded("the last model call succeeded")
        return completion

    async def check(self, model: str | None = None) -> str:
        return await self.inner.check(model)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # Anything else a provider offers (tests and benchmarks reach in) is the inner one's.
        return getattr(self.inner, name)
