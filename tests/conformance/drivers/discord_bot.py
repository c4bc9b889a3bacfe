"""The Discord driver: the real discord.py client against :class:`FakeDiscordServer` (REST
and the gateway WebSocket on 127.0.0.1). A mention in the allowed channel starts a thread
(whose id is the mention's, as on Discord); a conversation is that thread's id; approvals
are buttons, pressed as component interactions. (Named ``discord_bot`` like the adapter,
so that ``discord`` always means the library.)"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.discord_bot import CHANNEL
from tests.conformance.driver import Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.fakes.discord_port import FakeDiscordServer

CHANNEL_ID = "100"
BOT_ID = "999"
USERS: dict[Person, str] = {"alice": "42", "bob": "43", "carol": "44"}
CUSTOM_ID_PREFIX = "netclaw:"


class DiscordDriver:
    name: ClassVar[str] = "discord"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.fake = FakeDiscordServer(bot_id=BOT_ID, channel_id=CHANNEL_ID)

    def start(self) -> None:
        self.fake.start()

    def stop(self) -> None:
        self.fake.stop()

    def sections(self) -> dict[str, Any]:
        return {"discord": {"enabled": True, "channels": [CHANNEL_ID]}}

    def env(self) -> dict[str, str]:
        return {"DISCORD_BOT_TOKEN": self.fake.token}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "tests.e2e.netclaw_with_fake_discord", str(self.fake.port)]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        self.fake.install(patch)

    def attach(self, daemon: Daemon) -> None:
        # Messages reach the bot once its gateway session is identified (and the one of a
        # daemon killed a moment ago is gone).
        wait_for(
            lambda: self.fake.connected == 1 and self.fake.identify is not None,
            "one identified gateway connection",
            20,
        )

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"discord:{USERS[person]}"

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
        message_id = self.fake.post_message(
            f"<@{BOT_ID}> {text}" if mention else text,
            channel_id=conversation or CHANNEL_ID,
            author_id=USERS[person],
            author_name=person,
            mentions_bot=mention,
            attachments=list(files) or None,
        )
        return Said(text, person, conversation, message_id)

    def redeliver(self, said: Said) -> None:
        self.fake.redeliver(str(said.ref))

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        if said.conversation is not None:
            return said.conversation
        self.fake.wait_for(
            lambda: any(t["starter_message_id"] == said.ref for t in list(self.fake.threads)),
            timeout,
            f"the thread of message {said.ref}",
        )
        return str(next(t["id"] for t in list(self.fake.threads) if t["starter_message_id"] == said.ref))

    def session_of(self, conversation: str) -> str:
        return f"discord:{conversation}"

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        self.fake.press_button(
            str(prompt.ref), f"{CUSTOM_ID_PREFIX}{decision}:{prompt.approval_id}", user_id=USERS[person]
        )

    # -- what people see ---------------------------------------------------------------------------

    def _messages(self, conversation: str) -> list[dict[str, Any]]:
        return sorted(
            (
                m
                for m in list(self.fake.messages.values())
                if m["channel_id"] == conversation and m["author"]["id"] == BOT_ID
            ),
            key=lambda m: int(m["id"]),
        )

    def bot_messages(self, conversation: str) -> list[str]:
        return [str(m["content"]) for m in self._messages(conversation) if m["content"]]

    def everywhere(self) -> list[str]:
        return [
            str(m["content"])
            for m in list(self.fake.messages.values())
            if m["author"]["id"] == BOT_ID and m["content"]
        ]

    def told(self, person: Person) -> list[str]:
        token = f"interaction-token-{USERS[person]}"  # the fake's, for presses by this person
        return [str(f["content"]) for f in list(self.fake.followups) if f["token"] == token]

    def edits(self, conversation: str) -> list[Edit]:
        found = []
        for message in self._messages(conversation):
            shown = list(self.fake.shown.get(message["id"], []))
            found += [Edit(message["id"], text, at, i == 0) for i, (at, text) in enumerate(shown)]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        found = []
        for message in self._messages(conversation):
            for row in message.get("components") or []:
                for button in row.get("components") or []:
                    custom_id = str(button.get("custom_id") or "")
                    if custom_id.startswith(f"{CUSTOM_ID_PREFIX}approve:"):
                        approval = custom_id.removeprefix(f"{CUSTOM_ID_PREFIX}approve:")
                        found.append(Prompt(approval, str(message["content"]), message["id"]))
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        return self.fake.bot_files(conversation)


DRIVER = DiscordDriver
