"""``/healthz``'s ``provider``: failures to reach the model (calls and checks) counted in a
row, degraded after three, one success resets; other failures say nothing either way."""

from __future__ import annotations

import asyncio
import logging

import pytest

from netclaw.errors import (
    ContextOverflow,
    ModelNotServed,
    ProviderAuthError,
    ProviderUnavailable,
    RateLimited,
)
from netclaw.providers import Completion, OnDelta, ProviderRequest
from netclaw.workers import provider_health as ph


class Model:
    """A provider whose next answers are scripted: a Completion, or an exception to raise."""

    name = "local"

    def __init__(self) -> None:
        self.answers: list[Completion | Exception] = []
        self.checks: list[str | Exception] = []

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def check(self, model: str | None = None) -> str:
        answer = self.checks.pop(0) if self.checks else "reachable, 1 model"
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def aclose(self) -> None:
        pass


REQUEST = ProviderRequest(model="m", messages=())


async def test_three_unreachable_calls_in_a_row_degrade_and_one_success_heals() -> None:
    health = ph.ProviderHealth("local", "m")
    model = Model()
    watched = ph.WatchedProvider(model, health)
    assert health.state == "unknown" and health.problem() is None
    model.answers = [
        ProviderUnavailable("cannot reach http://127.0.0.1:9/v1"),
        RateLimited("slow down"),  # reachable, just busy: neither a failure nor a success
        ContextOverflow("too long"),  # this request's fault
        ProviderAuthError("bad key"),
        ProviderUnavailable("cannot reach http://127.0.0.1:9/v1"),
        Completion(text="fine"),
    ]
    for _ in range(5):
        with pytest.raises(Exception):  # noqa: B017 - each scripted failure is re-raised as it was
            await watched.complete(REQUEST)
    assert health.failures == 3 and health.state == "unreachable" and health.degraded
    assert health.problem() == (
        "provider local is unreachable (3 failures in a row): cannot reach http://127.0.0.1:9/v1"
    )
    assert health.to_json()["failures_in_a_row"] == 3
    assert (await watched.complete(REQUEST)).text == "fine"
    assert health.state == "ok" and health.problem() is None


async def test_the_watch_checks_now_and_again_and_logs_only_changes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ph, "CHECK_INTERVAL_S", 0.01)
    monkeypatch.setattr(ph, "FAILING_INTERVAL_S", 0.01)
    health = ph.ProviderHealth("local", "m")
    model = Model()
    model.checks = [
        ProviderUnavailable("cannot reach it"),
        ModelNotServed("no model 'm' (it has: other)", ["other"]),
        TimeoutError(),
        "reachable, 1 model",
    ]
    caplog.set_level(logging.INFO, "netclaw.daemon")
    task = asyncio.ensure_future(health.watch(model))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if not model.checks and health.state == "ok":
            break
    task.cancel()
    assert health.state == "ok"
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "provider local is not usable yet: cannot reach it (turns will fail until it is)"
    assert any("failed 3 times in a row (no answer within 10s)" in m for m in messages), messages
    assert any(m.startswith("provider local is reachable again") for m in messages), messages
    assert len(messages) == 3  # not one line per check
