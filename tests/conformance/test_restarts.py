"""Conformance, across a SIGKILL: the daemon runs as a subprocess (through the driver's
launcher), one per driver for this module, killed and started again on the same data.

- A turn cut short by SIGKILL is answered exactly once after the restart (the session
  resumes it; the outbox posts a reply recorded but never shown).
- An approval request pending at the kill is still decided with the platform's control
  afterwards, and its turn finishes once.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conformance.model import marker
from tests.conformance.rig import GATED_TOOL, Subprocess, wait_for
from tests.fakes.scripted_openai import Reply, ToolCallSpec

pytestmark = pytest.mark.slow

RESTART_TIMEOUT_S = 40.0  # a bound: a restart on a loaded 2-core machine is slow


def test_a_turn_cut_short_by_sigkill_is_answered_once_after_the_restart(restartable: Subprocess) -> None:
    rig, driver = restartable, restartable.driver
    conversation = rig.start_conversation(f"hello {marker()}")
    before = Counter(driver.everywhere())
    mark = marker()
    rig.model.script(mark, Reply(hang=True))  # the first try never answers: the kill comes mid-turn
    driver.say(f"think it over {mark}", conversation, mention=False)
    assert rig.model.wait_request(mark), "the turn never reached the model"
    rig.sigkill()

    rig.start()
    rig.replied(conversation, f"echo: think it over {mark}", RESTART_TIMEOUT_S)
    then = marker()
    driver.say(f"and then {then}", conversation, mention=False)
    rig.replied(conversation, f"echo: and then {then}")

    assert len(rig.model.requests(mark)) == 2  # cut short once, resumed once
    assert Counter(driver.everywhere()) - before == Counter(
        [f"echo: think it over {mark}", f"echo: and then {then}"]
    )
    users = rig.user_texts(driver.session_of(conversation))
    assert users[-2:] == [f"think it over {mark}", f"and then {then}"], users


def test_an_approval_pending_at_a_sigkill_is_decided_with_the_control_after_the_restart(
    restartable: Subprocess,
) -> None:
    rig, driver = restartable, restartable.driver
    mark = marker()
    rig.model.script(mark, Reply(tool_calls=[ToolCallSpec(GATED_TOOL, {})]), Reply(text=f"it is late {mark}"))
    said = driver.say(f"what time is it {mark}", person="carol")
    conversation = driver.conversation_of(said)
    session = driver.session_of(conversation)
    (asked,) = wait_for(lambda: driver.prompts(conversation), "the approval request")
    rig.sigkill()

    rig.start()
    # The request is still pending, and the control people have in front of them decides it.
    assert [a["id"] for a in rig.control.get(f"/api/sessions/{session}/approvals").json()] == [
        asked.approval_id
    ]
    driver.press(asked, "approve", person="carol")
    rig.replied(conversation, f"it is late {mark}", RESTART_TIMEOUT_S)
    wait_for(
        lambda: driver.prompts(conversation) == [],
        f"no control left to press (in the conversation: {driver.bot_messages(conversation)})",
    )
    results = [m for m in rig.transcript(session) if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"]  # the tool ran once
    assert driver.bot_messages(conversation).count(f"it is late {mark}") == 1
