"""A reminder's fire is exactly-once across a SIGKILL: killed just before the fire, around
it, or just after its admission, the restarted daemon ends with exactly one turn for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Daemons, Setup, journal_rows, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow


@pytest.fixture
def provider() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        yield server


@pytest.mark.parametrize("kill_after_s", [0.6, 1.0, 1.15, 1.6])
def test_a_fire_survives_a_sigkill_at_any_moment_exactly_once(
    tmp_path: Path, daemons: Daemons, provider: ScriptedOpenAIThread, kill_after_s: float
) -> None:
    site = Setup(tmp_path, provider.base_url)
    sid = "cli:killed-at-the-fire"
    first = daemons.start(site.config, site.data_dir, site.port)
    created = first.http.post(f"/api/sessions/{sid}/reminders", json={"text": "exactly once", "in_s": 1.0})
    assert created.status_code == 201, created.text
    time.sleep(kill_after_s)  # the moment of the kill: the test's parameter, not a wait
    first.sigkill()

    second = daemons.start(site.config, site.data_dir, site.port)

    def recorded() -> list[dict[str, object]]:
        return journal_rows(site.db_path, sid, "TurnRecorded")

    wait_until(recorded, 15, "the reminder's turn")
    # Once the one-shot is done in the store, no fire of it is left to come (a fire moves it
    # on only after its admission).
    wait_until(lambda: second.http.get("/api/reminders").json() == [], 15, "the one-shot to be done")
    admitted = [
        row["message"]
        for row in journal_rows(site.db_path, sid, "InputAdmitted")
        if str(row["message"].get("identity", "")).startswith("reminder:")  # type: ignore[union-attr]
    ]
    assert len(admitted) == 1, admitted
    assert len(recorded()) == 1
    assert second.http.get("/api/reminders").json() == []  # the one-shot is done
