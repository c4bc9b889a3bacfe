"""What model calls cost, and the spend guards — in one place.

- :func:`cost_of`: one call's usage at a model's price (per million tokens, in
  ``spend.currency``). Cached reads and cache writes are billed at their own prices.
- :class:`Spent`: tokens and money, summed.
- :class:`SpendLedger`: the whole daemon's spend of the current UTC day, shared by every
  session. Sessions add each call as it is answered (from their actor threads) and read
  the day's total before each call; a read takes no lock (it reads one immutable value),
  so no session ever waits on another to decide whether it may call the model.
- :func:`spend_stop`: the guards, in one function — a session's own day (tokens and money,
  ``session.max_*_per_day``) and the daemon's (``spend.max_*_per_day``). When one is
  reached the turn ends with a :class:`SpendStop` naming the cap and when it resets.

Where spend is counted (so every kind of session adds up the same way): a session's day is
its recorded turns (``TurnRecorded.spent`` and ``.cost``, folded into its state) plus the
calls of the turn in progress; the daemon's day is the ledger, which every call of every
session adds to as it is answered. Work done on a session's behalf elsewhere (a child
session) adds to the ledger itself and to its parent's day where the parent records it.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Protocol

from netclaw.config import ModelConfig, Price, Settings
from netclaw.llm import Usage

MILLION = 1_000_000


def cost_of(usage: Usage, price: Price | None) -> float:
    """What one call cost. ``usage.input_tokens`` is the whole prompt, cached parts
    included (netclaw's providers report it so); the uncached rest is billed as input."""
    if price is None:
        return 0.0
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    fresh = max(usage.input_tokens - read - write, 0)
    cache_read = price.input if price.cache_read is None else price.cache_read
    cache_write = price.input if price.cache_write is None else price.cache_write
    total = fresh * price.input + read * cache_read + write * cache_write + usage.output_tokens * price.output
    return total / MILLION


def speech_cost(seconds: float | None, price_per_minute: float | None) -> float:
    """What transcribing ``seconds`` of audio cost (0 when either is unknown)."""
    if not seconds or price_per_minute is None:
        return 0.0
    return seconds / 60.0 * price_per_minute


def spoken_cost(chars: int, price_per_million_chars: float | None) -> float:
    """What speaking ``chars`` characters cost (0 without a price)."""
    return chars * price_per_million_chars / MILLION if price_per_million_chars is not None else 0.0


def billed_tokens(usage: Usage) -> int:
    """Tokens a spend guard counts: the whole prompt and the answer."""
    return usage.input_tokens + usage.output_tokens


@dataclass(frozen=True, slots=True)
class Spent:
    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.tokens + other.tokens, self.cost + other.cost)


class DailySpend(Protocol):
    """The daemon's spend of a UTC day, as a session reads it (never blocks)."""

    def on(self, day: str) -> Spent: ...


class SpendLedger:
    """The daemon's running total for the current UTC day (see the module docstring)."""

    __slots__ = ("_lock", "_today")

    def __init__(self) -> None:
        self._today: tuple[str, Spent] = ("", Spent())
        self._lock = threading.Lock()  # writers only: two sessions adding at once

    def on(self, day: str) -> Spent:
        known, spent = self._today  # one reference read: a consistent pair, no lock
        return spent if known == day else Spent()

    def add(self, day: str, spent: Spent) -> None:
        with self._lock:
            known, total = self._today
            self._today = (day, total + spent if known == day else spent)

    def seed(self, day: str, spent: Spent) -> None:
        """At start-up: what the journal says was spent today before this process."""
        with self._lock:
            self._today = (day, spent)


class NoLedger:
    """No daemon-wide total (tests driving one session)."""

    def on(self, day: str) -> Spent:
        return Spent()


def utc_day(ts: float) -> str:
    """The UTC date of a unix time, as the spend guards count days."""
    day = int(ts // 86400)  # UTC has no leap seconds in unix time: a day is 86,400 s
    named = _DAY_NAMES.get(day)
    if named is None:
        named = dt.datetime.fromtimestamp(ts, dt.UTC).date().isoformat()
        if len(_DAY_NAMES) > 64:
            _DAY_NAMES.clear()
        _DAY_NAMES[day] = named
    return named


# Every turn asks for today's name: kept per day number (a few days at most are asked).
_DAY_NAMES: dict[int, str] = {}


def next_midnight(ts: float) -> float:
    """When the UTC day of ``ts`` ends (the guards reset)."""
    day = dt.datetime.fromtimestamp(ts, dt.UTC).date() + dt.timedelta(days=1)
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


@dataclass(frozen=True, slots=True)
class SpendStop:
    """A guard that stops the turn: which one, and a sentence for people."""

    cap: str  # the config key: session.max_tokens_per_day, spend.max_cost_per_day, ...
    message: str
    resets_at: float | None  # unix time; None: it does not reset (a sub-agent's budget)


def spend_stop(settings: Settings, session: Spent, daemon: Spent, now: float) -> SpendStop | None:
    """The first guard ``session`` (this session's day) or ``daemon`` (everyone's) has
    reached, or None: the model may be called."""
    currency = settings.spend.currency
    checks: tuple[tuple[str, str, float | int | None, float | int], ...] = (
        (
            "session.max_tokens_per_day",
            "This conversation",
            settings.session.max_tokens_per_day,
            session.tokens,
        ),
        ("session.max_cost_per_day", "This conversation", settings.session.max_cost_per_day, session.cost),
        ("spend.max_tokens_per_day", "netclaw", settings.spend.max_tokens_per_day, daemon.tokens),
        ("spend.max_cost_per_day", "netclaw", settings.spend.max_cost_per_day, daemon.cost),
    )
    for cap, who, limit, used in checks:
        if limit is None or used < limit:
            continue
        resets = next_midnight(now)
        at = dt.datetime.fromtimestamp(resets, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        if isinstance(limit, int):
            amount = f"{int(used):,} of {cap} = {limit:,} tokens"
        else:
            amount = f"{used:.4f} of {cap} = {limit:g} {currency}"
        scope = "" if cap.startswith("session.") else " across all conversations"
        message = (
            f"{who} has used its budget for today{scope} ({amount}), so I did not send this "
            f"to the model. It resets at {at}; an operator can raise {cap}."
        )
        return SpendStop(cap, message, resets)
    return None


def price_of(model: ModelConfig | None) -> Price | None:
    return model.price if model is not None else None
