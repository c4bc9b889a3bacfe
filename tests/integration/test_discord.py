"""The Discord adapter against the real daemon (gateway, sessions, journal, scripted provider).

Three levels:

- most tests: platform calls go to :class:`FakeDiscordPort`, inbound messages are fed as
  normalised :class:`DiscordMessage` s (thread ↔ session, gating, rendering, retries);
- the discord.py side: real ``discord.Message`` objects on a real (never logged-in) client
  state, normalised and dispatched through the client's own ``on_message``;
- end to end: the daemon's own wiring runs the real client and port against
  :class:`FakeDiscordServer` (REST + gateway websocket on loopback).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from adapters.chat import MUST_DELIVER, Button, Conversation, retry_verdict, split_message
from adapters.discord_bot import (
    DiscordAdapter,
    DiscordApiError,
    DiscordAttachment,
    DiscordMessage,
    rate_limited,
    thread_name,
)
from adapters.discord_bot._client import NetclawClient, normalise, translate_error
from netclaw.errors import AdapterError
from netclaw.retry import with_retries
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.discord_port import FakeDiscordPort, FakeDiscordServer
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

ALLOWED = "100"
OTHER_CHANNEL = "200"
ALICE = "42"
MALLORY = "43"
BOT_ID = 999
EYES = "\N{EYES}"

_ids = itertools.count(5001)


def msg(text: str = "hello", **fields: Any) -> DiscordMessage:
    values: dict[str, Any] = {
        "message_id": str(next(_ids)),
        "channel_id": ALLOWED,
        "author_id": ALICE,
        "text": text,
        "mentioned": True,
    }
    values.update(fields)
    return DiscordMessage(**values)


class Bot:
    """A daemon, a DiscordAdapter on its I/O loop, and the fake Discord behind it."""

    def __init__(self, handle: DaemonHandle, **adapter_options: Any) -> None:
        self.handle = handle
        self.fake = FakeDiscordPort()
        daemon = handle.daemon
        assert daemon.gateway is not None and daemon.io is not None
        self.io = daemon.io
        self.adapter = DiscordAdapter(daemon.settings, daemon.gateway.chat, port=self.fake, **adapter_options)
        self.run(self.adapter.start())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.io.run(coro, 30)

    def feed(self, message: DiscordMessage) -> str | None:
        result: str | None = self.run(self.adapter.handle(message))
        return result

    def start_thread(self, text: str = "hello", **fields: Any) -> tuple[str, str]:
        """A mention in the allowed channel; returns (thread id, session id) once replied."""
        sid = self.feed(msg(text, **fields))
        assert sid is not None
        thread = self.fake.threads[-1]
        assert sid == f"discord:{thread.id}"
        self.wait_idle(thread.id)
        return thread.id, sid

    def wait_idle(self, channel_id: str, replies: int = 1) -> None:
        """Until ``replies`` messages are in the channel and no message wears the 👀 any more."""
        self.fake.wait_for(
            lambda: len(self.fake.texts(channel_id)) >= replies and not self.fake.reactions,
            what=f"{replies} repl(ies) in {channel_id}",
        )

    def following(self) -> list[str]:
        async def read() -> list[str]:
            return self.adapter.following()

        result: list[str] = self.run(read())
        return result

    def stop_session(self, session_id: str) -> None:
        """The session's actor stops under us (as in a crash): its streams end."""
        manager = self.handle.daemon.manager
        assert manager is not None
        ref = manager.ref_of(session_id)
        assert ref is not None
        ref.stop()

    def sessions(self) -> list[str]:
        response = self.handle.http.get("/api/sessions")
        response.raise_for_status()
        return [s["id"] for s in response.json()]


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)


@pytest.fixture
def start_bot(start_daemon: Callable[..., DaemonHandle]) -> Iterator[Callable[..., Bot]]:
    bots: list[Bot] = []

    def start(*, adapter_options: dict[str, Any] | None = None, **discord_config: Any) -> Bot:
        config = {"enabled": True, "channels": [ALLOWED], **discord_config}
        bot = Bot(start_daemon(discord=config), **(adapter_options or {}))
        bots.append(bot)
        return bot

    yield start
    for bot in bots:  # before the daemons stop (this fixture tears down first)
        bot.run(bot.adapter.stop())


# -- thread ↔ session ---------------------------------------------------------------------------


def test_mention_in_allowed_channel_starts_a_thread_session(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot()
    first = msg("What is up today?", message_id="7001")
    sid = bot.feed(first)

    assert len(bot.fake.threads) == 1
    thread = bot.fake.threads[0]
    assert (thread.channel_id, thread.message_id, thread.name) == (ALLOWED, "7001", "What is up today?")
    assert sid == f"discord:{thread.id}"
    bot.wait_idle(thread.id)
    assert bot.fake.texts(thread.id) == ["echo: What is up today?"]
    assert bot.fake.texts(ALLOWED) == []  # nothing is posted in the channel itself

    user = [m for m in bot.handle.transcript(sid) if m["role"] == "user"]
    assert [(m["content"], m.get("user")) for m in user] == [("What is up today?", ALICE)]
    # 👀 on the message while its turn ran, gone after it
    assert ("add", ALLOWED, "7001", EYES) in bot.fake.reaction_log
    assert ("remove", ALLOWED, "7001", EYES) in bot.fake.reaction_log
    assert thread.id in bot.fake.typing_in


def test_follow_up_in_the_thread_continues_without_a_mention(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot()
    thread_id, sid = bot.start_thread("first question")

    again = bot.feed(msg("and then?", channel_id=thread_id, parent_id=ALLOWED, mentioned=False))
    assert again == sid
    bot.wait_idle(thread_id, replies=2)
    assert bot.fake.texts(thread_id) == ["echo: first question", "echo: and then?"]
    assert len(bot.fake.threads) == 1
    users = [m["content"] for m in bot.handle.transcript(sid) if m["role"] == "user"]
    assert users == ["first question", "and then?"]

    # A redelivered message (same Discord id) is not a second turn.
    replay = msg("and then?", channel_id=thread_id, parent_id=ALLOWED, mentioned=False, message_id="7999")
    assert bot.feed(replay) == sid
    bot.wait_idle(thread_id, replies=3)
    assert bot.feed(replay) is None
    # The session takes its input in order: once a later message is answered, a turn the
    # replay would have started has run.
    bot.feed(msg("one more", channel_id=thread_id, parent_id=ALLOWED, mentioned=False, message_id="8000"))
    bot.wait_idle(thread_id, replies=4)
    assert bot.fake.texts(thread_id)[2:] == ["echo: and then?", "echo: one more"]


def test_thread_name_is_the_first_words_within_100_characters() -> None:
    assert thread_name("  hello\n\nworld  ") == "hello world"
    long = thread_name("word " * 60)
    assert len(long) == 100 and long.endswith("\N{HORIZONTAL ELLIPSIS}")
    assert thread_name("   ") == "netclaw"


# -- gating ---------------------------------------------------------------------------------------


def test_messages_that_get_no_turn(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot(users=[ALICE])
    ignored = {
        "no mention outside a thread": msg(mentioned=False),
        "channel not allowed": msg(channel_id=OTHER_CHANNEL),
        "user not allowed": msg(author_id=MALLORY),
        "DM with allow_dms off": msg(channel_id="300", is_dm=True),
        "our own message": msg(from_self=True, from_bot=True),
        "another bot": msg(author_id="555", from_bot=True),
        "a thread that is no session, no mention": msg(channel_id="4444", parent_id=ALLOWED, mentioned=False),
        "a thread in a channel not allowed": msg(channel_id="4445", parent_id=OTHER_CHANNEL),
        "a bare mention without text": msg(""),
    }
    for why, message in ignored.items():
        assert bot.feed(message) is None, why
    assert bot.fake.calls == []
    assert bot.sessions() == []


def test_a_known_thread_still_obeys_the_allowlists(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot(users=[ALICE])
    thread_id, _ = bot.start_thread()
    calls = len(bot.fake.calls)
    assert bot.feed(msg("me too", channel_id=thread_id, parent_id=ALLOWED, author_id=MALLORY)) is None
    assert bot.feed(msg("bot talk", channel_id=thread_id, parent_id=ALLOWED, from_bot=True)) is None
    assert len(bot.fake.calls) == calls


def test_direct_messages_when_allowed(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot(allow_dms=True)
    sid = bot.feed(msg("psst", channel_id="300", is_dm=True, mentioned=False))
    assert sid == "discord:300"
    bot.wait_idle("300")
    assert bot.fake.texts("300") == ["echo: psst"]
    assert bot.fake.threads == []


def test_require_mention_off_starts_a_thread_for_any_message(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot(require_mention=False)
    sid = bot.feed(msg("no mention needed", mentioned=False))
    assert sid is not None and len(bot.fake.threads) == 1


# -- rendering ------------------------------------------------------------------------------------


def test_a_long_reply_is_split_into_discord_sized_messages(
    start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread
) -> None:
    paragraphs = [" ".join(f"p{p}w{w}" for w in range(150)) for p in range(6)]
    long = "\n\n".join(paragraphs) + "\n\n```python\n" + "x = 1\n" * 300 + "```"
    assert len(long) > 6000
    scripted.enqueue(Reply(text=long, chunk_size=700))
    bot = start_bot()
    sid = bot.feed(msg("write a lot"))
    assert sid is not None
    thread_id = bot.fake.threads[0].id
    expected = split_message(long, 2000)
    bot.fake.wait_for(lambda: bot.fake.texts(thread_id) == expected, what="the split reply")
    assert len(expected) >= 4
    assert all(len(text) <= 2000 for text in bot.fake.texts(thread_id))
    bot.wait_idle(thread_id, replies=len(expected))


def test_streaming_edits_are_throttled(start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread) -> None:
    interval = 0.4
    text = " ".join(f"word{i}" for i in range(100))  # ~690 characters
    scripted.enqueue(Reply(text=text, chunk_size=10, chunk_delay_s=0.025))  # ~1.75 s of streaming
    bot = start_bot(adapter_options={"edit_interval_s": interval})
    started = time.monotonic()
    sid = bot.feed(msg("stream it"))
    assert sid is not None
    thread_id = bot.fake.threads[0].id
    bot.fake.wait_for(lambda: bot.fake.texts(thread_id) == [text], what="the streamed reply")
    bot.wait_idle(thread_id)
    elapsed = time.monotonic() - started

    [message] = bot.fake.in_channel(thread_id)
    assert bot.fake.count("post") == 1  # one message, then edits
    assert len(message.text) < 2000
    edits = [at for at, _ in message.edits]
    assert 2 <= len(edits) <= elapsed / interval + 2, (len(edits), elapsed)
    streamed = [message.sent_at, *edits[:-1]]  # the last edit is the final text: not throttled
    gaps = [b - a for a, b in itertools.pairwise(streamed)]
    assert all(gap >= interval - 0.05 for gap in gaps), gaps
    assert message.edits[-1][1] == text


def test_rate_limited_calls_are_retried(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot()
    bot.fake.fail("create_thread", rate_limited(0.05))
    bot.fake.fail("post", rate_limited(0.05), rate_limited(0.05))
    thread_id, _ = bot.start_thread("despite limits")
    assert bot.fake.texts(thread_id) == ["echo: despite limits"]
    assert [op for op, _ in bot.fake.failures] == ["create_thread", "post", "post"]
    assert bot.fake.count("create_thread") == 2
    assert len(bot.fake.threads) == 1


def test_a_send_whose_answer_was_lost_is_not_posted_twice(
    start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread
) -> None:
    scripted.enqueue(Reply(text="only once, please", chunk_size=4, chunk_delay_s=0.1))
    bot = start_bot()
    bot.fake.lose_answer("post", DiscordApiError("timed out", transient=True))
    sid = bot.feed(msg("say it once"))
    assert sid is not None
    thread_id = bot.fake.threads[0].id
    bot.wait_idle(thread_id)
    # The first streamed words were posted, but the answer got lost; the final text went out
    # again with the same nonce, Discord handed back that message, and it was edited.
    assert [op for op, _ in bot.fake.failures] == ["post"]
    assert bot.fake.count("post") == 2
    assert bot.fake.texts(thread_id) == ["only once, please"]


def test_a_permanent_failure_is_reported_not_retried(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot()
    bot.fake.fail("create_thread", DiscordApiError("403: Missing Permissions", status=403))
    assert bot.feed(msg("make a thread")) is None
    assert bot.fake.count("create_thread") == 1
    [note] = bot.fake.texts(ALLOWED)  # told in the channel, since there is no thread
    assert "could not start a thread" in note and "403" in note
    assert bot.sessions() == []


async def test_retries_wait_as_long_as_discord_asks() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    outcomes: list[Any] = [rate_limited(2.5), DiscordApiError("502", status=502, transient=True), "ok"]

    async def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return str(outcome)

    policy = MUST_DELIVER
    result = await with_retries(
        call, classify=retry_verdict, policy=policy, what="t", sleep=sleep, rand=lambda: 1.0
    )
    assert result == "ok"
    assert waits == [2.5, policy.base_delay_s * 2]  # Discord's retry_after, then backoff

    async def forbidden() -> str:
        raise DiscordApiError("403", status=403)

    with pytest.raises(DiscordApiError, match="403"):
        await with_retries(forbidden, classify=retry_verdict, policy=policy, what="t", sleep=sleep)
    assert len(waits) == 2  # a permanent error is not retried


# -- subscriptions --------------------------------------------------------------------------------


def test_idle_renderer_lets_go_and_the_next_message_subscribes_again(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot(adapter_options={"release_after_s": 0.3})
    thread_id, sid = bot.start_thread("first")
    bot.fake.wait_for(lambda: sid not in bot.following(), what="the subscription to be released")
    assert bot.feed(msg("second", channel_id=thread_id, parent_id=ALLOWED, mentioned=False)) == sid
    bot.wait_idle(thread_id, replies=2)
    assert bot.fake.texts(thread_id) == ["echo: first", "echo: second"]


def test_a_stream_closed_mid_turn_is_subscribed_again(
    start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread
) -> None:
    scripted.enqueue(Reply(text="never shown", delay_s=0.8))
    bot = start_bot()
    sid = bot.feed(msg("take your time"))
    assert sid is not None
    thread_id = bot.fake.threads[0].id
    bot.fake.wait_for(lambda: scripted.requests, what="the provider call")
    bot.stop_session(sid)  # it restarts from its journal and resumes the turn
    bot.wait_idle(thread_id)
    assert bot.fake.texts(thread_id) == ["echo: take your time"]


def test_a_gateway_reconnect_resubscribes_a_silent_session(
    start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread
) -> None:
    scripted.enqueue(Reply(text="never shown", delay_s=0.8))
    bot = start_bot()
    assert bot.adapter.renderer is not None
    bot.adapter.renderer.options = replace(bot.adapter.renderer.options, max_revives=0)  # it gives up at once
    sid = bot.feed(msg("long job"))
    assert sid is not None
    thread_id = bot.fake.threads[0].id
    bot.fake.wait_for(lambda: scripted.requests, what="the provider call")
    bot.stop_session(sid)
    bot.fake.wait_for(lambda: sid not in bot.following(), what="the stream to end")
    # The call the stopped session made has ended (cut off, or answered to nobody).
    bot.fake.wait_for(lambda: scripted.aborted or scripted.frames_sent, what="the cut-short call to end")
    assert bot.fake.texts(thread_id) == []  # silent: nobody listens

    async def reconnect() -> None:
        bot.adapter.connected(resumed=True)

    bot.run(reconnect())
    assert sid in bot.following()
    bot.wait_idle(thread_id)
    assert bot.fake.texts(thread_id) == ["echo: long job"]


# -- environment ----------------------------------------------------------------------------------


def test_missing_token_disables_the_adapter_while_the_daemon_runs(
    start_daemon: Callable[..., DaemonHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = start_daemon(discord={"enabled": True, "channels": [ALLOWED]})
    daemon = handle.daemon
    assert daemon.gateway is not None and daemon.io is not None
    adapter = DiscordAdapter(daemon.settings, daemon.gateway.chat)
    with pytest.raises(AdapterError, match="DISCORD_BOT_TOKEN"):
        adapter.check()
    assert adapter.status().state == "disabled"
    assert "DISCORD_BOT_TOKEN" in adapter.status().detail
    with pytest.raises(AdapterError, match="DISCORD_BOT_TOKEN"):
        daemon.io.run(adapter.start())

    custom = daemon.settings.model_copy(
        update={"discord": daemon.settings.discord.model_copy(update={"token_env": "MY_DISCORD"})}
    )
    monkeypatch.delenv("MY_DISCORD", raising=False)
    with pytest.raises(AdapterError, match="MY_DISCORD"):
        DiscordAdapter(custom, daemon.gateway.chat).check()
    monkeypatch.setenv("MY_DISCORD", "a-token")
    DiscordAdapter(custom, daemon.gateway.chat).check()  # token present, library importable

    health = handle.http.get("/healthz").json()  # the daemon's own wiring disabled it, too
    assert health["adapters"]["discord"]["state"] == "disabled"
    assert "DISCORD_BOT_TOKEN" in health["adapters"]["discord"]["detail"]
    reply = handle.send("cli:still-here", "are you there?", wait=True)
    assert reply.status_code == 200 and reply.json()["reply"] == "echo: are you there?"


# -- discord.py objects ---------------------------------------------------------------------------

USER = {"username": "alice", "discriminator": "0", "avatar": None, "global_name": "Alice"}
BOT_USER = {"id": str(BOT_ID), "username": "netclaw", "discriminator": "0", "avatar": None, "bot": True}


class World:
    """A discord.py client state with one server, one text channel, one thread and a DM."""

    def __init__(self, client: discord.Client) -> None:
        # discord.py's client state has no public way to seed a cache: set it up as READY would.
        state = client._connection  # noqa: SLF001
        bot_user: Any = BOT_USER
        state.user = discord.ClientUser(state=state, data=bot_user)
        self.state = state
        role = {"id": "888", "name": "netclaw", "permissions": "0", "tags": {"bot_id": str(BOT_ID)}}
        everyone = {"id": "1", "name": "@everyone", "permissions": "0"}
        guild_data: Any = {"id": "1", "name": "team", "roles": [everyone, role]}
        self.guild = discord.Guild(data=guild_data, state=state)
        state._add_guild(self.guild)  # noqa: SLF001
        channel_data: Any = {"id": ALLOWED, "type": 0, "name": "general", "position": 0, "guild_id": "1"}
        self.channel = discord.TextChannel(state=state, guild=self.guild, data=channel_data)
        self.guild._add_channel(self.channel)  # noqa: SLF001
        thread_meta = {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": "2025-01-01T00:00:00+00:00",
            "locked": False,
        }
        thread_data: Any = {
            "id": "4000",
            "type": 11,
            "name": "a thread",
            "parent_id": ALLOWED,
            "guild_id": "1",
            "owner_id": str(BOT_ID),
            "message_count": 1,
            "member_count": 2,
            "thread_metadata": thread_meta,
        }
        self.thread = discord.Thread(guild=self.guild, state=state, data=thread_data)
        self.guild._add_thread(self.thread)  # noqa: SLF001
        dm_data: Any = {"id": "300", "type": 1, "recipients": [{"id": ALICE, **USER}]}
        self.dm = discord.DMChannel(me=state.user, state=state, data=dm_data)

    def message(
        self, content: str, *, channel: Any = None, author: dict[str, Any] | None = None, **data: Any
    ) -> discord.Message:
        where = channel if channel is not None else self.channel
        payload: Any = {  # a MESSAGE_CREATE payload
            "id": str(next(_ids)),
            "channel_id": str(where.id),
            "author": author or {"id": ALICE, **USER},
            "content": content,
            "timestamp": "2025-01-01T00:00:00+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
        }
        if not isinstance(where, discord.DMChannel):
            payload["guild_id"] = "1"
        payload.update(data)
        return discord.Message(state=self.state, channel=where, data=payload)


def in_world(
    test: Callable[[World, NetclawClient], Coroutine[Any, Any, None]], bot: Bot | None = None
) -> None:
    """Run ``test`` on the daemon's loop (or a fresh one) with a never-logged-in client."""

    async def run() -> None:
        handler: Any = bot.adapter if bot is not None else SimpleNamespace()
        client = NetclawClient(handler)
        async with client:  # sets the client up on this loop without logging in
            await test(World(client), client)

    if bot is not None:
        bot.run(run())
    else:
        asyncio.run(run())


def test_normalise_real_discord_messages() -> None:
    async def check(world: World, client: NetclawClient) -> None:
        mention = world.message(f"<@{BOT_ID}> hi <@{MALLORY}>", mentions=[BOT_USER, {"id": MALLORY, **USER}])
        event = normalise(mention, BOT_ID)
        assert event == DiscordMessage(
            message_id=str(mention.id),
            channel_id=ALLOWED,
            author_id=ALICE,
            text="hi @Alice",
            mentioned=True,
            author_name="Alice",
        )

        in_thread = normalise(world.message("more", channel=world.thread), BOT_ID)
        assert in_thread is not None
        assert (in_thread.channel_id, in_thread.parent_id, in_thread.mentioned) == ("4000", ALLOWED, False)

        dm = normalise(world.message("psst", channel=world.dm), BOT_ID)
        assert dm is not None and dm.is_dm and dm.channel_id == "300"

        by_role = normalise(world.message("<@&888> help", mention_roles=["888"]), BOT_ID)
        assert by_role is not None and by_role.mentioned and by_role.text == "help"

        own = normalise(world.message("my reply", author=BOT_USER), BOT_ID)
        assert own is not None and own.from_self and own.from_bot
        webhook = normalise(world.message("hook", webhook_id="77"), BOT_ID)
        assert webhook is not None and webhook.from_bot

        attachment = {
            "id": "9",
            "filename": "log.txt",
            "size": 3,
            "url": "https://cdn/x/log.txt",
            "proxy_url": "p",
            "content_type": "text/plain; charset=utf-8",
        }
        with_file = normalise(world.message(f"<@{BOT_ID}> see", attachments=[attachment]), BOT_ID)
        assert with_file is not None and with_file.text == "see"  # the file travels as a file, not a link
        assert with_file.attachments == (
            DiscordAttachment("log.txt", "https://cdn/x/log.txt", "text/plain; charset=utf-8", 3),
        )

        assert normalise(world.message("", type=6), BOT_ID) is None  # "pinned a message"
        assert normalise(world.message("", type=21, channel=world.thread), BOT_ID) is None  # thread starter

    in_world(check)


def test_on_message_drives_the_adapter(start_bot: Callable[..., Bot]) -> None:
    bot = start_bot()

    async def chat(world: World, client: NetclawClient) -> None:
        client.dispatch("message", world.message(f"<@{BOT_ID}> real objects", mentions=[BOT_USER]))
        client.dispatch("message", world.message("no mention here"))
        client.dispatch(
            "message", world.message(f"<@{BOT_ID}> from me", author=BOT_USER, mentions=[BOT_USER])
        )
        # Until the three handlers are done (each dispatch is a task of discord.py's).
        handlers = [t for t in asyncio.all_tasks() if t.get_name() == "discord.py: on_message"]
        assert len(handlers) == 3, handlers
        await asyncio.wait_for(asyncio.gather(*handlers), 10)

    in_world(chat, bot)
    [thread] = bot.fake.threads
    assert thread.name == "real objects"
    bot.wait_idle(thread.id)
    assert bot.fake.texts(thread.id) == ["echo: real objects"]


def test_discord_py_errors_become_adapter_errors() -> None:
    def response(status: int, reason: str) -> Any:
        return SimpleNamespace(status=status, reason=reason)

    limited = translate_error(discord.RateLimited(2.5), "send a message")
    assert isinstance(limited, AdapterError)
    assert (limited.status, limited.retry_after, limited.transient) == (429, 2.5, True)

    forbidden = translate_error(
        discord.Forbidden(response(403, "Forbidden"), {"code": 50013, "message": "Missing Permissions"}),
        "create a thread",
    )
    assert (forbidden.status, forbidden.transient) == (403, False)
    assert "Missing Permissions" in str(forbidden) and "Create Public Threads" in str(forbidden)

    server = translate_error(discord.DiscordServerError(response(503, "Unavailable"), "down"), "edit")
    assert server.transient and server.status == 503

    login = translate_error(
        discord.LoginFailure("Improper token has been passed."), "log in", token_env="TOK"
    )
    assert "TOK" in str(login) and not login.transient

    intents = translate_error(discord.PrivilegedIntentsRequired(None), "connect")
    assert "Message Content" in str(intents)

    offline = translate_error(OSError("network unreachable"), "send a message")
    assert offline.transient


# -- the real client against a stand-in Discord ---------------------------------------------------


@pytest.fixture
def discord_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscordServer]:
    """Request it before start_daemon, so the daemon (and its client) stops first."""
    server = FakeDiscordServer(bot_id=str(BOT_ID), channel_id=ALLOWED).start()
    server.install(monkeypatch)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", server.token)
    yield server
    server.stop()


def adapter_health(handle: DaemonHandle) -> dict[str, str]:
    health: dict[str, str] = handle.http.get("/healthz").json()["adapters"]["discord"]
    return health


def test_the_daemon_runs_the_real_client_end_to_end(
    discord_server: FakeDiscordServer, start_daemon: Callable[..., DaemonHandle]
) -> None:
    server = discord_server
    handle = start_daemon(discord={"enabled": True, "channels": [ALLOWED]})
    assert adapter_health(handle) == {"state": "running"}
    assert server.identify is not None and server.identify["intents"] == 37377  # guilds, messages, content

    server.rate_limit_next_send(0.3)  # discord.py waits it out and retries by itself
    server.announce_threads = False  # no THREAD_CREATE: the client must look the thread up
    server.post_message(f"<@{BOT_ID}> hello from discord", mentions_bot=True)
    server.wait_for(lambda: bool(server.threads), what="a thread")
    thread = server.threads[0]
    assert (thread["name"], thread["parent_id"]) == ("hello from discord", ALLOWED)
    server.wait_for(
        lambda: server.bot_messages(thread["id"]) == ["echo: hello from discord"], what="the reply"
    )
    assert len(server.rate_limited) == 1
    assert handle.transcript(f"discord:{thread['id']}")[0]["content"] == "hello from discord"
    server.wait_for(lambda: [m for m, _, _ in server.reactions] == ["PUT", "DELETE"], what="the 👀 to go")

    server.post_message("and without a mention?", channel_id=thread["id"])
    server.wait_for(  # streamed: posted with its first words, then edited until whole
        lambda: server.bot_messages(thread["id"])[1:] == ["echo: and without a mention?"],
        what="the second reply",
    )
    assert ("GET", f"/channels/{thread['id']}") in server.requests  # looked up, then continued
    server.post_message("not for the bot")  # in the channel, no mention
    # A mention after it: once that one has its thread (a round trip to the server), the
    # message before it, which came first on the gateway, has been handled: it started none.
    server.post_message(f"<@{BOT_ID}> and this one is", mentions_bot=True)
    server.wait_for(lambda: len(server.threads) >= 2, what="the next mention's thread")
    assert [t["name"] for t in server.threads] == ["hello from discord", "and this one is"]


def test_a_reply_nobody_watched_is_posted_through_the_real_client(
    discord_server: FakeDiscordServer, start_daemon: Callable[..., DaemonHandle]
) -> None:
    """A reminder fires in a channel no renderer follows: the outbox posts the reply (the
    first connection must leave the outbox able to find the conversation)."""
    server = discord_server
    handle = start_daemon(discord={"enabled": True, "channels": [ALLOWED]})
    sid = f"discord:{ALLOWED}"
    answer = handle.http.post(
        f"/api/sessions/{sid}/reminders", json={"text": "check the deploy", "in_s": 0.2}
    )
    assert answer.status_code == 201, answer.text
    server.wait_for(lambda: bool(server.bot_messages(ALLOWED)), what="the reply in the channel")
    [posted] = server.bot_messages(ALLOWED)
    assert "check the deploy" in posted


def test_approval_buttons_and_a_press_through_the_real_client(
    discord_server: FakeDiscordServer,
    start_daemon: Callable[..., DaemonHandle],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = discord_server
    handle = start_daemon(discord={"enabled": True, "channels": [ALLOWED]})
    adapter = next(a for a in handle.daemon.adapters if isinstance(a, DiscordAdapter))
    assert adapter.renderer is not None and handle.daemon.io is not None
    buttons = [Button("approve", "Approve", "ap_1", "primary"), Button("deny", "Deny", "ap_1", "danger")]
    asked = handle.daemon.io.run(
        adapter.renderer.port.post_buttons(Conversation(ALLOWED), "May I run shell?", buttons, key="k1"), 10
    )
    [row] = server.messages[asked]["components"]
    assert [(b["custom_id"], b["style"]) for b in row["components"]] == [
        ("netclaw:approve:ap_1", 1),
        ("netclaw:deny:ap_1", 4),
    ]

    pressed = server.press_button(asked, "netclaw:deny:ap_1", user_id=MALLORY)
    server.wait_for(lambda: server.interaction_responses == [(pressed, 6)], what="the press acknowledged")
    # Nothing waits under "ap_1": the person who pressed is told so, ephemerally.
    server.wait_for(lambda: bool(server.followups), what="the ephemeral answer")
    [told] = server.followups
    assert told["ephemeral"] and "no longer pending" in told["content"]


def test_an_approval_decided_by_a_button_press_in_the_thread(
    discord_server: FakeDiscordServer,
    start_daemon: Callable[..., DaemonHandle],
    scripted: ScriptedOpenAIThread,
) -> None:
    server = discord_server
    handle = start_daemon(
        discord={"enabled": True, "channels": [ALLOWED]},
        audiences={"team": {"approve": ["current_time"], "approvers": [ALICE]}},
    )
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    server.post_message(f"<@{BOT_ID}> what time is it?", mentions_bot=True)
    server.wait_for(lambda: bool(server.threads), what="a thread")
    thread = server.threads[0]["id"]

    def asked() -> list[dict[str, Any]]:
        return [
            m for m in list(server.messages.values()) if m["channel_id"] == thread and m.get("components")
        ]

    server.wait_for(lambda: bool(asked()), what="the approval buttons")
    [message] = asked()
    assert "May I run current_time?" in message["content"]
    approve = next(
        b["custom_id"]
        for b in message["components"][0]["components"]
        if b["custom_id"].startswith("netclaw:approve:")
    )
    server.press_button(message["id"], approve, user_id=MALLORY)  # not an approver
    server.wait_for(lambda: bool(server.followups), what="the refusal")
    assert server.followups[0]["ephemeral"] and "may not decide" in server.followups[0]["content"]
    assert handle.http.get(f"/api/sessions/discord:{thread}/approvals").json()  # still pending

    server.press_button(message["id"], approve, user_id=ALICE)
    server.wait_for(lambda: "it is late" in server.bot_messages(thread), what="the reply")
    shown = server.messages[message["id"]]
    assert shown["content"].startswith("current_time: approve by")
    assert not shown.get("components")  # the buttons are gone
    results = [m for m in handle.transcript(f"discord:{thread}") if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"]


@pytest.mark.parametrize(
    ("problem", "expected"),
    [("bad token", "rejected the bot token in DISCORD_BOT_TOKEN"), ("intent off", "Message Content")],
)
def test_a_failing_connection_is_retried_and_spares_the_rest(
    discord_server: FakeDiscordServer,
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
    problem: str,
    expected: str,
) -> None:
    if problem == "bad token":
        monkeypatch.setenv("DISCORD_BOT_TOKEN", "not-the-token")
    else:
        discord_server.refuse_intents = True
    handle = start_daemon(discord={"enabled": True, "channels": [ALLOWED]})
    # The first attempt may still be connecting on a loaded machine: wait for its outcome.
    health = wait_until(
        lambda: (h := adapter_health(handle))["state"] != "starting" and h,
        timeout=30,
        what="the first attempt",
    )
    # Retried with backoff for as long as it fails; the daemon and the other channels go on.
    assert health["state"] == "retrying" and expected in health["detail"], health
    assert handle.http.get("/healthz").status_code == 503
    reply = handle.send("cli:fine", "still there?", wait=True)
    assert reply.status_code == 200 and reply.json()["reply"] == "echo: still there?"


# -- chat commands --------------------------------------------------------------------------------


def test_commands_in_a_thread_answer_without_a_turn(
    start_bot: Callable[..., Bot], scripted: ScriptedOpenAIThread
) -> None:
    bot = start_bot(users=[ALICE])
    thread_id, sid = bot.start_thread("hello")
    calls = len(scripted.requests)
    assert bot.feed(msg("/status", channel_id=thread_id, parent_id=ALLOWED, mentioned=False)) == sid
    bot.fake.wait_for(lambda: len(bot.fake.texts(thread_id)) == 2, what="the status notice")
    assert bot.fake.texts(thread_id)[1].startswith("Model scripted, ready")
    assert bot.feed(msg("!new", channel_id=thread_id, parent_id=ALLOWED, mentioned=False)) == sid
    bot.fake.wait_for(lambda: any("Started afresh" in t for t in bot.fake.texts(thread_id)), what="the reset")
    assert len(scripted.requests) == calls  # no model turn for commands
    # Only people allowed to talk may use them.
    assert bot.feed(msg("/new", channel_id=thread_id, parent_id=ALLOWED, author_id=MALLORY)) is None
    users = [m["content"] for m in bot.handle.transcript(sid) if m["role"] == "user"]
    assert users == ["hello"]


def test_a_schedule_delivered_to_a_channel_opens_a_thread_through_the_real_client(
    discord_server: FakeDiscordServer, start_daemon: Callable[..., DaemonHandle]
) -> None:
    import datetime as dt

    server = discord_server
    # Far enough ahead that a daemon started on a loaded machine still finds it in the
    # future (a config "at" already past when the scheduler reads it is not fired).
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).isoformat()
    target = {"channel": "discord", "to": ALLOWED}
    handle = start_daemon(
        discord={"enabled": True, "channels": [ALLOWED]},
        schedules={"digest": {"at": soon, "text": "Summarise the day.", "deliver": target}},
    )
    server.wait_for(lambda: bool(server.threads), what="a thread under the new message")
    thread = server.threads[0]
    assert thread["parent_id"] == ALLOWED
    [anchor] = [c for c in server.bot_messages(ALLOWED) if c.startswith("⏰ digest")]
    assert anchor == "⏰ digest: Summarise the day."
    server.wait_for(
        lambda: any("Summarise the day." in c for c in server.bot_messages(thread["id"])), what="the reply"
    )
    sid = f"discord:{thread['id']}"
    assert handle.transcript(sid)[0]["content"].startswith("[Scheduled reminder 'digest'")
    # Someone answers in the thread: the same session goes on.
    server.post_message("tell me more", channel_id=thread["id"])
    server.wait_for(lambda: "echo: tell me more" in server.bot_messages(thread["id"]), what="the follow-up")


def test_doctor_logs_in_to_discord(
    discord_server: FakeDiscordServer,
    scripted: ScriptedOpenAIThread,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from netclaw.cli import main
    from tests.conftest import settings_data

    config = tmp_path / "netclaw.json"
    data = settings_data(
        tmp_path / "data", scripted.base_url, discord={"enabled": True, "channels": [ALLOWED]}
    )
    data["gateway"]["port"] = 1  # nothing listens: the doctor reports the daemon as not running
    config.write_text(json.dumps(data))
    main(["doctor", "--config", str(config)])
    out = capsys.readouterr().out
    assert "[ok] adapter discord: logged in as" in out, out
    assert discord_server.identify is None  # logged in over REST only: no gateway connection

    monkeypatch.setenv("DISCORD_BOT_TOKEN", "not-the-token")
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] adapter discord: Discord rejected the bot token in DISCORD_BOT_TOKEN" in out, out
