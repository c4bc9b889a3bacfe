"""Spend, driven through the pure session: every call's tokens (cache reads and writes
included) and cost at the model's price are recorded with the turn and charged to the
daemon's day; the guards in tokens and money, per session and for the whole daemon, stop a
turn before its next call and say which cap stopped it and when it resets."""

from __future__ import annotations

from typing import Any

import pytest

from netclaw import outputs as out
from netclaw.config import Price
from netclaw.llm import Completion, Usage
from netclaw.sessions._core.effects import CallModel, Charge
from netclaw.sessions._core.journal.events import ContextAttached, TurnRecorded
from netclaw.sessions._core.results import ProviderDone
from netclaw.spend import SpendLedger, Spent, cost_of, next_midnight, utc_day
from tests.unit.sessions.harness import Driver

PRICED = {
    "main": {
        "provider": "local",
        "model": "scripted",
        "price": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75},
    }
}


def _answer(d: Driver, usage: Usage, text: str = "ok") -> list[Any]:
    d.recalled(None)
    call = d.pending(CallModel)
    return d.handle(ProviderDone(call.op_id, Completion(text, usage=usage)))


def test_cost_of_bills_cached_reads_and_writes_at_their_prices() -> None:
    price = Price(input=3, output=15, cache_read=0.3, cache_write=3.75)
    usage = Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=8_000, cache_write_tokens=1_000)
    # 1,000 fresh at 3, 8,000 read at 0.3, 1,000 written at 3.75, 1,000 out at 15 (per million).
    assert cost_of(usage, price) == pytest.approx((3_000 + 2_400 + 3_750 + 15_000) / 1_000_000)
    assert cost_of(usage, None) == 0.0
    plain = Price(input=2, output=4)  # reads and writes cost as input when not priced apart
    assert cost_of(usage, plain) == pytest.approx((10_000 * 2 + 1_000 * 4) / 1_000_000)


def test_a_turn_records_its_tokens_and_cost_and_charges_the_daemons_day() -> None:
    ledger = SpendLedger()
    d = Driver(models=PRICED, ledger=ledger)
    d.send("hi")
    usage = Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=8_000, cache_write_tokens=1_000)
    effects = _answer(d, usage)
    (charge,) = [e for e in effects if isinstance(e, Charge)]
    expected = cost_of(usage, Price(input=3, output=15, cache_read=0.3, cache_write=3.75))
    assert charge == Charge(utc_day(d.now), "scripted", 11_000, pytest.approx(expected))
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.spent == {
        "input_tokens": 10_000,
        "output_tokens": 1_000,
        "cache_read_tokens": 8_000,
        "cache_write_tokens": 1_000,
    }
    assert recorded.cost == pytest.approx(expected)
    assert d.state.cost_spent_on(utc_day(d.now)) == pytest.approx(expected)
    (shown,) = [o for o in d.outputs(effects) if isinstance(o, out.Usage)]
    assert (shown.cache_read_tokens, shown.cache_write_tokens) == (8_000, 1_000)
    assert shown.cost == pytest.approx(expected) and shown.model == "scripted"
    d.close()


@pytest.mark.parametrize(
    ("sections", "cap"),
    [
        ({"session": {"max_cost_per_day": 0.01}}, "session.max_cost_per_day"),
        ({"session": {"max_tokens_per_day": 5_000}}, "session.max_tokens_per_day"),
    ],
)
def test_a_session_cap_stops_the_next_turn_naming_the_cap_and_its_reset(
    sections: dict[str, Any], cap: str
) -> None:
    d = Driver(models=PRICED, **sections)
    d.send("one")
    _answer(d, Usage(input_tokens=6_000, output_tokens=1_000))  # 6,000 in at 3 + 1,000 out at 15: 0.033
    calls = len([e for e in d.effects if isinstance(e, CallModel)])
    _, effects = d.send("two")
    assert len([e for e in d.effects if isinstance(e, CallModel)]) == calls
    assert not [e for e in d.events(effects) if isinstance(e, ContextAttached)]  # no tail for no call
    (notice,) = [o for o in d.outputs(effects) if isinstance(o, out.Notice)]
    assert notice.kind == "spend_limit" and cap in notice.text and "UTC" in notice.text
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.error is not None
    assert (recorded.error["code"], recorded.error["cap"]) == ("spend_limit", cap)
    assert recorded.error["resets_at"].startswith(utc_day(next_midnight(d.now)))
    d.close()


@pytest.mark.parametrize(
    ("spend", "cap"),
    [
        ({"max_cost_per_day": 1.0}, "spend.max_cost_per_day"),
        ({"max_tokens_per_day": 1_000}, "spend.max_tokens_per_day"),
    ],
)
def test_the_daemons_cap_counts_every_sessions_spend(spend: dict[str, Any], cap: str) -> None:
    ledger = SpendLedger()
    d = Driver(models=PRICED, ledger=ledger, spend=spend)
    ledger.add(utc_day(d.now), Spent(2_000, 1.5))  # other sessions spent this today
    _, effects = d.send("hello")
    assert not [e for e in d.effects if isinstance(e, CallModel)]
    (notice,) = [o for o in d.outputs(effects) if isinstance(o, out.Notice)]
    assert cap in notice.text and "across all conversations" in notice.text
    # Tomorrow the day starts afresh.
    d.now = next_midnight(d.now) + 1
    d.send("tomorrow")
    assert [e for e in d.effects if isinstance(e, CallModel)]
    d.close()


def test_a_long_turn_is_stopped_between_its_calls() -> None:
    d = Driver(models=PRICED, session={"max_cost_per_day": 0.01})
    d.send("use the clock")
    from tests.unit.sessions.harness import tool_call

    d.recalled(None)
    call = d.pending(CallModel)
    d.handle(
        ProviderDone(
            call.op_id,
            Completion(
                "", (tool_call("current_time", "c1"),), usage=Usage(input_tokens=5_000, output_tokens=10)
            ),
        )
    )
    effects = d.tools_done("12:00")  # 0.015 spent: no second call
    assert len([e for e in d.effects if isinstance(e, CallModel)]) == 1
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "failed" and recorded.cost == pytest.approx(0.01515)
    d.close()
