"""Email through the running daemon (a subprocess) against real Dovecot and aiosmtpd,
SIGKILLed between taking a mail and flagging it: the mail is found unread after the
restart and answered once (its Message-ID admits it once; its turn resumes from the
journal). The kit's restart cases (tests/conformance/test_restarts.py) cover a turn cut
short and an approval pending at the kill; this is the window they cannot reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.drivers.email import BOT, EmailDriver
from tests.conformance.model import KitModel, marker
from tests.conformance.rig import Subprocess, wait_for
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread

pytestmark = pytest.mark.slow

RESTART_TIMEOUT_S = 40.0  # a bound: a restart on a loaded 2-core machine is slow


def test_a_mail_journaled_but_not_flagged_at_a_sigkill_is_answered_once(tmp_path: Path) -> None:
    driver, model = EmailDriver(), KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        rig = Subprocess(driver, model, tmp_path, provider.base_url)
        try:
            rig.start()
            dovecot = driver.dovecot
            assert dovecot is not None
            mark = marker()
            model.script(mark, Reply(hang=True))  # the kill comes mid-turn
            said = driver.say(f"think it over {mark}")
            message_id = str(said.ref[0])
            conversation = driver.conversation_of(said)
            assert model.wait_request(mark), "the turn never reached the model"
            # Flagged only now that its input is journaled (the turn is running).
            wait_for(lambda: "\\Seen" in dovecot.flags(BOT).get(message_id, set()), "the mail flagged seen")
            rig.sigkill()
            # The kill landed between the journal and the flag: the mail is unread again.
            assert dovecot.mark_unseen(BOT, message_id) == 1

            rig.start()
            rig.replied(conversation, f"echo: think it over {mark}", RESTART_TIMEOUT_S)
            then = marker()
            driver.say(f"and then {then}", conversation)
            rig.replied(conversation, f"echo: and then {then}")

            assert driver.bot_messages(conversation) == [
                f"echo: think it over {mark}",
                f"echo: and then {then}",
            ]
            assert (
                len(model.requests(mark)) == 2
            )  # cut short once, resumed once: the mail found again started nothing
            assert "\\Seen" in dovecot.flags(BOT).get(message_id, set())
            users = rig.user_texts(driver.session_of(conversation))
            assert users == [f"think it over {mark}", f"and then {then}"], users
        finally:
            rig.close()
            driver.stop()
