"""The Matrix driver: the real matrix-nio client in the daemon against a real Synapse
(``tests/synapse.py``), one homeserver for the driver's life (``start``/``stop``). Skipped,
saying why, where Synapse is not installed (CI sets REQUIRE_SYNAPSE_FOR_TESTS: a failure).

- The people are Synapse accounts ``@alice:localhost``, ``@bob:localhost`` and
  ``@carol:localhost`` (speakers ``matrix:@alice:localhost`` …), each writing over the plain
  client-server API (:class:`~tests.synapse.MatrixUser`). alice made the kit's one room and
  invited the bot (who joins by rule, ``matrix.auto_join``) and bob and carol.
- A conversation is a thread: the event id of its root (the message that mentioned the
  bot); the session is ``matrix:<room>:<root>`` (``adapters/matrix/_ids.py``).
- What people see is what alice's client syncs (:class:`RoomWatch`, a /sync long-poll in a
  thread): the bot's messages with their edits (``m.replace``) applied, each edit at the
  time the homeserver took it (``origin_server_ts``), redactions gone.
- Approvals are reactions (the channel's ``approvals="reactions"``): ``press`` reacts to the
  prompt as the person (👍 👎 ✅). A prompt still waiting is a message of the bot's whose
  shown content carries the approval (``org.netclaw.approval``); a decision edits it away.
- Matrix has no message shown to one person: a refusal is posted in the thread, addressed
  to the person (``bob: …``); ``told`` reads those.
- "The platform delivers an event twice": on Matrix an event comes again when a sync is
  replayed, i.e. the bot syncs again from a position before it. That happens when the
  position saved after a batch is lost or was never written (a crash between acting on a
  batch and saving the position). ``redeliver`` does exactly that, for real: it waits
  until the adapter acted on the batch that brought the message and saved its position,
  stops the adapter, rolls the saved position (the bot's account data
  ``org.netclaw.sync``) back to what it was before the message was sent, and starts the
  adapter again, which loads that position and is sent the message by Synapse again. It
  needs the daemon in this process (the adapter is found through ``in_process``), which
  is where the kit redelivers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest

from adapters.channel import Capabilities
from adapters.matrix import CHANNEL
from adapters.matrix._adapter import MatrixAdapter
from adapters.matrix._client import SINCE_TYPE
from adapters.matrix._events import APPROVAL_FIELD, FILE_TYPES, approval_of
from adapters.matrix._ids import session_id_for
from adapters.matrix._port import APPROVAL_REACTIONS
from tests.conformance.driver import PEOPLE, Daemon, Decision, Edit, Person, Prompt, Said
from tests.conformance.rig import wait_for
from tests.synapse import SERVER_NAME, MatrixUser, SynapseServer, quoted, require_synapse

BOT = "netclaw"
TOKEN_ENV = "MATRIX_ACCESS_TOKEN"
WATCH_TIMEOUT_MS = 1000  # the watcher's long-poll: answered at once when something happens
WATCH_LIMIT = 200  # events per sync; a longer burst leaves a gap the watcher reads back
RESTART_S = 30.0  # a bound on the adapter's stop and start (redeliver)


@dataclass(frozen=True, slots=True)
class Sent:
    """A message a person sent, and the bot's saved sync position just before it."""

    event_id: str
    position: str | None


@dataclass(slots=True)
class Shown:
    """One of the bot's messages as a client shows it."""

    event_id: str
    thread: str | None  # the root of the thread it is in (None: the room's main timeline)
    content: dict[str, Any]  # the latest (an edit's m.new_content)
    texts: list[tuple[float, str]] = field(default_factory=list)  # (origin_server_ts s, body)


class RoomWatch:
    """A person's client in one room: a /sync loop in a thread keeping every event of the
    room in timeline order (a gap the homeserver leaves is read back with /messages)."""

    def __init__(self, user: MatrixUser, room: str) -> None:
        self.user = user
        self.room = room
        self._http = httpx.Client(
            base_url=f"{user.url}/_matrix/client/v3",
            headers={"Authorization": f"Bearer {user.token}"},
            timeout=WATCH_TIMEOUT_MS / 1000 + 30,
        )
        self._filter = json.dumps(
            {
                "presence": {"types": []},
                "account_data": {"types": []},
                "room": {
                    "rooms": [room],
                    "timeline": {"limit": WATCH_LIMIT},
                    "state": {"types": []},
                    "ephemeral": {"types": []},
                    "account_data": {"types": []},
                },
            }
        )
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._since: str | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="matrix-kit-watch", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._sync(0)  # what the room holds already, before anyone reads
        self._thread.start()

    def ending(self) -> None:
        """Sync no more: the long-poll under way ends at once if the homeserver goes."""
        self._stopping.set()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(WATCH_TIMEOUT_MS / 1000 + 35)
        self._http.close()

    def events(self) -> list[dict[str, Any]]:
        if self.error is not None:
            raise AssertionError(f"the Matrix watcher stopped: {self.error!r}")
        with self._lock:
            return list(self._events)

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self._sync(WATCH_TIMEOUT_MS)
                failures = 0
            except httpx.HTTPError as exc:
                failures += 1
                if failures > 20:
                    self.error = exc
                    return
                self._stopping.wait(0.2)

    def _sync(self, timeout_ms: int) -> None:
        params = {"timeout": str(timeout_ms), "filter": self._filter}
        if self._since is not None:
            params["since"] = self._since
        response = self._http.get("/sync", params=params)
        response.raise_for_status()
        body = response.json()
        timeline = ((body.get("rooms") or {}).get("join") or {}).get(self.room, {}).get("timeline") or {}
        events = list(timeline.get("events") or [])
        if timeline.get("limited") and self._since is not None and timeline.get("prev_batch"):
            events = self._gap(str(timeline["prev_batch"])) + events
        with self._lock:
            for event in events:
                if event.get("event_id") not in self._seen:
                    self._seen.add(str(event.get("event_id")))
                    self._events.append(event)
        self._since = str(body["next_batch"])

    def _gap(self, before: str) -> list[dict[str, Any]]:
        """The events between the last ones kept and ``before``, oldest first."""
        found: list[dict[str, Any]] = []
        token: str | None = before
        while token:
            page = self._http.get(
                f"/rooms/{quoted(self.room)}/messages", params={"dir": "b", "limit": "100", "from": token}
            )
            page.raise_for_status()
            data = page.json()
            for event in data.get("chunk") or []:
                if event.get("event_id") in self._seen:
                    return list(reversed(found))
                found.append(event)
            token = data.get("end")
        return list(reversed(found))


def shown_by(events: list[dict[str, Any]], sender: str) -> list[Shown]:
    """``sender``'s messages as a client shows them, oldest first: edits applied (each kept
    with its time), redacted ones gone."""
    shown: dict[str, Shown] = {}
    for event in events:
        if event.get("sender") != sender:
            continue
        content = event.get("content") or {}
        at = int(event.get("origin_server_ts") or 0) / 1000
        if event.get("type") == "m.room.redaction":
            shown.pop(str(event.get("redacts") or content.get("redacts") or ""), None)
            continue
        if event.get("type") != "m.room.message" or not content:
            continue
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            original = shown.get(str(relation.get("event_id")))
            if original is not None:
                original.content = dict(content.get("m.new_content") or {})
                original.texts.append((at, str(original.content.get("body", ""))))
            continue
        thread = str(relation["event_id"]) if relation.get("rel_type") == "m.thread" else None
        event_id = str(event["event_id"])
        shown[event_id] = Shown(event_id, thread, dict(content), [(at, str(content.get("body", "")))])
    return list(shown.values())


def has_text(message: Shown) -> bool:
    return message.content.get("msgtype") not in FILE_TYPES and bool(message.content.get("body"))


class MatrixDriver:
    name: ClassVar[str] = "matrix"
    chat_commands: ClassVar[bool] = True

    def __init__(self) -> None:
        self.synapse: SynapseServer | None = None
        self.people: dict[Person, MatrixUser] = {}
        self.names: dict[Person, str] = {}  # display names: how the bot addresses them
        self.bot: MatrixUser | None = None
        self.room = ""
        self.watch: RoomWatch | None = None
        self._files: dict[str, bytes] = {}  # mxc:// → bytes, read once
        # The daemon's adapter and loop, when the daemon runs in this process (redeliver).
        self._adapter: MatrixAdapter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._daemon: Daemon | None = None
        # origin_server_ts is wall-clock time; Edit.at is this process's monotonic clock.
        self._clock = time.monotonic() - time.time()

    # -- the homeserver -------------------------------------------------------------------------

    def start(self) -> None:
        python = require_synapse()
        self.synapse = SynapseServer(python)
        try:
            self.synapse.start()
            self.bot = self.synapse.register(BOT)
            self.people = {person: self.synapse.register(person) for person in PEOPLE}
            for person, user in self.people.items():
                profile = user.call("GET", f"/profile/{quoted(user.user_id)}")
                self.names[person] = str(profile.get("displayname") or user.user_id)
            alice = self.people["alice"]
            others = [self.people[p].user_id for p in PEOPLE if p != "alice"]
            self.room = alice.create_room(invite=[self.bot.user_id, *others])
            for person in PEOPLE:
                if person != "alice":
                    self.people[person].join(self.room)
            self.watch = RoomWatch(alice, self.room)
            self.watch.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.ending()
        if self.synapse is not None:
            self.synapse.stop()
        if watch is not None:
            watch.stop()
        for user in [*self.people.values(), *([self.bot] if self.bot else [])]:
            user.close()

    def sections(self) -> dict[str, Any]:
        assert self.synapse is not None
        return {
            "matrix": {
                "enabled": True,
                "homeserver": self.synapse.url,
                "token_env": TOKEN_ENV,
                "channels": [self.room],
            }
        }

    def env(self) -> dict[str, str]:
        assert self.bot is not None
        return {TOKEN_ENV: self.bot.token}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]  # nio reaches Synapse at matrix.homeserver

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        # Nothing to point at the homeserver; keep hold of the adapter to restart it (redeliver).
        start = MatrixAdapter.start
        driver = self

        async def started(adapter: MatrixAdapter) -> None:
            driver._adapter, driver._loop = adapter, asyncio.get_running_loop()
            await start(adapter)

        patch.setattr(MatrixAdapter, "start", started)

    def attach(self, daemon: Daemon) -> None:
        # The bot joins the room once its first sync brought the invite (later starts find
        # it joined; what was said meanwhile comes from the saved sync position).
        self._daemon = daemon
        self._wait(
            lambda: self._membership(self._bot().user_id) == "join",
            20,
            "the bot to join the kit's room",
        )

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"matrix:@{person}:{SERVER_NAME}"

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
        user, bot = self.people[person], self._bot()
        position = self._saved_position()
        if len(files) > 1:
            raise ValueError(f"a Matrix message carries one file, not {len(files)}")
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if files:
            # One event, the text as the file's caption (MSC2530: a body beside a filename).
            name, mime_type, data = files[0]
            url = user.upload(name, data, mime_type)
            content = {
                "msgtype": "m.image" if mime_type.startswith("image/") else "m.file",
                "body": text or name,
                "filename": name,
                "url": url,
                "info": {"mimetype": mime_type, "size": len(data)},
            }
        if mention:
            content["body"] = f"{bot.user_id}: {content['body']}"
            content["m.mentions"] = {"user_ids": [bot.user_id]}
        if conversation is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": conversation,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": conversation},
            }
        event_id = user.send(self.room, content)
        return Said(text, person, conversation, Sent(event_id, position))

    def redeliver(self, said: Said) -> None:
        sent: Sent = said.ref
        adapter, loop = self._adapter, self._loop
        if adapter is None or loop is None:
            raise AssertionError("the Matrix driver replays a sync by restarting the adapter in this process")
        # Delivered once first: the adapter acted on the batch that brought it and saved past it.
        self._wait(
            lambda: self._saved_position() != sent.position,
            20,
            f"the bot's sync position saved past {sent.event_id}",
        )
        self._run(adapter.stop(), loop)
        bot = self._bot()
        if sent.position is not None:
            bot.call(
                "PUT", f"/user/{quoted(bot.user_id)}/account_data/{SINCE_TYPE}", json={"since": sent.position}
            )
        self._run(adapter.start(), loop)

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        sent: Sent = said.ref
        return said.conversation if said.conversation is not None else sent.event_id

    def session_of(self, conversation: str) -> str:
        return session_id_for(self.room, conversation)

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        self.people[person].react(self.room, str(prompt.ref), APPROVAL_REACTIONS[decision])

    # -- what people see ---------------------------------------------------------------------------

    def _shown(self, conversation: str | None = None, *, anywhere: bool = False) -> list[Shown]:
        assert self.watch is not None
        found = shown_by(self.watch.events(), self._bot().user_id)
        return found if anywhere else [m for m in found if m.thread == conversation]

    def bot_messages(self, conversation: str) -> list[str]:
        return [str(m.content["body"]) for m in self._shown(conversation) if has_text(m)]

    def everywhere(self) -> list[str]:
        return [str(m.content["body"]) for m in self._shown(anywhere=True) if has_text(m)]

    def told(self, person: Person) -> list[str]:
        # Matrix shows everyone everything: the adapter addresses a refusal to whoever reacted.
        prefixes = (f"{self.names[person]}: ", f"{self.people[person].user_id}: ")
        found = []
        for text in self.everywhere():
            for prefix in prefixes:
                if text.startswith(prefix):
                    found.append(text.removeprefix(prefix))
                    break
        return found

    def edits(self, conversation: str) -> list[Edit]:
        found = [
            Edit(m.event_id, text, at + self._clock, i == 0)
            for m in self._shown(conversation)
            if has_text(m)
            for i, (at, text) in enumerate(m.texts)
        ]
        return sorted(found, key=lambda e: e.at)

    def prompts(self, conversation: str) -> list[Prompt]:
        found = []
        for message in self._shown(conversation):
            asked = approval_of(message.content) if APPROVAL_FIELD in message.content else None
            if asked is not None:
                found.append(Prompt(asked[0], str(message.content.get("body", "")), message.event_id))
        return found

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        found = []
        for message in self._shown(conversation):
            url = str(message.content.get("url") or "")
            if message.content.get("msgtype") not in FILE_TYPES or not url:
                continue
            if url not in self._files:
                self._files[url] = self.people["alice"].download(url)
            name = str(message.content.get("filename") or message.content.get("body") or "")
            found.append((name, self._files[url]))
        return found

    # -- helpers -------------------------------------------------------------------------------------

    def _bot(self) -> MatrixUser:
        assert self.bot is not None, "the driver is not started"
        return self.bot

    def _saved_position(self) -> str | None:
        """The sync position the adapter saved last (the bot's account data), if any."""
        bot = self._bot()
        response = bot.http.get(f"/user/{quoted(bot.user_id)}/account_data/{SINCE_TYPE}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        since = response.json().get("since")
        return str(since) if since else None

    def _membership(self, user_id: str) -> str:
        return self.people["alice"].members(self.room).get(user_id, "")

    @staticmethod
    def _run(step: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop) -> None:
        asyncio.run_coroutine_threadsafe(step, loop).result(RESTART_S)

    @staticmethod
    def _wait(predicate: Any, timeout: float, what: str) -> None:
        wait_for(predicate, what, timeout)


DRIVER = MatrixDriver
