"""The control room's pure parts: login cookies and CSRF tokens, the login backoff, paging
and filtering of the session listing, the transcript as people read it, the usage charts
(with and without money), and what is hidden of the config."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netclaw.config import Settings
from netclaw.messages import ChatMessage, MessageKind, ToolCall
from netclaw.security.redact import HIDDEN, Scrubber, secret_names
from netclaw.ui._auth import FORGET_AFTER_S, MAX_WAIT_S, Logins, LoginThrottle
from netclaw.ui._charts import usage_view
from netclaw.ui._redact import config_text, redact
from netclaw.ui._views import PER_PAGE, Boundary, page_window, transcript_entries


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- logins ---------------------------------------------------------------------------------------


def test_a_cookie_proves_its_login_until_it_expires_or_is_revoked() -> None:
    clock = Clock()
    logins = Logins("the-control-token", 3600, clock)
    cookie, login = logins.issue()
    assert "the-control-token" not in cookie
    assert logins.check(cookie) == login
    assert logins.csrf_matches(login, logins.csrf(login))
    other_cookie, other = logins.issue()
    assert not logins.csrf_matches(other, logins.csrf(login))  # a token belongs to its login
    clock.now += 3601
    assert logins.check(cookie) is None
    clock.now -= 3601
    logins.revoke(login)
    assert logins.check(cookie) is None and logins.check(other_cookie) == other


def test_a_cookie_of_another_token_or_altered_is_refused() -> None:
    cookie, _ = Logins("token-a", 3600).issue()
    assert Logins("token-b", 3600).check(cookie) is None
    logins = Logins("token-a", 3600)
    version, expires, nonce, mac = cookie.split(".")
    assert logins.check(f"{version}.{int(expires) + 9999}.{nonce}.{mac}") is None
    assert logins.check(f"{version}.{expires}.other.{mac}") is None
    for junk in ("", "v1", "v1.x.y.z", "v2." + cookie[3:], "a" * 500):
        assert logins.check(junk) is None
    assert logins.check(cookie) is not None  # the same token: a restart keeps the login
    assert logins.token_matches(" token-a\n") and not logins.token_matches("token-")


def test_failed_logins_wait_twice_as_long_each_time_per_address() -> None:
    clock = Clock(1000.0)
    throttle = LoginThrottle(clock)
    assert throttle.wait_s("10.0.0.1") == 0
    waits = [throttle.failed("10.0.0.1") for _ in range(12)]
    assert waits[:5] == [1, 2, 4, 8, 16] and waits[-1] == MAX_WAIT_S
    assert throttle.wait_s("10.0.0.1") == MAX_WAIT_S
    assert throttle.wait_s("10.0.0.2") == 0  # another address is not slowed
    clock.now += MAX_WAIT_S
    assert throttle.wait_s("10.0.0.1") == 0
    clock.now += FORGET_AFTER_S + 1  # quiet long enough: forgotten
    assert throttle.failed("10.0.0.1") == 1
    throttle.succeeded("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 0


# -- the listing ----------------------------------------------------------------------------------


@given(st.integers(0, 20_000), st.integers(-5, 500))
def test_a_page_number_is_clamped_to_the_pages_there_are(total: int, asked: int) -> None:
    page, pages, offset = page_window(total, asked)
    assert 1 <= page <= pages and pages == max(1, -(-total // PER_PAGE))
    assert offset == (page - 1) * PER_PAGE and (offset < total or total == 0)
    if 1 <= asked <= pages:
        assert page == asked


# -- the transcript -------------------------------------------------------------------------------


def message(i: int, role: str, content: str, **kw: object) -> ChatMessage:
    return ChatMessage(f"m{i}", role, content, float(i), **kw)  # type: ignore[arg-type]


def test_the_transcript_pairs_tool_calls_with_results_and_marks_failures_and_the_boundary() -> None:
    call = ToolCall("c1", "deploy", '{"what": "api"}')
    messages = [
        message(1, "user", "first", user_name="Ana"),
        message(2, "assistant", "hi"),
        message(3, "user", "deploy"),
        message(4, "assistant", "", tool_calls=(call,)),
        message(5, "tool", "deployed api", tool_call_id="c1", name="deploy"),
        message(6, "assistant", "done"),
        message(7, "user", "again"),
        message(8, "system", "summary", kind=MessageKind.COMPACTION_SUMMARY),
    ]
    entries = transcript_entries(
        messages,
        failures={"m7": "Turn 3 failed: boom"},
        boundary=Boundary(2, compactions=1, summarized=True),
        queued=[message(9, "user", "later")],
    )
    kinds = [e.kind for e in entries]
    assert kinds == [
        "user",
        "assistant",
        "marker",
        "user",
        "assistant",
        "assistant",
        "user",
        "failure",
        "queued",
    ]
    assert entries[0].who == "Ana"
    assert "summarised by compaction" in entries[2].text
    tool = entries[4].tools[0]
    assert (tool.name, tool.result, json.loads(tool.arguments)) == ("deploy", "deployed api", {"what": "api"})
    assert entries[7].text == "Turn 3 failed: boom"


# -- usage ----------------------------------------------------------------------------------------

TODAY = dt.date(2026, 11, 20)


def row(key: str, inp: int, out: int, cached: int = 0, **extra: object) -> dict[str, object]:
    return {
        "key": key,
        "turns": 1,
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_tokens": cached,
        **extra,
    }


def test_usage_charts_stack_uncached_input_cache_reads_and_output_by_day() -> None:
    view = usage_view(
        [row("2026-11-18", 1000, 100, 400), row("2026-11-20", 3000, 300, 3000)],
        [row("gpt", 4000, 400, 3400)],
        [row("cli:a", 3000, 300), row("cli:b", 1000, 100)],
        today=TODAY,
        days=7,
    )
    by_day = next(c for c in view.charts if c.id == "tokens-by-day")
    assert [b.label for b in by_day.bars][-3:] == ["2026-11-18", "2026-11-19", "2026-11-20"]
    assert by_day.bars[-3].values == (600.0, 400.0, 100.0)
    assert by_day.bars[-2].values == (0.0, 0.0, 0.0)
    cache = next(c for c in view.charts if c.id == "cache-by-day")
    assert cache.bars[-1].values == (100.0,) and cache.bars[-3].values == (40.0,)
    assert round(view.cache_share) == 85
    assert not view.cost_recorded and all(not c.id.startswith("cost") for c in view.charts)
    unpriced = usage_view([row("2026-11-20", 10, 1, cost=0.0)], [], [], today=TODAY, days=7, priced=False)
    assert not unpriced.cost_recorded and unpriced.total_cost is None  # zeros are not money spent
    svg = by_day.svg()
    assert svg.startswith("<svg") and "2026-11-18 · cache reads: 400 tokens" in svg
    sessions_chart = next(c for c in view.charts if c.id == "tokens-by-session")
    assert [b.label for b in sessions_chart.bars] == ["cli:a", "cli:b"]


def test_a_cost_field_adds_the_money_charts() -> None:
    view = usage_view(
        [row("2026-11-20", 1000, 100, cost=0.25)],
        [row("claude", 1000, 100, cost=0.25)],
        [row("cli:a", 1000, 100, cost=0.25)],
        today=TODAY,
        days=7,
    )
    assert view.cost_recorded and view.total_cost == 0.25
    assert {c.id for c in view.charts} >= {"cost-by-day", "cost-by-model", "cost-by-session"}


def test_chart_labels_are_escaped() -> None:
    view = usage_view([], [row("<script>x</script>", 10, 1)], [], today=TODAY, days=7)
    svg = next(c for c in view.charts if c.id == "tokens-by-model").svg()
    assert "<script>" not in svg and "&lt;script&gt;" in svg


# -- secrets --------------------------------------------------------------------------------------


def test_the_config_view_hides_secret_looking_values_and_url_passwords() -> None:
    tree = {
        "api_key": "abc",
        "api_key_env": "OPENAI_KEY",
        "nested": {"password": "p", "bot_token": "t", "url": "postgresql://me:pw@db/x", "max_tokens": 5},
        "list": [{"secret": "s"}],
    }
    shown = redact(tree)
    assert shown["api_key"] == HIDDEN and shown["api_key_env"] == "OPENAI_KEY"
    assert shown["nested"]["password"] == HIDDEN and shown["nested"]["bot_token"] == HIDDEN
    assert shown["nested"]["url"] == f"postgresql://me:{HIDDEN}@db/x"
    assert shown["nested"]["max_tokens"] == 5  # a number of tokens is no secret
    assert shown["list"][0]["secret"] == HIDDEN


def test_the_scrubber_knows_every_secret_the_config_names(tmp_path: Path) -> None:
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("SCRUB_PROVIDER_KEY", "sk-one-two-three")
        secret_file = tmp_path / "hook"
        secret_file.write_text("hook-secret-value\n")
        mp.setenv("SCRUB_HOOK_FILE", str(secret_file))
        settings = Settings(
            providers={"p": {"type": "openai", "api_key_env": "SCRUB_PROVIDER_KEY"}},
            models={"main": {"provider": "p", "model": "m"}},
            webhooks={"routes": {"r": {"auth": {"type": "bearer", "secret_env": "SCRUB_HOOK"}}}},
            mcp={
                "servers": {
                    "s": {"url": "http://127.0.0.1:1/mcp", "headers_env": {"Authorization": "SCRUB_MCP"}}
                }
            },
        )
        names = set(secret_names(settings))
        assert {"SCRUB_PROVIDER_KEY", "SCRUB_HOOK", "SCRUB_MCP"} <= names
        scrub = Scrubber.of(settings, "control-token-xyz").scrub
        text = "a sk-one-two-three b hook-secret-value c control-token-xyz d abc"
        assert scrub(text) == f"a {HIDDEN} b {HIDDEN} c {HIDDEN} d abc"
        assert "sk-one" not in config_text(settings) and "SCRUB_PROVIDER_KEY" in config_text(settings)
    finally:
        mp.undo()
