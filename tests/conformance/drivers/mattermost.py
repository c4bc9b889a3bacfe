"""The Mattermost driver: netclaw's Mattermost client (httpx and aiohttp's websocket) in the
daemon against :class:`FakeMattermost` (REST v4 and the websocket on 127.0.0.1;
``mattermost.url`` points the daemon at it, so a subprocess needs no patching).

alice, bob and carol are members of one open channel (an allowed channel) with the bot. A
conversation is a thread: the id of its root post, the one that mentioned the bot (the
session ``mattermost:<channel>:<root>``); going on is replying in the thread. Approvals
are interactive message buttons, pressed through the server (``POST
/posts/{id}/actions/{action}``), which forwards the press to the daemon's
``/mattermost/actions``: the config's ``actions_url`` is a stand-in nothing answers, and
the fake is told where it leads once the daemon listens (as a proxy would). What a press
tells only its presser is the action's ``ephemeral_text``. "Delivered twice" is the
``posted`` event sent again on the bot's websocket.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from adapters.channel import Capabilities
from adapters.mattermost import CHANNEL
from adapters.mattermost._events import session_id_for
from tests.conformance.driver import PEOPLE, Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.fakes.mattermost_api import FakeMattermost, FakeMattermostThread, Post

TOKEN_ENV = "MATTERMOST_BOT_TOKEN"
PUBLIC_URL = "http://127.0.0.1:1"  # nothing listens on port 1: the fake is told where it leads


class MattermostDriver:
    name: ClassVar[str] = "mattermost"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.fake = FakeMattermostThread()
        self.people: dict[Person, str] = {}
        self.bot = ""
        self.token = ""
        self.channel = ""

    def start(self) -> None:
        self.fake.start()

        def world(s: FakeMattermost) -> None:
            bot, self.token = s.add_user("netclaw", bot=True)
            self.bot = str(bot["id"])
            for person in PEOPLE:
                self.people[person] = str(s.add_user(person)[0]["id"])
            self.channel = s.add_channel("town-square", [self.bot, *self.people.values()])

        self.fake.read(world)

    def stop(self) -> None:
        self.fake.stop()

    def sections(self) -> dict[str, Any]:
        return {
            "mattermost": {
                "enabled": True,
                "url": self.fake.url,
                "actions_url": PUBLIC_URL,
                "channels": [self.channel],
            }
        }

    def env(self) -> dict[str, str]:
        return {TOKEN_ENV: self.token}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        return None  # the client takes the fake's URL from the config (mattermost.url)

    def attach(self, daemon: Daemon) -> None:
        self.fake.read(lambda s: s.reach(daemon.base_url))

        def running() -> bool:
            state = daemon.control.get("/healthz").json().get("adapters", {}).get("mattermost", {})
            return bool(state.get("state") == "running")

        wait_for(running, "the mattermost channel running", 20)

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"mattermost:{self.people[person]}"

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
        user = self.people[person]
        file_ids = [self.fake.upload(user, self.channel, name, data, mime) for name, mime, data in files]
        message = f"@netclaw {text}" if mention else text
        post = self.fake.say(user, self.channel, message, root_id=conversation or "", file_ids=file_ids)
        return Said(text, person, conversation, post.id)

    def redeliver(self, said: Said) -> None:
        self.fake.redeliver(str(said.ref))

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        return said.conversation if said.conversation is not None else str(said.ref)

    def session_of(self, conversation: str) -> str:
        return session_id_for(self.channel, conversation)

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        status, body = self.fake.press(self.people[person], str(prompt.ref), decision)
        assert status == 200, f"the press of {decision} failed: {status} {body}"

    # -- what people see ---------------------------------------------------------------------------

    def _bot_posts(self, conversation: str | None = None) -> list[Post]:
        def posts(s: FakeMattermost) -> list[Post]:
            return [
                Post(dict(p.data), list(p.shown))
                for p in s.posts_by(self.bot)
                if not p.deleted and (conversation is None or p.data.get("root_id") == conversation)
            ]

        return self.fake.read(posts)

    def bot_messages(self, conversation: str) -> list[str]:
        return [p.message for p in self._bot_posts(conversation) if p.message]

    def everywhere(self) -> list[str]:
        return [p.message for p in self._bot_posts() if p.message]

    def told(self, person: Person) -> list[str]:
        user = self.people[person]
        return self.fake.read(lambda s: [e["message"] for e in s.ephemerals if e["user_id"] == user])

    def edits(self, conversation: str) -> list[Edit]:
        found = [
            Edit(post.id, text, at, i == 0)
            for post in self._bot_posts(conversation)
            if post.message
            for i, (at, text) in enumerate(post.shown)
        ]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        found = []
        for post in self._bot_posts(conversation):
            for action in post.actions():
                if action.get("id") == "approve":
                    context = (action.get("integration") or {}).get("context") or {}
                    found.append(Prompt(str(context.get("value")), post.message, post.id))
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        ids = [f for post in self._bot_posts(conversation) for f in post.data.get("file_ids") or []]
        return self.fake.read(lambda s: [(str(s.files[i][0]["name"]), s.files[i][1]) for i in ids])


DRIVER = MattermostDriver
