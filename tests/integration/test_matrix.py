"""The Matrix channel end to end against a real Synapse homeserver (tests/synapse.py).

The daemon runs in-process with its own wiring: the matrix adapter, matrix-nio and the sync
loop talk to Synapse on 127.0.0.1; people are plain client-server API calls
(:class:`~tests.synapse.MatrixUser`), what a Matrix client would send. The provider is the
scripted OpenAI server (it echoes unless told otherwise). Each test registers its own bot
and people, so the sync position one test leaves in the bot's account data never reaches
another.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.chat import split_message
from adapters.matrix import MatrixAdapter
from adapters.matrix._client import probe_whoami
from adapters.matrix._port import MESSAGE_LIMIT, MatrixApiError
from netclaw.config import Settings, settings_model
from tests.conftest import DaemonHandle, settings_data
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.synapse import SynapseServer, shown_messages, synapse_for_tests

THUMBS_UP = "\N{THUMBS UP SIGN}\ufe0f"  # as Element sends it, with a variation selector
_names = itertools.count(1)


@pytest.fixture(scope="module")
def synapse() -> Iterator[SynapseServer]:
    yield from synapse_for_tests()


@pytest.fixture
def make_settings(tmp_path: Path, scripted: ScriptedOpenAIThread) -> Callable[..., Settings]:
    """Settings with the installed channels' sections (``matrix`` is not one of Settings' own)."""

    def make(**sections: Any) -> Settings:
        return settings_model()(**settings_data(tmp_path / "data", scripted.base_url, **sections))

    return make


class World:
    """One test's bot account and people on the shared Synapse, and the daemons it starts."""

    def __init__(
        self,
        synapse: SynapseServer,
        start_daemon: Callable[..., DaemonHandle],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        n = next(_names)
        self.synapse = synapse
        self.bot = synapse.register(f"netclaw{n}")
        self.alice = synapse.register(f"alice{n}")
        self.mallory = synapse.register(f"mallory{n}")
        self._start_daemon = start_daemon
        monkeypatch.setenv("MATRIX_ACCESS_TOKEN", self.bot.token)

    def room(self, **kwargs: Any) -> str:
        """A room Alice made, the bot invited."""
        return self.alice.create_room(invite=[self.bot.user_id], **kwargs)

    def start(self, *, rooms: list[str], **matrix: Any) -> DaemonHandle:
        config = {"enabled": True, "homeserver": self.synapse.url, "channels": rooms, **matrix}
        sections = matrix.pop("sections", {}) if "sections" in matrix else {}
        config.pop("sections", None)
        handle = self._start_daemon(matrix=config, **sections)
        self.adapter(handle)  # running
        return handle

    @staticmethod
    def adapter(handle: DaemonHandle) -> MatrixAdapter:
        [adapter] = [a for a in handle.daemon.adapters if a.name == "matrix"]
        assert isinstance(adapter, MatrixAdapter), adapter
        assert adapter.status().state == "running", adapter.status()
        return adapter

    def joined(self, room: str) -> None:
        self.alice.wait_for(
            f"the bot to join {room}", lambda: self.alice.members(room).get(self.bot.user_id) == "join"
        )

    def replies(self, room: str, thread: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages as Alice's client shows them (edits applied), in ``thread``
        (None: the main timeline)."""
        found = []
        for message in shown_messages(self.alice.messages(room), self.bot.user_id):
            relation = message["raw"]["content"].get("m.relates_to") or {}
            in_thread = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
            if in_thread == thread:
                found.append(message)
        return found

    def texts(self, room: str, thread: str | None = None) -> list[str]:
        return [m["content"].get("body", "") for m in self.replies(room, thread)]

    def wait_texts(self, room: str, thread: str | None, want: list[str], timeout: float = 30.0) -> None:
        self.alice.wait_for(
            f"{want} in {room}/{thread} (so far {self.texts(room, thread)})",
            lambda: self.texts(room, thread) == want,
            timeout,
        )


@pytest.fixture
def world(
    synapse: SynapseServer, start_daemon: Callable[..., DaemonHandle], monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    yield World(synapse, start_daemon, monkeypatch)


# -- threads and sessions ---------------------------------------------------------------------------


def test_a_mention_starts_a_thread_and_the_thread_continues_without_one(world: World) -> None:
    room = world.room()
    handle = world.start(rooms=[room])
    world.joined(room)

    asked = world.alice.say(room, "what is up?", mention=world.bot.user_id)
    world.wait_texts(room, asked, ["echo: what is up?"])
    assert world.texts(room) == []  # nothing in the room's main timeline
    session = f"matrix:{room[1:].replace('_', '_5F')}:{asked[1:].replace('_', '_5F')}"
    users = [m for m in handle.transcript(session) if m["role"] == "user"]
    assert [m.get("user") for m in users] == [world.alice.user_id]

    # In the thread, no mention needed; outside it, a message without one gets no turn.
    world.alice.say(room, "and then?", thread=asked)
    world.wait_texts(room, asked, ["echo: what is up?", "echo: and then?"])
    world.alice.say(room, "just chatting")
    marker = world.alice.say(room, "still here", mention=world.bot.user_id)
    world.wait_texts(room, marker, ["echo: still here"])
    assert world.texts(room) == []
    sessions = {s["id"] for s in handle.http.get("/api/sessions").json()}
    assert sessions == {session, session.rsplit(":", 1)[0] + ":" + marker[1:].replace("_", "_5F")}

    # "Seen, working on it" is a read receipt (ephemeral), never a reaction in the room's history.
    def read_by_bot() -> set[str]:
        body = world.alice.call("GET", "/sync", params={"timeout": "0"})
        ephemeral = body["rooms"]["join"].get(room, {}).get("ephemeral", {}).get("events", [])
        return {
            event_id
            for e in ephemeral
            if e.get("type") == "m.receipt"
            for event_id, kinds in e["content"].items()
            if world.bot.user_id in (kinds.get("m.read") or {})
        }

    world.alice.wait_for("the bot's read receipt", read_by_bot)
    reactions = [
        e
        for e in world.alice.messages(room)
        if e.get("type") == "m.reaction" and e.get("sender") == world.bot.user_id
    ]
    assert reactions == [], "the bot reacted in the room's history"


def test_people_and_rooms_outside_the_allowlists_get_no_turn(world: World) -> None:
    allowed = world.room()
    world.start(rooms=[allowed], users=[world.alice.user_id])
    world.joined(allowed)
    world.alice.invite(allowed, world.mallory.user_id)
    world.mallory.join(allowed)
    ignored = world.mallory.say(allowed, "me too", mention=world.bot.user_id)
    answered = world.alice.say(allowed, "only me", mention=world.bot.user_id)
    world.wait_texts(allowed, answered, ["echo: only me"])
    assert world.replies(allowed, ignored) == []


def test_a_direct_chat_is_one_session(world: World) -> None:
    dm = world.alice.create_room(invite=[world.bot.user_id], direct=True)
    handle = world.start(rooms=[], allow_dms=True)
    world.joined(dm)
    world.alice.say(dm, "psst")
    world.wait_texts(dm, None, ["echo: psst"])
    world.alice.say(dm, "again")
    world.wait_texts(dm, None, ["echo: psst", "echo: again"])
    [session] = [s["id"] for s in handle.http.get("/api/sessions").json()]
    assert session.count(":") == 1  # matrix:<room>, no thread


# -- invites and encryption ---------------------------------------------------------------------------


def test_invites_are_accepted_by_rule_and_others_rejected_saying_why(world: World) -> None:
    allowed = world.room()
    world.start(rooms=[allowed])
    world.joined(allowed)
    other = world.room()  # made after the start: an invite arriving while the bot syncs
    world.alice.wait_for(
        "the invite to be rejected", lambda: world.alice.members(other).get(world.bot.user_id) == "leave"
    )
    [rejection] = [
        e
        for e in world.alice.messages(other)
        if e["type"] == "m.room.member"
        and e["state_key"] == world.bot.user_id
        and e["content"]["membership"] == "leave"
    ]
    assert "not in its allowlist (matrix.channels)" in rejection["content"]["reason"]


def test_an_encrypted_room_is_refused_with_a_message(world: World) -> None:
    secret = world.room(encrypted=True)
    world.start(rooms=[secret])
    world.alice.wait_for(
        "the bot to leave the encrypted room",
        lambda: world.alice.members(secret).get(world.bot.user_id) == "leave",
    )
    said = [m["content"]["body"] for m in shown_messages(world.alice.messages(secret), world.bot.user_id)]
    assert len(said) == 1 and "end-to-end encrypted" in said[0] and "netclaw does not read" in said[0]


# -- rendering --------------------------------------------------------------------------------------


def test_a_streamed_reply_ends_as_one_edited_message(world: World, scripted: ScriptedOpenAIThread) -> None:
    text = " ".join(f"word{i}" for i in range(120))
    scripted.enqueue(Reply(text=text, chunk_size=12, chunk_delay_s=0.05))  # ~2.5 s of streaming
    room = world.room()
    world.start(rooms=[room])
    world.joined(room)
    asked = world.alice.say(room, "stream it", mention=world.bot.user_id)
    world.wait_texts(room, asked, [text])
    [reply] = world.replies(room, asked)
    assert reply["edits"] >= 1, "the reply was not streamed by edits"
    first = reply["raw"]["content"]["body"]
    assert text.startswith(first) and first != text  # posted early, then edited to the whole


def test_a_long_reply_is_split_at_the_message_limit(world: World, scripted: ScriptedOpenAIThread) -> None:
    paragraphs = [" ".join(f"p{p}w{w}" for w in range(200)) for p in range(10)]
    long = "\n\n".join(paragraphs)
    assert len(long) > 2 * MESSAGE_LIMIT
    scripted.enqueue(Reply(text=long, chunk_size=2000))
    room = world.room()
    world.start(rooms=[room])
    world.joined(room)
    asked = world.alice.say(room, "write a lot", mention=world.bot.user_id)
    expected = split_message(long, MESSAGE_LIMIT)
    world.wait_texts(room, asked, expected)
    assert len(expected) >= 3 and all(len(t) <= MESSAGE_LIMIT for t in world.texts(room, asked))


# -- approvals ---------------------------------------------------------------------------------------


def test_an_approval_is_decided_by_a_reaction(world: World, scripted: ScriptedOpenAIThread) -> None:
    room = world.room()
    world.alice.invite(room, world.mallory.user_id)
    world.mallory.join(room)
    handle = world.start(
        rooms=[room],
        sections={"audiences": {"team": {"approve": ["current_time"], "approvers": [world.alice.user_id]}}},
    )
    world.joined(room)
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    asked = world.alice.say(room, "what time is it?", mention=world.bot.user_id)

    def prompt() -> dict[str, Any] | None:
        return next(
            (m for m in world.replies(room, asked) if "May I run current_time?" in m["content"]["body"]), None
        )

    shown = world.alice.wait_for("the approval prompt", prompt)
    assert "\N{THUMBS UP SIGN} to approve" in shown["content"]["body"]  # it says which reaction does what
    session = next(s["id"] for s in handle.http.get("/api/sessions").json())

    world.mallory.react(room, shown["event_id"], THUMBS_UP)  # not an approver
    world.alice.wait_for("the refusal", lambda: any("may not decide" in t for t in world.texts(room, asked)))
    assert handle.http.get(f"/api/sessions/{session}/approvals").json()  # still pending

    # The prompt carries its request: a reaction decides it after the adapter restarted too,
    # and the prompt people have (found again by its key) is edited to show the decision.
    adapter, io = world.adapter(handle), handle.daemon.io
    assert io is not None
    io.run(adapter.stop(), 30)
    io.run(adapter.start(), 30)
    world.alice.react(room, shown["event_id"], THUMBS_UP)
    world.alice.wait_for("the reply", lambda: "it is late" in world.texts(room, asked))
    results = [m for m in handle.transcript(session) if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"]

    def decided() -> list[str]:
        return [
            m["content"]["body"] for m in world.replies(room, asked) if m["event_id"] == shown["event_id"]
        ]

    world.alice.wait_for(
        "the prompt edited to show the decision",
        lambda: decided() == [f"current_time: approve by {world.alice.user_id.split(':')[0][1:]}"],
    )
    assert not [t for t in world.texts(room, asked) if t.startswith("May I run")]  # no second prompt


# -- files ----------------------------------------------------------------------------------------------


def test_files_both_ways(world: World, scripted: ScriptedOpenAIThread, tmp_path: Path) -> None:
    room = world.room()
    handle = world.start(rooms=[room], sections={"tools": {"workspace_dir": str(tmp_path / "ws")}})
    world.joined(room)
    url = world.alice.upload("notes.txt", b"the codename is bluebird\n", "text/plain")
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "report.csv", "content": "a,b\n1,2\n"})]),
        Reply(tool_calls=[ToolCallSpec("share_file", {"path": "report.csv"})]),
        Reply(text="Here is the report."),
    )
    root = world.alice.say(room, "read my notes, then make a report", mention=world.bot.user_id)
    world.alice.send(
        room,
        {
            "msgtype": "m.file",
            "body": "notes.txt",
            "url": url,
            "info": {"mimetype": "text/plain", "size": 25},
            "m.relates_to": {"rel_type": "m.thread", "event_id": root, "is_falling_back": True},
        },
    )
    world.alice.wait_for("the report", lambda: "Here is the report." in world.texts(room, root))

    def shared() -> list[dict[str, Any]]:
        return [m for m in world.replies(room, root) if m["content"].get("msgtype") == "m.file"]

    [file] = world.alice.wait_for("the shared file", shared)
    assert file["content"]["body"] == "report.csv"
    assert world.alice.download(file["content"]["url"]) == b"a,b\n1,2\n"
    # The person's file reached the model (a later turn in the thread, with the file in it).
    world.alice.wait_for("the file's turn", lambda: any("bluebird" in str(r) for r in scripted.requests))
    assert handle is not None


# -- redelivery -----------------------------------------------------------------------------------------


def test_a_replayed_sync_is_not_answered_twice(world: World) -> None:
    room = world.room()
    handle = world.start(rooms=[room])
    adapter = world.adapter(handle)
    world.joined(room)
    before = adapter.since
    assert before is not None
    asked = world.alice.say(room, "once", mention=world.bot.user_id)
    world.wait_texts(room, asked, ["echo: once"])

    # The adapter starts again from a position before that message (as after a crash that
    # lost the saved position): the homeserver sends it again; it is admitted once.
    io = handle.daemon.io
    assert io is not None
    io.run(adapter.stop(), 30)
    world.bot.call("PUT", f"/user/{world.bot.user_id}/account_data/org.netclaw.sync", json={"since": before})
    io.run(adapter.start(), 30)
    world.alice.say(room, "twice?", thread=asked)
    world.wait_texts(room, asked, ["echo: once", "echo: twice?"])
    assert world.texts(room, asked) == ["echo: once", "echo: twice?"]


def test_the_first_start_answers_no_history(world: World) -> None:
    room = world.room()
    world.alice.wait_for("nothing", lambda: True)
    # The bot joins by hand before netclaw ever ran; people spoke meanwhile.
    world.bot.join(room)
    old = world.alice.say(room, "old question", mention=world.bot.user_id)
    handle = world.start(rooms=[room])
    new = world.alice.say(room, "new question", mention=world.bot.user_id)
    world.wait_texts(room, new, ["echo: new question"])
    assert world.replies(room, old) == []
    assert handle is not None


# -- doctor -----------------------------------------------------------------------------------------------


def test_the_doctor_probe_logs_in_and_names_a_bad_token(world: World) -> None:
    room = world.room()
    handle = world.start(rooms=[room])
    io = handle.daemon.io
    assert io is not None
    said = io.run(world.adapter(handle).probe(), 30)
    assert said == f"logged in to {world.synapse.url} as {world.bot.user_id}"
    with pytest.raises(MatrixApiError, match="rejected the access token in MATRIX_ACCESS_TOKEN"):
        asyncio.run(probe_whoami(world.synapse.url, "not-a-token", "MATRIX_ACCESS_TOKEN"))
