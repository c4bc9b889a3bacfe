"""The Telegram driver: the real python-telegram-bot ``Bot`` against :class:`FakeTelegram`
(the Bot API over HTTP on 127.0.0.1; ``telegram.api_url`` points the daemon at it, so a
subprocess needs no patching). The bot long-polls, as by default.

alice, bob and carol are members of one forum supergroup (:data:`GROUP`, an allowed
chat). A conversation is a forum topic there, ``<chat>:<topic>`` (the session
``telegram:<chat>:<topic>``): a person starts one by opening a topic and @mentioning the
bot in it. Without a mention, a person goes on the way Telegram lets a bot in privacy
mode hear them: by replying to the bot's newest message in the topic, or with a
``/command`` (bare, as netclaw's commands are taken in a group). Approvals are inline
keyboards, pressed as callback queries; what a press tells only its presser is the
alert in the answer to that query. A person's files go as a document (one a message,
as on Telegram); the bot's come back as documents.

Telegram takes no client nonce and a bot cannot read history, so a post is known to the
daemon only once Telegram's answer reached it. The restart case kills the daemon as
soon as the approval prompt shows: should the kill land before that answer arrived, the
next daemon posts the prompt again and the one pressed keeps its buttons (a known gap,
shown deterministically by tests/e2e/test_telegram_crash.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.telegram import CHANNEL
from adapters.telegram._port import CALLBACK_PREFIX
from tests.conformance.driver import Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.fakes.telegram_api import ALICE, BOB, BOT_USERNAME, CAROL, TOKEN, FakeTelegram, FakeTelegramThread

GROUP = -1001  # a forum supergroup (negative ids are groups in the fake, as on Telegram)
USERS: dict[Person, dict[str, Any]] = {"alice": ALICE, "bob": BOB, "carol": CAROL}
APPROVE = f"{CALLBACK_PREFIX}approve:"


def _topic(conversation: str) -> tuple[int, int]:
    chat, topic = conversation.split(":")
    return int(chat), int(topic)


class TelegramDriver:
    name: ClassVar[str] = "telegram"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.fake = FakeTelegramThread()
        self._presses: dict[str, Person] = {}  # callback query id → who pressed

    def start(self) -> None:
        self.fake.start()

    def stop(self) -> None:
        self.fake.stop()

    def sections(self) -> dict[str, Any]:
        return {
            "telegram": {
                "enabled": True,
                "api_url": self.fake.api_url,
                "channels": [str(GROUP)],
                "poll_timeout_s": 5,  # a killed daemon's long poll ends soon at the fake
            }
        }

    def env(self) -> dict[str, str]:
        return {"TELEGRAM_BOT_TOKEN": TOKEN}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        return None  # the bot takes the fake's URL from the config (telegram.api_url)

    def attach(self, daemon: Daemon) -> None:
        # Telegram keeps updates until a poll confirms them, so nothing said early is lost;
        # waiting for the channel to run keeps a failure to start from looking like silence.
        def running() -> bool:
            state = daemon.control.get("/healthz").json().get("adapters", {}).get("telegram", {})
            return bool(state.get("state") == "running")

        wait_for(running, "the telegram channel running", 20)

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"telegram:{USERS[person]['id']}"

    # -- people ----------------------------------------------------------------------------------

    def say(
        self,
        text: str,
        conversation: str | None = None,
        *,
        person: Person = "alice",
        mention: bool = True,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Said:
        user = USERS[person]
        if conversation is None:
            topic = self.fake.open_topic(GROUP, text[:64], user=user)
            conversation = f"{GROUP}:{topic}"
        chat, topic = _topic(conversation)
        reply_to = None
        if not mention and not text.startswith("/"):
            # In a group, going on without a mention is replying to the bot.
            mine = [m for m in self.fake.bot_messages(chat, topic) if m.text]
            reply_to = mine[-1].data["message_id"] if mine else None
        if len(files) > 1:
            raise ValueError("one file a message on Telegram (an album is several messages)")
        document = [(name, data, mime) for name, mime, data in files if not mime.startswith("audio/")]
        voice = [(data, mime) for _, mime, data in files if mime.startswith("audio/")]  # a voice note
        message = self.fake.say(
            chat,
            f"@{BOT_USERNAME} {text}" if mention else text,
            user=user,
            topic=topic,
            reply_to=reply_to,
            document=document[0] if document else None,
            voice=voice[0] if voice else None,
        )
        update = self.fake.read(lambda s: next(u for u in s.sent_updates if u.get("message") is message))
        return Said(text, person, conversation, update)

    def redeliver(self, said: Said) -> None:
        self.fake.redeliver(said.ref)

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        assert said.conversation is not None  # the driver opens the topic itself
        return said.conversation

    def session_of(self, conversation: str) -> str:
        return f"telegram:{conversation}"

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        chat, message_id = prompt.ref
        update = self.fake.click(
            chat, message_id, f"{CALLBACK_PREFIX}{decision}:{prompt.approval_id}", user=USERS[person]
        )
        self._presses[str(update["callback_query"]["id"])] = person

    # -- what people see ---------------------------------------------------------------------------

    def _messages(self, conversation: str) -> list[dict[str, Any]]:
        chat, topic = _topic(conversation)
        return self.fake.read(
            lambda s: [
                {**m.data, "shown": list(m.shown), "text": m.text} for m in s.bot_messages(chat, topic)
            ]
        )

    def bot_messages(self, conversation: str) -> list[str]:
        return [str(m["text"]) for m in self._messages(conversation) if m["text"]]

    def everywhere(self) -> list[str]:
        return self.fake.read(
            lambda s: [m.text for chat in s.messages.values() for m in chat if m.from_bot and m.text]
        )

    def told(self, person: Person) -> list[str]:
        mine = {query for query, presser in self._presses.items() if presser == person}
        return [
            str(a["text"])
            for a in self.fake.read(lambda s: list(s.answers))
            if a["callback_query_id"] in mine and a.get("text")
        ]

    def edits(self, conversation: str) -> list[Edit]:
        found = []
        for message in self._messages(conversation):
            message_id = str(message["message_id"])
            found += [Edit(message_id, text, at, i == 0) for i, (at, text) in enumerate(message["shown"])]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        chat, _ = _topic(conversation)
        found = []
        for message in self._messages(conversation):
            for row in (message.get("reply_markup") or {}).get("inline_keyboard") or []:
                for button in row:
                    data = str(button.get("callback_data") or "")
                    if data.startswith(APPROVE):
                        ref = (chat, message["message_id"])
                        found.append(Prompt(data.removeprefix(APPROVE), str(message["text"]), ref))
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        ids = [
            m[k]["file_id"]
            for m in self._messages(conversation)
            for k in ("document", "voice", "audio")
            if k in m
        ]

        def files(s: FakeTelegram) -> list[tuple[str, bytes]]:
            return [(s.files[i][1], s.files[i][0]) for i in ids]

        return self.fake.read(files)


DRIVER = TelegramDriver
