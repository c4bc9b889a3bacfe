"""Warm restart: after a graceful stop the sessions that were active recover before the
daemon says it is ready, and their first model call is told — once, never journaled —
that a restart interrupted them. After a crash there is no manifest: only sessions with
unanswered input resume, and nobody is told anything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Daemons, Setup, journal_rows, wait_until
from tests.fakes._scripted_server import said
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow

NOTICE = "resuming after netclaw was restarted"


@pytest.fixture
def provider() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        yield server


def resident(daemon: Any) -> set[str]:
    return {s["id"] for s in daemon.http.get("/api/sessions").json() if s["resident"]}


def notices(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if NOTICE in str(m["content"]))


def test_graceful_restart_warms_active_sessions_and_tells_them_once(
    tmp_path: Path, daemons: Daemons, provider: ScriptedOpenAIThread
) -> None:
    # Idle sessions passivate after 1 s: "cli:cold" sleeps before the stop, "cli:warm" is
    # kept busy until it.
    site = Setup(tmp_path, provider.base_url, session={"idle_timeout_s": 1.0, "passivation_grace_s": 0.0})
    first = daemons.start(site.config, site.data_dir, site.port)
    assert first.post("cli:cold", "hello cold", wait=True).status_code == 200
    wait_until(lambda: "cli:cold" not in resident(first), 10, "cli:cold to passivate")
    assert first.post("cli:warm", "hello warm", wait=True).status_code == 200
    code, _ = first.sigterm(15)
    assert code == 0, first.stderr()

    second = daemons.start(site.config, site.data_dir, site.port)
    # Ready means recovered: the active session is resident, the idle one cold.
    assert resident(second) == {"cli:warm"}
    context = second.session("cli:warm", view="context")["messages"]
    assert NOTICE in context[-1]["content"]  # visible while it applies: the next turn's tail
    assert second.post("cli:warm", "are you back?", wait=True).status_code == 200
    request = provider.requests[-1]["messages"]
    assert notices(provider.requests[-1]) == 1
    # In the new turn's tail, right after the message: recorded with it, so every later
    # request repeats it in place; what people said is not touched.
    assert said(request[-1]["content"]) == "are you back?" and NOTICE in request[-1]["content"]
    assert NOTICE not in json.dumps(second.session("cli:warm")["messages"])
    assert NOTICE not in json.dumps(journal_rows(site.db_path, "cli:warm", "InputAdmitted"))
    (tail,) = journal_rows(site.db_path, "cli:warm", "ContextAttached")[-1:]
    assert NOTICE in tail["message"]["content"]
    assert second.post("cli:warm", "and again", wait=True).status_code == 200
    again = provider.requests[-1]["messages"]
    assert notices(provider.requests[-1]) == 1  # told once: the same note, where it was
    assert again[: len(request)] == request and NOTICE not in json.dumps(again[len(request) :])
    # The cold session wakes lazily and is told nothing.
    assert second.post("cli:cold", "hello again", wait=True).status_code == 200
    assert notices(provider.requests[-1]) == 0


def test_after_a_crash_nothing_is_warmed_and_nobody_is_told(
    tmp_path: Path, daemons: Daemons, provider: ScriptedOpenAIThread
) -> None:
    site = Setup(tmp_path, provider.base_url)
    first = daemons.start(site.config, site.data_dir, site.port)
    assert first.post("cli:crashed", "hello", wait=True).status_code == 200
    first.sigkill()

    second = daemons.start(site.config, site.data_dir, site.port)
    assert resident(second) == set()
    assert second.post("cli:crashed", "still there?", wait=True).status_code == 200
    assert notices(provider.requests[-1]) == 0
