"""A CI-sized chaos run: four sessions sending concurrently with idempotency keys while the
daemon is SIGKILLed during a turn, a tool round and a compaction call, and started again.
Nothing acknowledged is lost, duplicated, reordered or answered twice
(``python bench/chaos.py --minutes 10`` is the long run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.chaos import Chaos, ChaosConfig
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow


def test_sigkills_under_concurrent_load_lose_and_repeat_nothing(
    tmp_path: Path, scripted: ScriptedOpenAIThread
) -> None:
    chaos = Chaos(tmp_path, scripted, ChaosConfig(sessions=4, messages=10, kills=3))
    try:
        result = chaos.run()
    finally:
        chaos.close()
    assert result.acked == 40
    assert result.problems == []
    assert (result.lost, result.duplicated, result.reordered, result.answered_twice, result.unanswered) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert sum(result.kills.values()) == 3
    assert result.tool_runs > 0 and result.audited_wrong == 0  # each tool run audited once
    # Each kill was followed by a start that became ready (within the e2e readiness bound);
    # how fast is a figure of ``bench/chaos.py`` (restart_max_s), not a timing test.
    assert len(result.restart_s) == 1 + 3  # the first start, then one after each kill
