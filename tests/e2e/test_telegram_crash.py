"""Telegram through the running daemon (a subprocess, ``telegram.api_url`` pointing at the
Bot API fake), SIGKILLed while a reply streams: after the restart the turn resumes and
its reply ends as one message — the one the killed process had started, finished by an
edit — never a second copy beside it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DaemonProcess, Daemons, Setup, subprocess_env, wait_until
from tests.fakes.scripted_openai import (
    Reply,
    ScriptedOpenAIThread,
    ToolCallSpec,
    _last_user_text,
    without_speaker,
)
from tests.fakes.telegram_api import ALICE, BOT_USERNAME, TOKEN, FakeTelegram, FakeTelegramThread, Sent

pytestmark = pytest.mark.slow

PRIVATE = ALICE["id"]
LONG = "a considered answer, " * 12 + "done."


class Streaming:
    """Echoes; the first time it is asked to think it streams slowly (the test kills the
    daemon meanwhile), afterwards at once."""

    def __init__(self) -> None:
        self.slow_calls = 0
        self.started = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        text = without_speaker(_last_user_text(body))
        if not text.startswith("think"):
            return Reply(text=f"echo: {text}")
        self.slow_calls += 1
        if self.slow_calls == 1:
            self.started.set()
            return Reply(text=LONG, chunk_size=10, chunk_delay_s=0.5)
        return Reply(text=LONG)


@pytest.fixture
def fake() -> Iterator[FakeTelegramThread]:
    """Requested before ``daemons``, so the daemons are killed before it stops."""
    with FakeTelegramThread() as server:
        yield server


def test_a_reply_streaming_when_the_daemon_is_killed_ends_as_one_message(
    fake: FakeTelegramThread, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    provider = Streaming()
    scripted.set_responder(provider)
    setup = Setup(
        tmp_path / "site",
        scripted.base_url,
        telegram={"enabled": True, "api_url": fake.api_url, "allow_dms": True, "poll_timeout_s": 5},
    )
    env = subprocess_env(TELEGRAM_BOT_TOKEN=TOKEN)

    def start() -> Any:
        return daemons.start(setup.config, setup.data_dir, setup.port, env=env)

    first = start()
    fake.say(PRIVATE, "hello")
    fake.wait_for(lambda s: s.bot_texts(PRIVATE) == ["echo: hello"], "the first reply")

    fake.say(PRIVATE, "think it over")
    assert provider.started.wait(15), "the slow turn never reached the provider"
    # Killed once part of the reply shows and was edited once (posted and recorded: the post
    # is recorded before it returns, and edits follow it), not yet finished. A kill between
    # Telegram's answer and the record is the case no nonce can cover (a second message).
    partial = fake.wait_for(
        lambda s: next((m for m in s.bot_messages(PRIVATE)[1:] if m.edits and m.text != LONG), None),
        "part of the reply streamed and edited",
    )
    first.sigkill()
    assert partial.text != LONG
    sends_before = len(fake.calls_of("sendMessage"))

    second = start()
    fake.wait_for(
        lambda s: s.bot_texts(PRIVATE) == ["echo: hello", LONG],
        f"the resumed reply, once (so far {fake.bot_texts(PRIVATE)})",
        timeout=30,
    )
    assert provider.slow_calls == 2  # the turn ran again after the restart
    # The message the killed process started was finished in place: no new post for it.
    finished = fake.read(lambda s: s.find(PRIVATE, partial.data["message_id"]))
    assert finished is not None and finished.text == LONG and not finished.deleted
    assert len(fake.calls_of("sendMessage")) == sends_before

    fake.say(PRIVATE, "still there?")
    # The whole reply, not its first edit: a slow machine shows "echo: st" first.
    fake.wait_for(
        lambda s: s.bot_texts(PRIVATE) == ["echo: hello", LONG, "echo: still there?"], "the next reply"
    )
    users = [m["content"] for m in second.session(f"telegram:{PRIVATE}")["messages"] if m["role"] == "user"]
    assert [without_speaker(u) for u in users] == ["hello", "think it over", "still there?"]
    wait_until(lambda: second.health()["adapters"]["telegram"]["state"] == "running", 5, "telegram running")


# -- an approval prompt whose answer never reached the daemon -------------------------------------

GROUP = -1001


def kill_before_the_prompt_is_recorded(
    fake: FakeTelegramThread, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> tuple[DaemonProcess, Sent]:
    """The daemon asks for an approval in a group; Telegram makes the prompt, and the
    daemon is SIGKILLed before the answer (the prompt's message id) reaches it. Returns
    the restarted daemon and the prompt people see."""
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    setup = Setup(
        tmp_path / "site",
        scripted.base_url,
        telegram={"enabled": True, "api_url": fake.api_url, "channels": [str(GROUP)], "poll_timeout_s": 5},
        audiences={"team": {"approve": ["current_time"], "approvers": [str(ALICE["id"])]}},
    )
    env = subprocess_env(TELEGRAM_BOT_TOKEN=TOKEN)
    fake.hold_next("sendMessage", 60)  # the prompt is the group's first post
    first = daemons.start(setup.config, setup.data_dir, setup.port, env=env)
    fake.say(GROUP, f"@{BOT_USERNAME} what time is it?")
    prompt = fake.wait_for(
        lambda s: next((m for m in s.bot_messages(GROUP) if m.data.get("reply_markup")), None), "the prompt"
    )
    first.sigkill()
    second = daemons.start(setup.config, setup.data_dir, setup.port, env=env)
    return second, prompt


def buttons_left(s: FakeTelegram) -> list[str]:
    return [m.text for m in s.bot_messages(GROUP) if m.data.get("reply_markup")]


@pytest.mark.timeout(300)  # its waits are generous for a loaded machine; this bounds them all
def test_an_approval_prompt_unrecorded_at_a_sigkill_is_decided_in_place_and_no_copy_keeps_buttons(
    fake: FakeTelegramThread, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    second, prompt = kill_before_the_prompt_is_recorded(fake, tmp_path, scripted, daemons)
    assert second.http is not None
    pending = second.http.get(f"/api/sessions/telegram:{GROUP}/approvals").json()
    assert len(pending) == 1, pending
    approve = prompt.data["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    fake.click(GROUP, prompt.data["message_id"], approve)
    fake.wait_for(lambda s: "it is late" in s.bot_texts(GROUP), "the reply after the decision", timeout=30)
    fake.wait_for(lambda s: "current_time: approve by Alice" in s.bot_texts(GROUP), "the decision shown")
    # Telegram has no client nonce and a bot cannot read history: the prompt whose answer the
    # killed daemon never got is unknown to the next one, which posts it again. The copy
    # people pressed shows the decision as well: no buttons are left to press anywhere.
    # As long as the reply's wait: the copies are edited by a daemon that was just restarted,
    # on a machine that may be loaded (CI runs three workers beside other work).
    fake.wait_for(lambda s: not buttons_left(s), "no buttons left", timeout=90)
    prompts = [t for t in fake.bot_texts(GROUP) if t.startswith(("May I run", "current_time:"))]
    assert prompts and all(t == "current_time: approve by Alice" for t in prompts), prompts
    assert fake.bot_texts(GROUP).count("it is late") == 1
