"""The Mattermost adapter end to end: the real daemon (gateway, sessions, journal, scripted
provider), netclaw's Mattermost client, and the protocol fake of the server's REST API v4
and websocket (tests/fakes/mattermost_api.py) over HTTP on 127.0.0.1.

What the conformance kit does not already cover: a websocket dropped mid-stream (the
issue's "done when"), what was posted while the daemon was down or the socket away,
forged button presses, direct messages, the typing indicator and the reaction, a thread
the bot is called into, and the doctor's probe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pykka
import pytest

import adapters
from adapters.mattermost import MattermostAdapter
from adapters.mattermost._actions import action_key, signature
from adapters.mattermost._events import session_id_for
from netclaw.config import settings_model
from netclaw.daemon import Daemon
from netclaw.errors import AdapterError
from tests.conformance.rig import wait_for
from tests.conftest import DaemonHandle, settings_data
from tests.fakes.mattermost_api import FakeMattermost, FakeMattermostThread, Post
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

TOKEN_ENV = "MATTERMOST_BOT_TOKEN"
PUBLIC_URL = "http://127.0.0.1:1"


class World:
    """The fake server with a bot, alice and bob, an allowed channel, another channel and
    alice's direct message channel with the bot."""

    def __init__(self, fake: FakeMattermostThread) -> None:
        self.fake = fake

        def make(s: FakeMattermost) -> None:
            bot, self.token = s.add_user("netclaw", bot=True)
            self.bot = str(bot["id"])
            self.alice = str(s.add_user("alice")[0]["id"])
            self.bob = str(s.add_user("bob")[0]["id"])
            self.town = s.add_channel("town-square", [self.bot, self.alice, self.bob])
            self.other = s.add_channel("off-topic", [self.bot, self.alice])
            self.dm = s.add_channel(f"{self.bot}__{self.alice}", [self.bot, self.alice], kind="D")

        fake.read(make)

    def say(self, user: str, text: str, *, channel: str | None = None, root: str = "") -> Post:
        return self.fake.say(user, channel or self.town, text, root_id=root)

    def bot_posts(self, channel: str | None = None, root: str | None = None) -> list[Post]:
        def posts(s: FakeMattermost) -> list[Post]:
            return [
                Post(dict(p.data), list(p.shown))
                for p in s.posts_by(self.bot)
                if not p.deleted
                and (channel is None or p.data["channel_id"] == channel)
                and (root is None or p.data["root_id"] == root)
            ]

        return self.fake.read(posts)

    def texts(self, root: str, channel: str | None = None) -> list[str]:
        return [p.message for p in self.bot_posts(channel, root)]

    def bot_connected(self) -> bool:
        return self.fake.read(lambda s: any(sock.user_id == self.bot for sock in s.sockets))


StartBot = Callable[..., tuple[DaemonHandle, MattermostAdapter]]


@pytest.fixture
def world() -> Iterator[World]:
    with FakeMattermostThread() as fake:
        yield World(fake)


@pytest.fixture
def start_bot(
    world: World, tmp_path: Path, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StartBot]:
    """A daemon with Mattermost enabled against the fake (stopped by the test to restart)."""
    assert adapters.channel_named("mattermost") is not None
    monkeypatch.setenv(TOKEN_ENV, world.token)
    handles: list[DaemonHandle] = []

    def start(
        sections: dict[str, Any] | None = None, **mattermost: Any
    ) -> tuple[DaemonHandle, MattermostAdapter]:
        config = {
            "enabled": True,
            "url": world.fake.url,
            "actions_url": PUBLIC_URL,
            "channels": [world.town],
            **mattermost,
        }
        data = settings_data(tmp_path / "data", scripted.base_url, mattermost=config, **(sections or {}))
        daemon = Daemon(settings_model()(**data))
        daemon.start()
        handle = DaemonHandle(daemon)
        handles.append(handle)
        world.fake.read(lambda s: s.reach(daemon.base_url))
        adapter = next(a for a in daemon.adapters if isinstance(a, MattermostAdapter))
        wait_for(lambda: adapter.status().state == "running", f"the adapter running ({adapter.status()})")
        return handle, adapter

    yield start
    for handle in handles:
        handle.stop()
    survivors = pykka.ActorRegistry.get_all()
    pykka.ActorRegistry.stop_all()
    assert not survivors, f"actors survived daemon shutdown: {survivors}"


def user_texts(handle: DaemonHandle, session_id: str) -> list[str]:
    return [m["content"] for m in handle.transcript(session_id) if m["role"] == "user"]


# -- the websocket ------------------------------------------------------------------------------


def test_a_websocket_dropped_mid_stream_reconnects_and_the_reply_still_ends_as_one_post(
    start_bot: StartBot, world: World, scripted: ScriptedOpenAIThread
) -> None:
    """The issue's "done when": the server drops the bot's websocket while it edits its
    streaming post (and refuses it for a second); the reply goes on and ends as one post,
    the socket comes back, and a post made while it was away is read back and answered once."""
    _, adapter = start_bot()
    text = "streamed " + " ".join(f"word{i:03d}" for i in range(80))
    scripted.route("stream please", lambda body: Reply(text=text, chunk_size=20, chunk_delay_s=0.04))
    world.fake.read(lambda s: s.drop_on_patch(world.bot, refuse_s=1.0))
    root = world.say(world.alice, "@netclaw stream please").id

    wait_for(lambda: world.fake.read(lambda s: s.dropped_at), "the websocket dropped at the first edit")
    assert not world.bot_connected()
    away_post = world.say(world.alice, "@netclaw said while the socket was away")
    away = away_post.id

    wait_for(lambda: world.texts(root) == [text], f"the streamed reply in full (shown: {world.texts(root)})")
    wait_for(
        lambda: world.texts(away) == ["echo: said while the socket was away"],
        "the post made during the drop answered",
    )
    (post,) = world.bot_posts(root=root)
    shown = [t for _, t in post.shown]
    assert len(shown) >= 3 and shown[-1] == text  # posted, edited across the drop, finished
    assert all(text.startswith(t) for t in shown)  # one post growing, never a second one
    dropped = world.fake.read(lambda s: s.dropped_at[0])
    assert any(at > dropped for at, _ in post.shown)  # edits went on after the drop
    assert world.bot_connected() and adapter.reconnects >= 1
    connected = world.fake.read(lambda s: list(s.connected_at))
    assert len(connected) >= 2 and connected[1] > away_post.shown[0][0]  # it came back after the post
    asked = [r for r in scripted.requests if "said while the socket was away" in str(r["messages"])]
    assert len(asked) == 1


def test_a_gap_in_the_websockets_sequence_reads_back_the_post_it_lost(
    start_bot: StartBot, world: World
) -> None:
    start_bot()
    world.fake.read(lambda s: s.lose_next_event(world.bot))
    lost = world.say(world.alice, "@netclaw lost on the way").id
    after = world.say(world.alice, "@netclaw the next one").id  # its seq shows the gap
    wait_for(lambda: world.texts(after) == ["echo: the next one"], "the next post answered")
    wait_for(lambda: world.texts(lost) == ["echo: lost on the way"], "the lost post read back and answered")


def test_a_revoked_token_is_said_so_not_retried_as_a_lost_connection(
    start_bot: StartBot, world: World
) -> None:
    _, adapter = start_bot()
    world.fake.read(lambda s: s.revoke(world.token))
    world.fake.drop_sockets(world.bot)
    wait_for(lambda: adapter.status().state == "failed", f"the adapter failed ({adapter.status()})")
    assert "rejected the bot token in MATTERMOST_BOT_TOKEN" in adapter.status().detail
    # ... which the supervisor sees as a channel to start again with backoff (adapters/supervisor.py).


def test_posts_made_while_the_daemon_was_down_are_answered_once_after_it_starts(
    start_bot: StartBot, world: World
) -> None:
    history = world.say(world.alice, "@netclaw said before netclaw ever ran").id
    handle, _ = start_bot()
    first = world.say(world.alice, "@netclaw first").id
    wait_for(lambda: world.texts(first) == ["echo: first"], "the first reply")
    handle.stop()

    world.say(world.alice, "more while away", root=first)
    later = world.say(world.bob, "@netclaw a new thread while away").id
    handle, _ = start_bot()
    wait_for(lambda: world.texts(first) == ["echo: first", "echo: more while away"], "the reply read back")
    wait_for(lambda: world.texts(later) == ["echo: a new thread while away"], "the new thread read back")
    # The very first start answered no history; nothing was answered twice.
    assert world.texts(history) == []
    assert user_texts(handle, session_id_for(world.town, first)) == ["first", "more while away"]
    assert world.fake.read(lambda s: s.preferences.get((world.bot, "netclaw", "position")))


# -- approvals ----------------------------------------------------------------------------------


def test_a_press_without_a_valid_signed_context_is_refused_and_decides_nothing(
    start_bot: StartBot, world: World, scripted: ScriptedOpenAIThread
) -> None:
    roles = {
        "roles": {
            "gated": {
                "members": [f"mattermost:{world.alice}"],
                "approve_tools": ["current_time"],
                "approve": True,
            }
        }
    }
    handle, _ = start_bot(roles)
    calls = iter([Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late")])
    scripted.route("what time", lambda body: next(calls))
    root = world.say(world.alice, "@netclaw what time is it").id
    session = session_id_for(world.town, root)

    def prompt() -> Post | None:
        return next((p for p in world.bot_posts(root=root) if p.actions()), None)

    asked = wait_for(prompt, "the approval prompt")
    assert asked is not None
    (pending,) = handle.http.get(f"/api/sessions/{session}/approvals").json()
    approval = pending["id"]
    key = action_key(world.token)
    press = {
        "user_id": world.alice,
        "user_name": "alice",
        "channel_id": world.town,
        "post_id": asked.id,
        "type": "button",
        "context": {"netclaw": "netclaw-1", "action": "approve", "value": approval, "sig": "0" * 64},
    }
    url = f"{handle.base_url}/mattermost/actions"
    forged = httpx.post(url, json=press)
    assert forged.status_code == 403 and "does not verify" in forged.json()["message"]
    unsigned = httpx.post(url, json={**press, "context": {}})
    assert unsigned.status_code == 403 and "no netclaw context" in unsigned.json()["message"]
    # A context signed for another channel (or another action) does not carry over.
    elsewhere = {**press["context"], "sig": signature(key, world.other, approval, "approve")}  # type: ignore[dict-item]
    assert httpx.post(url, json={**press, "context": elsewhere}).status_code == 403
    deny_as_approve = {**press["context"], "sig": signature(key, world.town, approval, "deny")}  # type: ignore[dict-item]
    assert httpx.post(url, json={**press, "context": deny_as_approve}).status_code == 403
    assert [a["id"] for a in handle.http.get(f"/api/sessions/{session}/approvals").json()] == [approval]

    status, _ = world.fake.press(world.alice, asked.id, "approve")  # through the server: decides
    assert status == 200
    wait_for(lambda: "it is late" in world.texts(root), "the turn finished")
    decided = next(p for p in world.bot_posts(root=root) if p.id == asked.id)
    assert decided.actions() == [] and "approve" in decided.message  # the buttons gone
    assert handle.http.get(f"/api/sessions/{session}/approvals").json() == []


# -- people and places --------------------------------------------------------------------------


def test_a_direct_message_is_one_session_answered_with_typing_and_the_reaction(
    start_bot: StartBot, world: World
) -> None:
    handle, _ = start_bot(allow_dms=True)
    said = world.say(world.alice, "hello in private", channel=world.dm)
    wait_for(lambda: world.texts("", world.dm) == ["echo: hello in private"], "the answer at the top level")
    world.say(world.alice, "and again", channel=world.dm)
    wait_for(lambda: len(world.texts("", world.dm)) == 2, "the second answer")
    assert user_texts(handle, session_id_for(world.dm)) == ["hello in private", "and again"]
    typing = world.fake.read(lambda s: list(s.typing))
    assert {"user_id": world.bot, "channel_id": world.dm, "parent_id": ""} in typing
    calls = world.fake.read(lambda s: [(c.method, c.path) for c in s.calls])
    assert ("POST", "/api/v4/reactions") in calls
    wait_for(
        lambda: (
            ("DELETE", f"/api/v4/users/{world.bot}/posts/{said.id}/reactions/eyes")
            in world.fake.read(lambda s: [(c.method, c.path) for c in s.calls])
        ),
        "the reaction taken off once the turn ended",
    )


def test_a_mention_in_a_thread_people_started_reads_what_they_said_and_pings_no_channel(
    start_bot: StartBot, world: World, scripted: ScriptedOpenAIThread
) -> None:
    start_bot()
    scripted.route("what do you think", lambda body: Reply(text="@channel I think so"))
    root = world.say(world.bob, "we should ship on friday").id
    world.say(world.alice, "@netclaw what do you think?", root=root)
    wait_for(lambda: world.texts(root), "the answer in the thread")
    (request,) = [r for r in scripted.requests if "what do you think" in str(r["messages"])]
    assert "we should ship on friday" in str(request["messages"])
    assert world.texts(root) == ["@\u200bchannel I think so"]  # no channel-wide ping
    # A channel not in the allowlist gets nothing, mention or not.
    ignored = world.say(world.alice, "@netclaw over here?", channel=world.other).id
    world.say(world.alice, "@netclaw back here", root=root)
    wait_for(lambda: len(world.texts(root)) == 2, "the later answer")
    assert world.texts(ignored, world.other) == []


def test_the_doctor_probe_says_who_the_token_logs_in_as(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = settings_data(
        tmp_path / "data",
        "http://127.0.0.1:1",
        mattermost={"enabled": True, "url": world.fake.url, "actions_url": PUBLIC_URL},
    )
    settings = settings_model()(**data)
    adapter = MattermostAdapter(settings, cast(Any, None))
    monkeypatch.setenv(TOKEN_ENV, world.token)
    said = asyncio.run(adapter.probe())
    assert said == f"logged in to {world.fake.url} as @netclaw (id {world.bot})"
    monkeypatch.setenv(TOKEN_ENV, "not-a-token")
    with pytest.raises(AdapterError, match="rejected the bot token in MATTERMOST_BOT_TOKEN"):
        asyncio.run(adapter.probe())
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(AdapterError, match="MATTERMOST_BOT_TOKEN is not set"):
        adapter.check()
