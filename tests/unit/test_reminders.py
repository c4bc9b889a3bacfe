"""Reminder schedules (pure): validation that names the field, cron in a timezone across
DST as croniter defines it, and what a missed fire becomes under each ``catch_up``."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netclaw.errors import InvalidInput
from netclaw.reminders import (
    LATE_AFTER_S,
    MAX_AHEAD_S,
    MAX_CATCH_UP,
    Schedule,
    check_catch_up,
    check_name,
    check_text,
    fire_text,
    identity,
    iso,
    make_schedule,
    parse_duration,
    plan_due,
)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = dt.datetime(2026, 3, 27, 12, 0, tzinfo=BERLIN).timestamp()  # a Friday before spring-forward


def local(t: float) -> str:
    return dt.datetime.fromtimestamp(t, BERLIN).strftime("%a %Y-%m-%d %H:%M %Z")


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({}, "schedule", "exactly one of"),
        ({"in_s": 60, "cron": "* * * * *"}, "schedule", "got in_s, cron"),
        ({"at": "2020-01-01T00:00"}, "at", "in the past"),
        ({"at": "next tuesday"}, "at", "ISO-8601"),
        ({"in_s": "soon"}, "in_s", "duration"),
        ({"in_s": 0}, "in_s", "more than 0"),
        ({"every_s": 5}, "every_s", "at least 60"),
        ({"cron": "0 9 * *"}, "cron", "5 fields"),
        ({"cron": "0 25 * * *"}, "cron", "cannot be parsed"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone", "unknown timezone"),
    ],
)
def test_bad_schedules_name_the_field(fields: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        make_schedule(now=NOW, **fields)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert words in str(caught.value)


# The inputs that answered 500 (two of them after storing the reminder) in issue 34's
# fuzz run, and their neighbours: each is an InvalidInput naming the field.
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"in_s": 9e18}, "in_s"),
        ({"at": 1e20}, "at"),
        ({"at": -1e20}, "at"),
        ({"cron": "0 9 * * *", "timezone": 5}, "timezone"),
        ({"at": 10**400}, "at"),
        ({"at": -(10**400)}, "at"),
        ({"at": float("nan")}, "at"),
        ({"at": float("inf")}, "at"),
        ({"in_s": float("-inf")}, "in_s"),
        ({"in_s": -5}, "in_s"),
        ({"every_s": 10**30}, "every_s"),
        ({"every_s": "9" * 400}, "every_s"),
        ({"in_s": True}, "in_s"),
        ({"in_s": [60]}, "in_s"),
        ({"at": {"t": 1}}, "at"),
        ({"at": "9999-12-31T23:59"}, "at"),  # past the century ahead
        ({"at": "0001-01-01T00:00+01:00"}, "at"),  # before year 1 in UTC
        ({"at": "2" * 100}, "at"),
        ({"cron": ["0", "9", "*", "*", "*"]}, "cron"),
        ({"cron": "0 9 * * *", "timezone": ""}, "timezone"),
        ({"cron": "0 9 * * *", "timezone": ["UTC"]}, "timezone"),
        ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "timezone"),
        ({"cron": "0 9 * * *", "timezone": "UTC\n"}, "timezone"),
        ({"cron": "0 0 31 2 *"}, "cron"),  # never comes
        ({"cron": "*/0 * * * *"}, "cron"),
        ({"cron": "0 9 * * * " * 50}, "cron"),
    ],
)
def test_hostile_schedules_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        make_schedule(now=NOW, **fields)  # type: ignore[arg-type]
    assert caught.value.field == field


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**400, -(10**400), 2**63, 9 * 10**18, -1, 0])
    | st.floats()
    | st.text(max_size=30)
    | st.sampled_from(["10m", "1h", "2099-01-01T09:00", "0 9 * * *", "Europe/Berlin", "9" * 400]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@given(
    st.sampled_from(["at", "in_s", "every_s", "cron"]),
    json_values,
    st.one_of(st.none(), json_values),
)
def test_any_json_is_a_schedule_that_works_or_invalid_input(kind: str, value: object, zone: object) -> None:
    """Whatever JSON comes in: InvalidInput, or a schedule whose every use works (its first
    fire is finite, within a century, and can be printed)."""
    try:
        schedule = make_schedule(now=NOW, timezone=zone, **{kind: value})  # type: ignore[arg-type]
    except InvalidInput:
        return
    first = schedule.first_fire(NOW)
    assert NOW < first <= NOW + MAX_AHEAD_S
    assert schedule.describe()
    assert fire_text("t", first, schedule.timezone)


def test_labels_and_text_from_outside() -> None:
    assert check_name(None) is None and check_name(" legs ") == "legs"
    for bad in ("", "a\nb", "x\u2028", "\x1b[31m", 5, "n" * 101, "\ud800"):
        with pytest.raises(InvalidInput) as caught:
            check_name(bad)
        assert caught.value.field == "name"
    for bad_text in (None, 5, ["x"], "  ", "\ud800", "x" * 4001):
        with pytest.raises(InvalidInput) as caught:
            check_text(bad_text)
        assert caught.value.field == "text"
    assert check_text("line one\nline two") == "line one\nline two"  # free text may have lines
    assert check_catch_up("all") == "all"
    with pytest.raises(InvalidInput):
        check_catch_up(["all"])


def test_a_delay_too_small_to_move_the_clock_is_refused() -> None:
    """Found by Hypothesis: 1.4e-45 s is more than 0 but NOW + it == NOW (a fire not ahead)."""
    for tiny in (1.4e-45, 5e-324, 0, 0.0):
        with pytest.raises(InvalidInput, match="more than 0 seconds"):
            make_schedule(now=NOW, in_s=tiny)


def test_one_shots_and_periods() -> None:
    assert make_schedule(now=NOW, in_s="10m").first_fire(NOW) == NOW + 600
    at = make_schedule(now=NOW, at="2026-03-28T08:30", timezone="Europe/Berlin")
    assert local(at.first_fire(NOW)) == "Sat 2026-03-28 08:30 CET"
    assert at.next_after(at.first_fire(NOW)) is None
    every = make_schedule(now=NOW, every_s="1h")
    assert every.first_fire(NOW) == NOW + 3600 and every.next_after(NOW + 3600) == NOW + 7200
    assert parse_duration("1.5h", "x") == 5400 and parse_duration(90, "x") == 90


def test_weekday_cron_in_a_timezone_skips_the_weekend() -> None:
    standup = make_schedule(now=NOW, cron="0 9 * * 1-5", timezone="Europe/Berlin")
    first = standup.first_fire(NOW)
    second = standup.next_after(first)
    assert second is not None
    assert (local(first), local(second)) == ("Mon 2026-03-30 09:00 CEST", "Tue 2026-03-31 09:00 CEST")


def test_dst_spring_forward_and_fall_back_follow_croniter() -> None:
    # 02:30 does not exist on 2026-03-29 in Berlin: croniter fires at 03:00 that day.
    nightly = make_schedule(now=NOW, cron="30 2 * * *", timezone="Europe/Berlin")
    first = nightly.first_fire(NOW)
    after = nightly.next_after(first)
    assert after is not None
    assert local(first) == "Sat 2026-03-28 02:30 CET"
    fires = [first, after]
    while len(fires) < 4:
        following = nightly.next_after(fires[-1])
        assert following is not None
        fires.append(following)
    shown = [local(t) for t in fires]
    assert "Sun 2026-03-29 03:00 CEST" in shown and "Mon 2026-03-30 02:30 CEST" in shown
    assert all(b - a > 0 for a, b in itertools.pairwise(fires))
    # 02:30 happens twice on 2026-10-25: croniter fires at both, an hour apart.
    autumn = dt.datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN).timestamp()
    fires = [nightly.first_fire(autumn)]
    for _ in range(2):
        following = nightly.next_after(fires[-1])
        assert following is not None
        fires.append(following)
    assert [local(t) for t in fires] == [
        "Sun 2026-10-25 02:30 CEST",
        "Sun 2026-10-25 02:30 CET",
        "Mon 2026-10-26 02:30 CET",
    ]
    assert fires[1] - fires[0] == 3600


def test_a_fire_on_time_just_fires() -> None:
    hourly = Schedule("every", every_s=3600)
    plan = plan_due(hourly, NOW, NOW + 5, "skip")
    assert plan.fire == (NOW,) and plan.skipped == 0 and plan.next_fire == NOW + 3600


@pytest.mark.parametrize(
    ("mode", "fired", "skipped"),
    [("latest", 1, 2), ("all", 3, 0), ("skip", 0, 3)],
)
def test_missed_fires_follow_catch_up(mode: str, fired: int, skipped: int) -> None:
    hourly = Schedule("every", every_s=3600)
    now = NOW + 2 * 3600 + 600  # down over three fire times, the last 10 minutes ago
    plan = plan_due(hourly, NOW, now, mode)  # type: ignore[arg-type]
    assert len(plan.fire) == fired and plan.skipped == skipped
    assert plan.next_fire == NOW + 3 * 3600
    if mode == "latest":
        assert plan.fire == (NOW + 2 * 3600,)


def test_catch_up_all_is_bounded() -> None:
    minutely = Schedule("every", every_s=60)
    plan = plan_due(minutely, NOW, NOW + 1000 * 60, "all")
    # The last 50 missed, and the two within LATE_AFTER_S of now (on time, a minute apart).
    assert len(plan.fire) == MAX_CATCH_UP + 2
    assert plan.skipped == 1001 - len(plan.fire)


def test_a_missed_one_shot_fires_late_unless_skipped() -> None:
    once = Schedule("at", at=NOW)
    late = NOW + LATE_AFTER_S + 1
    assert plan_due(once, NOW, late, "latest").fire == (NOW,)
    assert plan_due(once, NOW, late, "skip") == type(plan_due(once, NOW, late, "skip"))((), 1, None)


@given(st.floats(min_value=0, max_value=2e9, allow_nan=False), st.floats(min_value=0, max_value=1e6))
def test_plans_never_fire_the_future_and_account_for_every_missed_time(due: float, lateness: float) -> None:
    hourly = Schedule("every", every_s=3600)
    for mode in ("latest", "all", "skip"):
        plan = plan_due(hourly, due, due + lateness, mode)  # type: ignore[arg-type]
        assert all(t <= due + lateness for t in plan.fire)
        assert list(plan.fire) == sorted(set(plan.fire))
        assert plan.next_fire is not None and plan.next_fire > due + lateness
        missed = int(lateness // 3600) + 1
        assert len(plan.fire) + plan.skipped == missed


def test_identity_and_text() -> None:
    assert identity("rem-1", 1767258000.0) == "reminder:rem-1:1767258000.000"
    text = fire_text("Post the stand-up summary.", NOW, "Europe/Berlin", "standup")
    assert text.startswith("[Scheduled reminder 'standup', due 2026-03-27T12:00+01:00.")
    assert text.endswith("Post the stand-up summary.")


def test_printing_a_time_never_fails() -> None:
    """A row stored before times were checked (next_fire 9e18) still lists and logs."""
    assert "out of range" in iso(9e18) and "out of range" in iso(-1e20, "Europe/Berlin")
    assert iso(NOW, "Europe/Berlin") == "2026-03-27T12:00+01:00"
