"""Sub-agents survive SIGKILL and report back exactly once: a parent spawns three children
that run tool rounds; the daemon is killed at random moments and started again; every
child's answer is admitted to its parent once and the parent answers each once.

CI runs a few (``NETCLAW_SUBAGENT_CRASH_RUNS``, default 6); the acceptance run is
``NETCLAW_SUBAGENT_CRASH_RUNS=30 pytest tests/e2e/test_subagent_crash.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import Daemons
from tests.e2e.subagent_chaos import SubagentCrash
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("NETCLAW_SUBAGENT_CRASH_RUNS", "6"))


@pytest.mark.timeout(60 + 25 * RUNS)  # a run is a few seconds; a loaded machine gets room
def test_children_report_exactly_once_across_sigkills(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    crash = SubagentCrash(tmp_path / "site", scripted, daemons)
    result = crash.run(RUNS)
    print(result.summary())
    assert result.problems == [], "\n".join(result.problems)
    assert result.runs == RUNS and result.kills >= RUNS
