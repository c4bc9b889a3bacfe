"""Conformance: conversations and sessions — an event delivered twice is answered once; a
conversation is one session and a reply in it continues that session; chat commands."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conformance.model import marker
from tests.conformance.rig import InProcess, wait_for
from tests.fakes.scripted_openai import Reply


def test_an_event_delivered_twice_is_answered_once(rig: InProcess) -> None:
    driver = rig.driver
    before = Counter(driver.everywhere())
    first = marker()
    said = driver.say(f"only once {first}")
    driver.redeliver(said)  # at once, as after a slow acknowledgement
    conversation = driver.conversation_of(said)
    rig.replied(conversation, f"echo: only once {first}")
    driver.redeliver(said)  # and again once it was answered
    # The session takes its input in order: once a later message is answered, a turn the
    # repeats would have started has run.
    then = marker()
    driver.say(f"and then {then}", conversation, mention=False)
    rig.replied(conversation, f"echo: and then {then}")

    assert driver.bot_messages(conversation).count(f"echo: only once {first}") == 1
    # ... and nothing else showed up anywhere (a note about the repeat, a second thread).
    assert Counter(driver.everywhere()) - before == Counter(
        [f"echo: only once {first}", f"echo: and then {then}"]
    )
    assert len(rig.model.requests(first)) == 1
    assert rig.user_texts(driver.session_of(conversation)) == [f"only once {first}", f"and then {then}"]


def test_each_conversation_is_one_session_and_a_reply_continues_it(rig: InProcess) -> None:
    driver = rig.driver
    one, two = marker(), marker()
    a = rig.start_conversation(f"first {one}")
    b = rig.start_conversation(f"second {two}", person="bob")
    assert a != b
    session_a, session_b = driver.session_of(a), driver.session_of(b)
    assert session_a != session_b

    again = marker()
    driver.say(f"a reply {again}", a, mention=False)
    rig.replied(a, f"echo: a reply {again}")
    assert rig.user_texts(session_a) == [f"first {one}", f"a reply {again}"]
    assert rig.user_texts(session_b) == [f"second {two}"]
    assert driver.bot_messages(b) == [f"echo: second {two}"]  # nothing of a's in b
    listed = {s["id"] for s in rig.control.get("/api/sessions").json()}
    assert {session_a, session_b} <= listed


def test_stop_ends_the_turn_and_status_answers_in_the_conversation(rig: InProcess) -> None:
    driver = rig.driver
    if not driver.chat_commands:
        pytest.skip(f"{driver.name} has no chat commands (its messages all go to the model)")
    conversation = rig.start_conversation(f"hello {marker()}")
    slow = marker()
    rig.model.script(slow, Reply(text="never shown", delay_s=60))
    driver.say(f"think it over {slow}", conversation, mention=False)
    assert rig.model.wait_request(slow), "the slow turn never reached the model"

    driver.say("/stop", conversation, mention=False)
    wait_for(
        lambda: any(t.startswith("Stopped turn") for t in driver.bot_messages(conversation)),
        "the /stop notice",
    )
    driver.say("/status", conversation, mention=False)
    wait_for(
        lambda: any(t.startswith("Model scripted") for t in driver.bot_messages(conversation)),
        "the /status notice",
    )
    after = marker()
    driver.say(f"still there {after}", conversation, mention=False)
    rig.replied(conversation, f"echo: still there {after}")
    assert "never shown" not in driver.bot_messages(conversation)
    users = rig.user_texts(driver.session_of(conversation))
    assert "/stop" not in users and "/status" not in users  # commands are not model input
