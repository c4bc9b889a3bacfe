"""``POST /api/sessions/{id}/reminders`` with any JSON object: the answer is a 2xx or a
4xx naming the field, never a 5xx, and the reminder is stored if and only if the answer
is a 2xx (the store write is the last step: nothing is stored on any error path)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from netclaw.config import Settings
from netclaw.daemon import Daemon
from tests.conftest import DaemonHandle
from tests.fakes.clock import FakeClock

START = 1_800_000_000.0  # the scheduler's clock stands still here: nothing fires meanwhile
SESSION = "cli:reminder-fuzz"

numbers = st.one_of(
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, 9 * 10**18, 0, -1, 60, 3600, 4_000_000_000]),
    st.floats(),  # NaN and ±Infinity included: Python's JSON writes and reads them
    st.sampled_from([1e20, -1e20, 9e18, 1e308, -0.0, 59.999]),
)
strings = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "10m",
            "1h",
            "2d",
            "90",
            "9" * 400,
            "2099-01-01T09:00",
            "2099-01-01T09:00Z",
            "9999-12-31T23:59",
            "0001-01-01T00:00+01:00",
            "0 9 * * *",
            "0 0 31 2 *",
            "*/0 * * * *",
            "Europe/Berlin",
            "Mars/Olympus",
            "../../etc/passwd",
            "UTC\n",
            "latest",
            "all",
            "skip",
            "a\nb",
            "\ud800",
        ]
    ),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "text": st.one_of(st.sampled_from(["stretch", "  ", "x" * 4001]), json_values),
        "at": json_values,
        "in_s": json_values,
        "every_s": json_values,
        "cron": json_values,
        "timezone": json_values,
        "catch_up": json_values,
        "name": json_values,
        "unknown": json_values,
    },
)


def good_or_any(*good: Any) -> st.SearchStrategy[Any]:
    """A value that is often valid (so the 2xx side is exercised), else anything."""
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), json_values)


horizon = st.floats(min_value=START + 1, max_value=START + 3.2e9)  # around the century's edge
in_s = st.one_of(st.floats(min_value=0.001, max_value=3.2e9), good_or_any(60, 3600, "10m", "2h", "1.5d", 0.5))
at = st.one_of(horizon, good_or_any("2099-01-01T09:00", "2030-06-01T12:00:00+02:00", "2100-02-28T00:00Z"))
every_s = st.one_of(st.floats(min_value=59, max_value=3.2e9), good_or_any(60, "1h", "1d", "1w"))
cron = good_or_any("0 9 * * *", "*/5 * * * *", "0 0 1 * *", "30 2 * * 0")
zones = good_or_any("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Etc/GMT+5")
extras = {
    "timezone": zones,
    "name": good_or_any("legs", "stand-up", "ünïcode ✓"),
    "catch_up": good_or_any("latest", "all", "skip"),
}
# Mostly one schedule field each, so that a good share of bodies are valid.
schedules = st.one_of(
    *(
        st.fixed_dictionaries(
            {key: values, "text": good_or_any("stretch", "line one\nline two")}, optional=extras
        )
        for key, values in (("in_s", in_s), ("at", at), ("every_s", every_s), ("cron", cron))
    )
)


@pytest.fixture
def frozen(make_settings: Callable[..., Settings]) -> Iterator[DaemonHandle]:
    daemon = Daemon(make_settings(session={"max_reminders": 1_000_000}), clock=FakeClock(START))
    daemon.start()
    handle = DaemonHandle(daemon)
    yield handle
    handle.stop()


def stored(handle: DaemonHandle) -> list[str]:
    listed = handle.http.get("/api/reminders", params={"session": SESSION})
    assert listed.status_code == 200, listed.text
    return [r["id"] for r in listed.json()]


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=st.one_of(bodies, schedules))
def test_any_json_is_a_2xx_that_stored_or_a_4xx_that_did_not(
    frozen: DaemonHandle, caplog: pytest.LogCaptureFixture, body: dict[str, Any]
) -> None:
    before = stored(frozen)
    raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    response = frozen.http.post(
        f"/api/sessions/{SESSION}/reminders", content=raw, headers={"Content-Type": "application/json"}
    )
    after = stored(frozen)
    event(f"answered {response.status_code}")  # --hypothesis-show-statistics: how many were 201
    assert response.status_code < 500, (body, response.text)
    if response.is_success:
        created = response.json()["id"]
        assert sorted(after) == sorted([*before, created]), (body, before, after)
        assert frozen.http.delete(f"/api/reminders/{created}").status_code == 204
    else:
        assert 400 <= response.status_code < 500
        error = response.json()["error"]
        assert error["code"].startswith("invalid_") and error["message"], error
        assert after == before, (body, response.text, before, after)  # nothing stored
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, errors


def test_the_inputs_of_issue_34_name_their_field(frozen: DaemonHandle) -> None:
    """The five bodies that answered 500 (two of them after storing the reminder)."""
    cases = [
        (b'{"text": "r", "in_s": 9e18}', "invalid_in_s"),
        (b'{"text": "r", "at": 1e20}', "invalid_at"),
        (b'{"text": "r", "at": -1e20}', "invalid_at"),
        (b'{"text": "r", "cron": "0 9 * * *", "timezone": 5}', "invalid_timezone"),
        (b'{"text": "r", "at": ' + b"1" * 400 + b"}", "invalid_at"),
    ]
    for raw, code in cases:
        response = frozen.http.post(f"/api/sessions/{SESSION}/reminders", content=raw)
        assert response.status_code == 400 and response.json()["error"]["code"] == code, response.text
    assert stored(frozen) == []
