"""The Slack driver: the real slack-bolt/slack-sdk stack against :class:`FakeSlack` (its Web
API and Socket Mode WebSocket on 127.0.0.1). A conversation is ``<channel>:<thread ts>``;
approvals are Block Kit buttons, pressed as ``block_actions`` envelopes."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.slack import CHANNEL
from tests.conformance.driver import Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, FakeSlackThread

CHANNEL_ID = "C1"
USERS: dict[Person, str] = {"alice": "U1", "bob": "U2", "carol": "U3"}
ACTION_PREFIX = "netclaw_"


class SlackDriver:
    name: ClassVar[str] = "slack"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.fake = FakeSlackThread()

    def start(self) -> None:
        self.fake.start()

    def stop(self) -> None:
        self.fake.stop()

    def sections(self) -> dict[str, Any]:
        return {"slack": {"enabled": True, "channels": [CHANNEL_ID], "api_url": self.fake.api_url}}

    def env(self) -> dict[str, str]:
        return {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        return None  # slack-sdk takes the fake's URL from the config (slack.api_url)

    def attach(self, daemon: Daemon) -> None:
        # Events go to the newest connection: wait until the daemon's is the only one open
        # (a daemon killed a moment ago may not have lost its connection yet).
        wait_for(lambda: self.fake.live_sockets() == 1, "one Socket Mode connection open", 20)

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"slack:{USERS[person]}"

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
        body = f"<@{BOT_USER_ID}> {text}" if mention else text
        if conversation is None:
            ts, envelopes = self.fake.say(CHANNEL_ID, body, user=USERS[person], files=list(files) or None)
            return Said(text, person, f"{CHANNEL_ID}:{ts}", envelopes)
        channel, thread = conversation.split(":")
        _ts, envelopes = self.fake.say(
            channel, body, user=USERS[person], thread_ts=thread, files=list(files) or None
        )
        return Said(text, person, conversation, envelopes)

    def redeliver(self, said: Said) -> None:
        for envelope in said.ref:
            self.fake.redeliver(envelope)

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        assert said.conversation is not None
        return said.conversation

    def session_of(self, conversation: str) -> str:
        return f"slack:{conversation}"

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        channel, ts = prompt.ref
        self.fake.click(channel, ts, f"{ACTION_PREFIX}{decision}", prompt.approval_id, user=USERS[person])

    # -- what people see ---------------------------------------------------------------------------

    def _messages(self, conversation: str) -> list[dict[str, Any]]:
        channel, thread = conversation.split(":")
        return self.fake.bot_messages(channel, thread)

    def bot_messages(self, conversation: str) -> list[str]:
        return [str(m["text"]) for m in self._messages(conversation) if m.get("text")]

    def everywhere(self) -> list[str]:
        # The kit's config lets the bot talk in CHANNEL_ID only (its threads included).
        return [str(m["text"]) for m in self.fake.bot_messages(CHANNEL_ID) if m.get("text")]

    def told(self, person: Person) -> list[str]:
        return [str(e["text"]) for e in list(self.fake.server.ephemeral) if e["user"] == USERS[person]]

    def edits(self, conversation: str) -> list[Edit]:
        found = []
        for message in self._messages(conversation):
            shown = self.fake.shown(str(message["ts"]))
            found += [Edit(str(message["ts"]), text, at, i == 0) for i, (at, text) in enumerate(shown)]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        channel, _ = conversation.split(":")
        found = []
        for message in self._messages(conversation):
            for block in message.get("blocks") or []:
                if block.get("type") != "actions":
                    continue
                values = {e["value"] for e in block.get("elements") or []}
                found += [Prompt(v, str(message["text"]), (channel, message["ts"])) for v in sorted(values)]
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        found = []
        for message in self._messages(conversation):
            for shared in message.get("files") or []:
                data = self.fake.file_data(str(shared["id"]))
                if data is not None:
                    found.append(data)
        return found


DRIVER = SlackDriver
