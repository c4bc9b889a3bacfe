"""Named models, fallbacks and prices in the config; the spend ledger and guards; the
``/model`` chat command."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import ValidationError

from netclaw.commands import ChatCommand, models_text, parse_command
from netclaw.config import Settings
from netclaw.spend import SpendLedger, Spent, next_midnight, spend_stop, utc_day

PROVIDERS = {"local": {"type": "openai"}, "claude": {"type": "anthropic"}}


def settings(models: dict[str, Any], **sections: Any) -> Settings:
    return Settings(providers=PROVIDERS, models=models, **sections)


def test_named_models_with_fallbacks_and_prices() -> None:
    s = settings(
        {
            "main": {"provider": "local", "fallbacks": ["big", "claude-4.5"]},
            "big": {"provider": "local", "model": "qwen3:32b", "context_window": 65536},
            "claude-4.5": {"provider": "claude", "model": "claude-x", "price": {"input": 3, "output": 15}},
        }
    )
    assert list(s.models.named()) == ["main", "big", "claude-4.5"]
    big = s.models.get("big")
    assert big is not None and big.context_window == 65536
    claude = s.models.get("claude-4.5")
    assert claude is not None and claude.price is not None and claude.price.cache_read is None
    assert s.trim_budget_of(big) == 65536 - 4096
    assert s.models.get("nope") is None


@pytest.mark.parametrize(
    ("models", "says"),
    [
        ({"main": {"fallbacks": ["ghost"]}}, "'ghost' is not a model here"),
        ({"main": {"fallbacks": ["main"]}}, "cannot be its own fallback"),
        ({"main": {}, "bad name!": {}}, "model name 'bad name!'"),
        (
            {"main": {}, "x": {"provider": "nowhere"}},
            "models.x.provider: 'nowhere' is not a configured provider",
        ),
        ({"main": {"price": {"input": -1, "output": 1}}}, "greater than or equal to 0"),
        ({"main": {}, "x": {"unknown": 1}}, "Extra inputs are not permitted"),
        ({"main": {}, "Default": {}}, "cannot be named 'default'"),
    ],
)
def test_bad_models_are_refused_naming_what_is_wrong(models: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        settings(models)


def test_a_configured_trim_budget_never_exceeds_a_models_room() -> None:
    s = settings(
        {"main": {}, "small": {"context_window": 8192, "max_output_tokens": 1024}},
        history={"trim_budget_tokens": 20000},
    )
    small = s.models.get("small")
    assert small is not None
    assert s.trim_budget_tokens == 20000 and s.trim_budget_of(small) == 8192 - 1024


def test_the_ledger_adds_from_many_threads_and_starts_each_day_afresh() -> None:
    ledger = SpendLedger()
    day = utc_day(1_700_000_000)

    def add() -> None:
        for _ in range(1000):
            ledger.add(day, Spent(1, 0.001))

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.on(day).tokens == 4000 and ledger.on(day).cost == pytest.approx(4.0)
    tomorrow = utc_day(next_midnight(1_700_000_000) + 1)
    assert ledger.on(tomorrow) == Spent()
    ledger.add(tomorrow, Spent(5, 0.5))
    assert ledger.on(tomorrow) == Spent(5, 0.5) and ledger.on(day) == Spent()


def test_spend_stop_checks_the_session_then_the_daemon_and_says_when_it_resets() -> None:
    s = settings(
        {"main": {}}, session={"max_cost_per_day": 1.0}, spend={"max_tokens_per_day": 100, "currency": "EUR"}
    )
    now = 1_700_000_000.0
    assert spend_stop(s, Spent(10, 0.5), Spent(50, 2.0), now) is None
    stop = spend_stop(s, Spent(10, 1.0), Spent(500, 9.0), now)
    assert stop is not None and stop.cap == "session.max_cost_per_day" and "EUR" in stop.message
    assert stop.resets_at == next_midnight(now) and "2023-11-15 00:00 UTC" in stop.message
    stop = spend_stop(s, Spent(10, 0.1), Spent(100, 0.0), now)
    assert stop is not None and stop.cap == "spend.max_tokens_per_day"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/model", ChatCommand("model")),
        ("!model big-1.5", ChatCommand("model", "big-1.5")),
        (" /MODEL default ", ChatCommand("model", "default")),
        ("/status", ChatCommand("status")),
        ("/stop now", None),  # only /model takes an argument
        ("/model two words", None),
        ("/model is great", None),
    ],
)
def test_chat_commands_parse(text: str, parsed: ChatCommand | None) -> None:
    assert parse_command(text) == parsed


def test_the_model_listing_names_each_model_and_how_to_choose() -> None:
    s = settings({"main": {"model": "qwen3:8b"}, "big": {"model": "qwen3:32b"}})
    text = models_text({name: m.model for name, m in s.models.named().items()}, "big", pinned=True)
    assert "Model: big (qwen3:32b), chosen for this conversation" in text
    assert "main (qwen3:8b), big (qwen3:32b)" in text and "/model default" in text
