"""Reminders: when they fire, what a fire says, and what to do about missed fires (pure).

A :class:`Schedule` is exactly one of a moment (``at``), a period (``every_s``) or a
cron expression in an IANA timezone (5 fields; DST transitions behave as croniter
defines them: a time skipped by a spring-forward is not fired that day, a repeated
hour fires once). Times are Unix seconds throughout.

Everything a person or the model gives is checked here before anything is stored or
logged: numbers finite and within ``MAX_AHEAD_S`` (a century: every fire time stays a
date the platform can print), timezones strings naming a zone, cron expressions strings;
each mistake is an :class:`~netclaw.errors.InvalidInput` naming its field.

A fire's replay identity is ``reminder:<id>:<scheduled time>``: firing the same
scheduled time twice (a crash between the admission and recording the fire) admits
the message once.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from netclaw.errors import InvalidInput
from netclaw.identifiers import check_encodable, check_label

CatchUp = Literal["latest", "all", "skip"]
Kind = Literal["at", "every", "cron"]

MIN_EVERY_S = 60.0  # a reminder more often than once a minute is a loop, not a reminder
MAX_TEXT_CHARS = 4000
LATE_AFTER_S = 60.0  # a fire this late (the daemon was down) counts as missed: catch_up decides
MAX_CATCH_UP = 50  # with catch_up "all", at most this many missed fires are replayed
MAX_AHEAD_S = 100 * 365 * 86400.0  # no reminder fires more than a century ahead
MAX_CRON_CHARS = 200
MAX_NAME_CHARS = 100
_MAX_WHEN_CHARS = 64  # an ISO-8601 time or a duration is short; anything longer is not one
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
# IANA names: Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5, EST5EDT.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]{1,32}(?:/[A-Za-z0-9_+\-]{1,32}){0,3}")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: Kind
    at: float | None = None
    every_s: float | None = None
    cron: str | None = None
    timezone: str = "UTC"

    def first_fire(self, now: float) -> float:
        """The first fire of a schedule created at ``now``."""
        if self.kind == "at":
            assert self.at is not None
            return self.at
        if self.kind == "every":
            assert self.every_s is not None
            return now + self.every_s
        return self._cron_after(now)

    def next_after(self, fired: float) -> float | None:
        """The fire after the one scheduled at ``fired``; None for a one-shot."""
        if self.kind == "at":
            return None
        if self.kind == "every":
            assert self.every_s is not None
            return fired + self.every_s
        return self._cron_after(fired)

    def describe(self) -> str:
        if self.kind == "at":
            assert self.at is not None
            return f"at {iso(self.at, self.timezone)}"
        if self.kind == "every":
            assert self.every_s is not None
            return f"every {duration_text(self.every_s)}"
        return f"cron '{self.cron}' ({self.timezone})"

    def _cron_after(self, t: float) -> float:
        assert self.cron is not None
        start = dt.datetime.fromtimestamp(t, ZoneInfo(self.timezone))
        return float(croniter(self.cron, start).get_next(float))

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("at", self.at), ("every_s", self.every_s), ("cron", self.cron))
            if v is not None
        } | {
            "kind": self.kind,
            "timezone": self.timezone,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schedule:
        return cls(
            data["kind"], data.get("at"), data.get("every_s"), data.get("cron"), data.get("timezone", "UTC")
        )


def make_schedule(
    *,
    now: float,
    at: object = None,
    in_s: object = None,
    every_s: object = None,
    cron: object = None,
    timezone: object = None,
    new: bool = True,
) -> Schedule:
    """Validate a schedule as a person or the model wrote it (any JSON value may come in);
    InvalidInput names the field. ``new``: an ``at`` in the past is refused (a config
    reminder being re-read is not new)."""
    given = [
        name
        for name, value in (("at", at), ("in_s", in_s), ("every_s", every_s), ("cron", cron))
        if value is not None
    ]
    if len(given) != 1:
        raise InvalidInput(
            "schedule",
            "give exactly one of 'at' (ISO-8601 time), 'in_s' (seconds from now), 'every_s' or 'cron'"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    zone = _zone("UTC" if timezone is None else timezone)
    if at is not None:
        when = parse_time(at, zone)
        if new and when <= now:
            raise InvalidInput("at", f"'at' is in the past ({iso(when, zone.key)}); give a future time")
        if when > now + MAX_AHEAD_S:
            raise InvalidInput("at", "'at' is more than 100 years ahead; give a nearer time")
        return Schedule("at", at=when, timezone=zone.key)
    if in_s is not None:
        seconds = parse_duration(in_s, "in_s")
        if now + seconds <= now:  # zero, or too small to move a clock reading (1e-45)
            raise InvalidInput("in_s", "'in_s' must be more than 0 seconds")
        return Schedule("at", at=now + seconds, timezone=zone.key)
    if every_s is not None:
        seconds = parse_duration(every_s, "every_s")
        if seconds < MIN_EVERY_S:
            raise InvalidInput("every_s", f"'every_s' must be at least {MIN_EVERY_S:g} seconds")
        return Schedule("every", every_s=seconds, timezone=zone.key)
    return Schedule("cron", cron=_check_cron(cron, now, zone), timezone=zone.key)


def _check_cron(cron: object, now: float, zone: ZoneInfo) -> str:
    if not isinstance(cron, str):
        raise InvalidInput("cron", "'cron' must be a string of 5 fields, such as '0 9 * * 1-5'")
    if len(cron) > MAX_CRON_CHARS:
        raise InvalidInput("cron", f"'cron' is longer than {MAX_CRON_CHARS} characters")
    expression = " ".join(cron.split())
    if len(expression.split(" ")) != 5:
        raise InvalidInput("cron", f"'cron' needs 5 fields (minute hour day month weekday), got {cron!r}")
    try:
        croniter(expression, dt.datetime.fromtimestamp(now, zone)).get_next(float)
    except (
        CroniterBadCronError,
        CroniterBadDateError,
        CroniterError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        OverflowError,
        ZeroDivisionError,
    ) as exc:  # croniter's many ways of saying an expression is malformed
        raise InvalidInput("cron", f"'cron' {cron!r} cannot be parsed: {exc}") from exc
    return expression


def check_text(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidInput("text", "'text' is required: what the reminder should say (a string)")
    if not text.strip():
        raise InvalidInput("text", "'text' is required: what the reminder should say")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidInput("text", f"'text' is longer than {MAX_TEXT_CHARS} characters")
    check_encodable("text", text)
    return text.strip()


def check_name(name: object) -> str | None:
    """A reminder's optional name: a short label on one line."""
    return None if name is None else check_label("name", name, max_chars=MAX_NAME_CHARS)


def check_catch_up(value: object) -> CatchUp:
    if isinstance(value, str) and value in ("latest", "all", "skip"):
        return cast(CatchUp, value)
    raise InvalidInput("catch_up", "'catch_up' must be latest, all or skip")


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do about a reminder that is due: fire these scheduled times (oldest first),
    skip ``skipped`` missed ones, then wait for ``next_fire`` (None: it is done)."""

    fire: tuple[float, ...]
    skipped: int
    next_fire: float | None


def plan_due(schedule: Schedule, due: float, now: float, catch_up: CatchUp) -> Plan:
    """A reminder whose next fire ``due`` has come (``due <= now``). On time (within
    ``LATE_AFTER_S``) it just fires; fires missed while the daemon was down follow
    ``catch_up``: ``latest`` fires the latest missed once, ``all`` each of them (at most
    ``MAX_CATCH_UP``), ``skip`` none."""
    missed = [due]
    following = schedule.next_after(due)
    while following is not None and following <= now and len(missed) < 10_000:
        missed.append(following)
        following = schedule.next_after(following)
    on_time = [t for t in missed if now - t <= LATE_AFTER_S]
    late = [t for t in missed if now - t > LATE_AFTER_S]
    if not late:
        fire: list[float] = on_time
    elif catch_up == "all":
        fire = [*late[-MAX_CATCH_UP:], *on_time]
    elif catch_up == "latest":
        fire = on_time or late[-1:]
    else:
        fire = on_time
    return Plan(tuple(fire), len(missed) - len(fire), following)


def identity(reminder_id: str, scheduled: float) -> str:
    return f"reminder:{reminder_id}:{scheduled:.3f}"


def fire_text(text: str, scheduled: float, timezone: str, name: str | None = None) -> str:
    """What the session receives: the model is told it is a scheduled reminder."""
    label = f" '{name}'" if name else ""
    return f"[Scheduled reminder{label}, due {iso(scheduled, timezone)}. Nobody typed this now; act on it.]\n{text}"


# -- parsing ----------------------------------------------------------------------------------


def parse_time(value: object, zone: ZoneInfo) -> float:
    """``at``: Unix seconds, or an ISO-8601 time (in ``zone`` unless it says otherwise)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _seconds(value, "at")
    if not isinstance(value, str):
        raise InvalidInput("at", "'at' must be an ISO-8601 time (a string) or Unix seconds (a number)")
    if len(value) > _MAX_WHEN_CHARS:
        raise InvalidInput(
            "at", f"'at' must be an ISO-8601 time such as 2026-12-01T09:00 (got {value[:40]!r}…)"
        )
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInput(
            "at", f"'at' must be an ISO-8601 time such as 2026-12-01T09:00 (got {value!r})"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    try:
        seconds = when.timestamp()
    except (OverflowError, ValueError, OSError) as exc:  # year 1 minus an offset, and such
        raise InvalidInput("at", _OUT_OF_RANGE["at"]) from exc
    return _seconds(seconds, "at")


def parse_duration(value: object, field: str) -> float:
    """Seconds, or a number with a unit: 90, "90s", "10m", "2h", "1d", "1w"; finite, at most
    ``MAX_AHEAD_S`` and not negative (zero is the caller's to refuse)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = _seconds(value, field)
    elif isinstance(value, str) and len(value) <= _MAX_WHEN_CHARS and (match := _DURATION.fullmatch(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        shown = repr(value[:40]) if isinstance(value, str) else f"a {type(value).__name__}"
        raise InvalidInput(
            field, f"'{field}' must be seconds or a duration such as 10m, 2h or 1d (got {shown})"
        )
    if not math.isfinite(seconds) or seconds > MAX_AHEAD_S:
        raise InvalidInput(field, _OUT_OF_RANGE.get(field, f"'{field}' is out of range"))
    if seconds < 0:
        raise InvalidInput(field, f"'{field}' must not be negative")
    return seconds


def _seconds(value: int | float, field: str) -> float:
    """A number as a float, refused when it is not finite or far out of any range a reminder
    uses (an int of 400 digits does not even convert); callers check their own range."""
    limit = 4 * MAX_AHEAD_S
    if (isinstance(value, int) and abs(value) > limit) or not math.isfinite(value) or abs(value) > limit:
        raise InvalidInput(field, _OUT_OF_RANGE.get(field, f"'{field}' is out of range"))
    return float(value)


_OUT_OF_RANGE = {
    "at": "'at' is out of range: give a time within the next 100 years",
    "in_s": f"'in_s' must be a finite number of seconds, at most 100 years ({MAX_AHEAD_S:.0f})",
    "every_s": f"'every_s' must be a finite number of seconds, at most 100 years ({MAX_AHEAD_S:.0f})",
}


def duration_text(seconds: float) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def iso(t: float, timezone: str = "UTC") -> str:
    """``t`` as a local ISO-8601 time; never raises (a row stored before times were checked
    may hold 9e18), it says the time is out of range instead."""
    try:
        return dt.datetime.fromtimestamp(t, ZoneInfo(timezone)).isoformat(timespec="minutes")
    except (OverflowError, OSError, ValueError):
        return f"{t:g} (Unix seconds, out of range)"


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str):
        raise InvalidInput("timezone", "'timezone' must be a string: an IANA name such as 'Europe/Berlin'")
    shown = repr(name[:40])
    if not _ZONE_NAME.fullmatch(name):
        raise InvalidInput("timezone", f"unknown timezone {shown}; use an IANA name such as 'Europe/Berlin'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidInput(
            "timezone", f"unknown timezone {shown}; use an IANA name such as 'Europe/Berlin'"
        ) from exc
