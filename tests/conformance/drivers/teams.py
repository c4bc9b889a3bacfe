"""The Teams driver: the daemon's Agents SDK against :class:`FakeTeams` (the Bot Framework's
token endpoint, signing keys and conversations API over HTTP on 127.0.0.1;
``teams.token_url`` points the bot's token at it, ``in_process`` and the launcher point the
SDK's validator at its keys). Every activity reaches the daemon's ``POST /teams/messages`` signed by the fake.

alice, bob and carol are members of one team channel (:data:`CHANNEL`, allowed). A
conversation is a reply chain there, ``<channel>;messageid=<root>`` as Teams names it (the
session ``teams:<key>:<root>``): a person starts one with a new post @mentioning the bot,
and goes on in it without a mention (the bot's app reads the channel's messages, as with
Teams' ``ChannelMessage.Read.Group``). Approvals are Adaptive Cards, pressed as their
Action.Submit (a message activity carrying the button's data); what a press tells its
presser alone is a targeted message. Files come as Teams' download info; the bot's come
back inline.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.teams import CHANNEL as TEAMS
from adapters.teams._port import ACTION_KEY, conversation_key
from tests.conformance.driver import Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.fakes.teams_api import APP_ID, APP_PASSWORD, CARD_TYPE, FakeTeams, FakeTeamsThread, files_of

CHANNEL = "19:kit-general@thread.tacv2"
PEOPLE: dict[Person, dict[str, str]] = {
    "alice": {"name": "alice", "aad": "aad-alice"},
    "bob": {"name": "bob", "aad": "aad-bob"},
    "carol": {"name": "carol", "aad": "aad-carol"},
}


class TeamsDriver:
    name: ClassVar[str] = "teams"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.fake = FakeTeamsThread()

    def start(self) -> None:
        self.fake.start()

    def stop(self) -> None:
        self.fake.stop()

    def sections(self) -> dict[str, Any]:
        return {
            "teams": {
                "enabled": True,
                "app_id": APP_ID,
                "token_url": self.fake.server.token_url,
                "channels": [CHANNEL],
            }
        }

    def env(self) -> dict[str, str]:
        return {"TEAMS_APP_PASSWORD": APP_PASSWORD}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "tests.e2e.netclaw_with_fake_teams", self.fake.server.keys_url]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        from microsoft_agents.hosting.core.authorization._entra_issuers import BOTFRAMEWORK_JWKS_URIS

        from tests.fakes.teams_api import ISSUER

        patch.setitem(BOTFRAMEWORK_JWKS_URIS, ISSUER, self.fake.server.keys_url)

    def attach(self, daemon: Daemon) -> None:
        def running() -> bool:
            state = daemon.control.get("/healthz").json().get("adapters", {}).get("teams", {})
            return bool(state.get("state") == "running")

        wait_for(running, "the teams channel running", 20)
        # Activities that found nobody (the daemon was down) go now.
        self.fake.read(lambda s: s.reach(f"{daemon.base_url}/teams/messages"))

    @property
    def capabilities(self) -> Capabilities:
        return TEAMS.capabilities

    def speaker(self, person: Person) -> str:
        return f"teams:{PEOPLE[person]['aad']}"

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
        server = self.fake.server
        root = None
        if conversation is None:
            root = str(self.fake.read(lambda s: next(s._ids)))  # noqa: SLF001 - a new post's id is its chain's
            conversation = f"{CHANNEL};messageid={root}"
        target = conversation

        def make(s: FakeTeams) -> dict[str, Any]:
            return s.message(
                target, "channel", PEOPLE[person], text, mention=mention, files=list(files), activity_id=root
            )

        activity = self.fake.read(make)
        self.fake.run(server.deliver(activity))
        return Said(text, person, conversation, activity)

    def redeliver(self, said: Said) -> None:
        self.fake.run(self.fake.server.deliver(said.ref))

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        assert said.conversation is not None
        return said.conversation

    def session_of(self, conversation: str) -> str:
        channel, _, root = conversation.partition(";messageid=")
        return f"teams:{conversation_key(channel)}:{root}"

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        conversation, card_id = prompt.ref

        def make(s: FakeTeams) -> dict[str, Any]:
            value = {ACTION_KEY: decision, "value": prompt.approval_id}
            return s.message(conversation, "channel", PEOPLE[person], "", value=value, reply_to=card_id)

        self.fake.run(self.fake.server.deliver(self.fake.read(make)))

    # -- what people see ---------------------------------------------------------------------------

    def bot_messages(self, conversation: str) -> list[str]:
        return self.fake.read(lambda s: [m.text for m in s.bot_messages(conversation) if m.text])

    def everywhere(self) -> list[str]:
        return self.fake.read(lambda s: [m.text for m in s.bot_messages() if m.text])

    def told(self, person: Person) -> list[str]:
        return self.fake.read(lambda s: [m.text for m in s.targeted(f"29:{PEOPLE[person]['name']}")])

    def edits(self, conversation: str) -> list[Edit]:
        found = []
        for message_id, shown in self.fake.read(
            lambda s: [(m.id, list(m.shown)) for m in s.bot_messages(conversation) if m.text]
        ):
            found += [Edit(message_id, text, at, i == 0) for i, (at, text) in enumerate(shown)]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        found = []
        for message_id, activity, text in self.fake.read(
            lambda s: [(m.id, m.activity, m.text) for m in s.bot_messages(conversation)]
        ):
            for attachment in activity.get("attachments") or []:
                if attachment.get("contentType") != CARD_TYPE:
                    continue
                for action in (attachment.get("content") or {}).get("actions") or []:
                    data = action.get("data") or {}
                    if data.get(ACTION_KEY) == "approve":
                        found.append(Prompt(str(data["value"]), text, (conversation, message_id)))
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        return self.fake.read(lambda s: [f for m in s.bot_messages(conversation) for f in files_of(m)])


DRIVER = TeamsDriver
