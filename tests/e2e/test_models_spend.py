"""Models and money end to end, the daemon a subprocess SIGKILLed in the middle:

- a turn whose main model stays overloaded goes on with its fallback, and one killed while
  on the fallback resumes there after the restart (the switch is journaled);
- a model chosen for a session (CLI, chat command, API) survives a SIGKILL;
- the money guards (a session's and the whole daemon's) answer 429 with Retry-After, and
  still do after a SIGKILL (rebuilt from the journal); ``netclaw usage`` shows the money
  and the cached tokens the provider reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Daemons, Setup, journal_rows, run_cli, wait_until
from tests.fakes._scripted_server import ScriptedServerThread
from tests.fakes.scripted_anthropic import Reply as AReply
from tests.fakes.scripted_anthropic import ScriptedAnthropic, overloaded
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread

pytestmark = pytest.mark.slow

PRICE = {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}


@pytest.fixture
def claude() -> Iterator[ScriptedServerThread[AReply, Any]]:
    with ScriptedServerThread(ScriptedAnthropic(), "scripted-anthropic") as thread:
        yield thread


def site(tmp_path: Path, scripted: ScriptedOpenAIThread, **sections: Any) -> Setup:
    return Setup(tmp_path / "site", scripted.base_url, **sections)


def cli(setup: Setup, *args: str) -> str:
    done = run_cli(*args, "--config", str(setup.config))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_overloaded_model_hands_the_turn_to_its_fallback_across_a_sigkill(
    tmp_path: Path, scripted: ScriptedOpenAIThread, claude: Any, daemons: Daemons
) -> None:
    claude.set_responder(lambda body: overloaded())
    setup = site(
        tmp_path,
        scripted,
        providers={
            "claude": {"type": "anthropic", "base_url": claude.base_url, "max_retries": 1, "timeout_s": 30}
        },
        models={
            "main": {"provider": "claude", "model": "claude-scripted", "fallbacks": ["spare"]},
            "spare": {
                "provider": "local",
                "model": "scripted",
                "context_window": 16384,
                "max_output_tokens": 1024,
            },
        },
    )
    scripted.enqueue(Reply(hang=True))  # the fallback's first answer never comes: killed meanwhile
    daemon = daemons.start(setup.config, setup.data_dir, setup.port)
    message_id = daemon.acked("cli:fallback", "hello")
    wait_until(lambda: scripted.requests, 30, "the call on the fallback")
    tried = len(claude.requests)
    assert tried == 2  # the main model and its one retry
    (switched,) = journal_rows(setup.db_path, "cli:fallback", "ModelSwitched")
    assert (switched["from_model"], switched["to_model"], switched["reason"]) == (
        "main",
        "spare",
        "provider_unavailable",
    )
    daemon.sigkill()

    again = daemons.start(setup.config, setup.data_dir, setup.port)
    done = wait_until(
        lambda: [m for m in again.session("cli:fallback")["messages"] if m["role"] == "assistant"],
        30,
        "the resumed turn's answer",
    )
    assert done[-1]["content"] == "echo: hello"
    assert len(claude.requests) == tried  # resumed on the fallback, not on the overloaded main
    (recorded,) = journal_rows(setup.db_path, "cli:fallback", "TurnRecorded")
    assert recorded["message_id"] == message_id and recorded["model"] == "scripted"
    by_model = cli(setup, "usage", "--by", "model")
    assert "scripted" in by_model


def test_a_chosen_model_survives_a_sigkill(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    setup = site(tmp_path, scripted, models={"big": {"provider": "local", "model": "big-model"}})
    daemon = daemons.start(setup.config, setup.data_dir, setup.port)
    assert daemon.post("cli:pin", "hello", wait=True).status_code == 200
    listing = daemon.post("cli:pin", "/model").json()["notice"]
    assert "Model: main (scripted), the default" in listing and "big (big-model)" in listing
    shown = cli(setup, "sessions", "model", "cli:pin", "big")
    assert "model big (big-model), chosen" in shown
    assert daemon.post("cli:pin", "on the big one", wait=True).status_code == 200
    assert scripted.requests[-1]["model"] == "big-model"
    daemon.sigkill()

    again = daemons.start(setup.config, setup.data_dir, setup.port)
    assert again.post("cli:pin", "after the kill", wait=True).status_code == 200
    assert scripted.requests[-1]["model"] == "big-model"
    assert "big (big-model), chosen" in cli(setup, "sessions", "model", "cli:pin")
    back = again.post("cli:pin", "/model default").json()
    assert "main (scripted)" in back["notice"]
    assert again.http is not None
    api = again.http.put("/api/sessions/cli:pin/model", json={"model": "nope"})
    assert api.status_code == 400 and api.json()["error"]["code"] == "invalid_model"
    assert again.post("cli:pin", "back on main", wait=True).status_code == 200
    assert scripted.requests[-1]["model"] == "scripted"


def test_money_guards_answer_429_and_hold_across_a_sigkill(
    tmp_path: Path, scripted: ScriptedOpenAIThread, claude: Any, daemons: Daemons
) -> None:
    setup = site(
        tmp_path,
        scripted,
        providers={
            "claude": {"type": "anthropic", "base_url": claude.base_url, "max_retries": 1, "timeout_s": 30}
        },
        models={"main": {"provider": "claude", "model": "claude-scripted", "price": PRICE}},
        session={"max_cost_per_day": 0.05},
        spend={"max_cost_per_day": 0.08},
    )
    # Each answer reports 10,000 prompt tokens and 1,000 out: 0.03 + 0.015 = 0.045 a turn.
    claude.set_responder(lambda body: AReply(text="priced", usage=(10_000, 1_000)))
    daemon = daemons.start(setup.config, setup.data_dir, setup.port)
    assert daemon.post("cli:a", "one", wait=True).status_code == 200
    assert daemon.post("cli:a", "two", wait=True).status_code == 200  # 0.045 < 0.05: still allowed
    refused = daemon.post("cli:a", "three", wait=True)
    assert refused.status_code == 429, refused.text
    assert refused.json()["cap"] == "session.max_cost_per_day" and int(refused.headers["Retry-After"]) > 0
    # Another session: the daemon has spent 0.09 today, over its 0.08.
    other = daemon.post("cli:b", "hi", wait=True)
    assert other.status_code == 429 and other.json()["cap"] == "spend.max_cost_per_day"
    assert "across all conversations" in other.json()["error"]["message"]
    calls = len(claude.requests)
    status = cli(setup, "status")  # /metrics counts since this process started
    assert "cost:" in status and "claude-scripted" in status
    daemon.sigkill()

    again = daemons.start(setup.config, setup.data_dir, setup.port)
    assert again.post("cli:a", "four", wait=True).json()["cap"] == "session.max_cost_per_day"
    assert again.post("cli:c", "new", wait=True).json()["cap"] == "spend.max_cost_per_day"
    assert len(claude.requests) == calls  # nothing was sent to the model
    usage = cli(setup, "usage", "--by", "model")
    assert "cost USD" in usage and "0.0900" in usage


def test_cached_tokens_reach_the_cli(
    tmp_path: Path, scripted: ScriptedOpenAIThread, claude: Any, daemons: Daemons
) -> None:
    setup = site(
        tmp_path,
        scripted,
        providers={
            "claude": {"type": "anthropic", "base_url": claude.base_url, "max_retries": 1, "timeout_s": 30}
        },
        models={"main": {"provider": "claude", "model": "claude-scripted", "price": PRICE}},
    )
    daemon = daemons.start(setup.config, setup.data_dir, setup.port)
    for text in ("one", "two", "three"):
        assert daemon.post("cli:cache", text, wait=True).status_code == 200
    assert claude.server.rejected == []
    (row,) = [r for r in json.loads(cli(setup, "usage", "--json")) if r["key"] == "cli:cache"]
    assert row["cache_read_tokens"] > 0 and row["cache_write_tokens"] > 0 and row["cost"] > 0
    table = cli(setup, "usage")
    assert "cache read" in table and "cache write" in table and "cost USD" in table
    assert "cache_read" in cli(setup, "status")  # /metrics' token counts by kind
