"""Fakes for the Discord adapter's two sides of the port.

:class:`FakeDiscordPort` replaces the port: the recording chat port of
``tests/fakes/chat_port.py`` with Discord's limits, plus threads. Failures are scriptable
per operation: ``fail("post", rate_limited(0.05))`` makes the next ``post`` raise that
error (before doing anything), as the real port does when Discord answers 429.

:class:`FakeDiscordServer` stands in for Discord itself behind the *real* port: a small REST
API (``/api/v10``: login, application info, threads, messages and channel history,
reactions, typing, interaction callbacks; attachments on a CDN path) and a gateway websocket (HELLO → IDENTIFY → READY + GUILD_CREATE,
then the dispatches a test pushes: messages, button presses, a message dispatched again),
on its own loop thread. As on Discord, a thread started from a message has the message's id,
and a second thread from the same message is refused (400, code 160004). ``shown`` keeps
every text each bot message showed, with when.
:meth:`FakeDiscordServer.install` points discord.py at it.
Only what netclaw's client uses is implemented.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from adapters.discord_bot import MESSAGE_LIMIT, DiscordApiError, DiscordMessage
from tests.fakes._loop_thread import run_until_stopped
from tests.fakes.chat_port import FakeChatPort


@dataclass(frozen=True)
class FakeThread:
    id: str
    channel_id: str
    message_id: str
    name: str


class FakeDiscordPort(FakeChatPort):
    """The Discord port: the chat port (2,000-character messages, a 25-character nonce as
    the idempotency key), plus threads."""

    platform = "discord"
    message_limit = MESSAGE_LIMIT
    error_type = DiscordApiError

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[FakeThread] = []
        self.earlier: dict[str, list[DiscordMessage]] = {}  # channel -> its history, oldest first
        self.attachments: dict[str, bytes] = {}  # url -> bytes

    async def history(self, channel_id: str, before: str, limit: int) -> list[DiscordMessage]:
        self._enter("history")
        found = [m for m in self.earlier.get(channel_id, []) if int(m.message_id) < int(before)]
        return found[-limit:] if limit > 0 else []

    async def download(self, url: str, max_bytes: int) -> bytes:
        self._enter("download")
        data = self.attachments.get(url)
        if data is None:
            raise DiscordApiError(f"no attachment at {url}", status=404)
        if len(data) > max_bytes:
            raise DiscordApiError(f"the attachment is larger than {max_bytes:,} bytes")
        return data

    async def create_thread(self, channel_id: str, message_id: str, name: str) -> str:
        self._enter("create_thread")
        assert 1 <= len(name) <= 100, name
        with self._lock:
            thread = FakeThread(str(next(self._ids)), channel_id, message_id, name)
            self.threads.append(thread)
        return thread.id


# -- a stand-in for Discord itself ------------------------------------------------------------

TIMESTAMP = "2025-01-01T00:00:00+00:00"


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py parses a body as JSON only for exactly "application/json" (no charset).
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def user_payload(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": name,
        "discriminator": "0",
        "avatar": None,
        "global_name": name,
        "bot": bot,
    }


class FakeDiscordServer:
    """See the module docstring. One guild ``guild_id`` with one text channel ``channel_id``."""

    def __init__(
        self,
        *,
        token: str = "good-token",
        bot_id: str = "999",
        guild_id: str = "1",
        channel_id: str = "100",
        refuse_intents: bool = False,
        announce_threads: bool = True,
    ) -> None:
        self.token = token
        self.bot_id = bot_id
        self.guild_id = guild_id
        self.channel_id = channel_id
        self.refuse_intents = refuse_intents  # close the gateway with 4014 after IDENTIFY
        self.announce_threads = announce_threads  # THREAD_CREATE on the gateway (else: fetched)
        self.bot = user_payload(bot_id, "netclaw", bot=True)
        self.messages: dict[str, dict[str, Any]] = {}
        self.threads: list[dict[str, Any]] = []
        self.reactions: list[tuple[str, str, str]] = []  # (PUT|DELETE, message id, emoji)
        self.typing: list[str] = []
        self.interaction_responses: list[tuple[str, int]] = []  # (interaction id, response type)
        self.followups: list[dict[str, Any]] = []  # ephemeral answers to button presses
        self.requests: list[tuple[str, str]] = []  # (method, path) of every REST call
        self.identify: dict[str, Any] | None = None  # the IDENTIFY payload the client sent
        self.connected = 0  # gateway connections identified and still open (one per bot, at most)
        self.most_connected = 0  # the most there ever were at once
        self.identifies = 0  # every IDENTIFY so far
        self.rate_limited: list[str] = []  # paths answered with 429
        self._limits: deque[float] = deque()  # retry_after for the next message POSTs
        self._nonces: dict[str, str] = {}
        self.cdn: dict[str, bytes] = {}  # attachment url -> bytes
        # Every text each bot message showed, with when (monotonic): sent, then each edit.
        self.shown: dict[str, list[tuple[float, str]]] = {}  # message id -> [(at, text)]
        self._ids = itertools.count(800_001)
        self._seq = itertools.count(1)
        self._ws: web.WebSocketResponse | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=run_until_stopped, args=(self._loop,), name="fake-discord", daemon=True
        )
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- control (test thread) ------------------------------------------------------------------

    def start(self) -> FakeDiscordServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        """Stop serving (stop the daemon first: its client would only try to reconnect)."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def install(self, monkeypatch: Any) -> None:
        """Point discord.py's REST base and default gateway at this server."""
        import discord.gateway
        import discord.http
        import yarl

        monkeypatch.setattr(discord.http.Route, "BASE", f"http://127.0.0.1:{self.port}/api/v10")
        monkeypatch.setattr(
            discord.gateway.DiscordWebSocket,
            "DEFAULT_GATEWAY",
            yarl.URL(f"ws://127.0.0.1:{self.port}/gateway"),
        )

    def rate_limit_next_send(self, retry_after: float) -> None:
        """The next message POST is answered 429 with this ``retry_after`` (as Discord does)."""
        self._limits.append(retry_after)

    def post_message(
        self,
        content: str,
        *,
        channel_id: str | None = None,
        author_id: str = "42",
        author_name: str = "alice",
        mentions_bot: bool = False,
        attachments: list[tuple[str, str, bytes]] | None = None,
        dispatch: bool = True,
    ) -> str:
        """A person writes a message: MESSAGE_CREATE on the gateway (unless ``dispatch`` is
        False: it is only in the channel's history). ``attachments``: (name, mime type,
        bytes), served from the fake CDN. Returns its id."""
        message = self._message(channel_id or self.channel_id, content, user_payload(author_id, author_name))
        if mentions_bot:
            message["mentions"] = [self.bot]
        for name, mime, data in attachments or []:
            aid = str(next(self._ids))
            url = f"http://127.0.0.1:{self.port}/attachments/{message['channel_id']}/{aid}/{name}"
            self.cdn[url] = data
            message["attachments"].append(
                {
                    "id": aid,
                    "filename": name,
                    "size": len(data),
                    "url": url,
                    "proxy_url": url,
                    "content_type": mime,
                }
            )
        self.messages[message["id"]] = message
        if dispatch:
            asyncio.run_coroutine_threadsafe(self._dispatch("MESSAGE_CREATE", message), self._loop).result(10)
        return str(message["id"])

    def redeliver(self, message_id: str) -> None:
        """The gateway dispatches a message's MESSAGE_CREATE again (as a resumed gateway
        session replays events the client may already have had)."""
        message = self.messages[message_id]
        asyncio.run_coroutine_threadsafe(self._dispatch("MESSAGE_CREATE", message), self._loop).result(10)

    def people_thread(self, name: str, *, owner_id: str = "42") -> str:
        """A thread people opened in the channel (not the bot: no session yet). Its id."""
        thread = self._thread_payload(str(next(self._ids)), name, self.channel_id, owner_id, None)
        self.threads.append(thread)
        return str(thread["id"])

    def press_button(self, message_id: str, custom_id: str, *, user_id: str = "42") -> str:
        """A person presses a button on a bot message: INTERACTION_CREATE (a message
        component) on the gateway. Returns the interaction id."""
        message = self.messages[message_id]
        channel_id = str(message["channel_id"])
        interaction: dict[str, Any] = {
            "id": str(next(self._ids)),
            "application_id": self.bot_id,
            "type": 3,  # MESSAGE_COMPONENT
            "data": {"custom_id": custom_id, "component_type": 2},
            "guild_id": self.guild_id,
            "channel_id": channel_id,
            # The channel as Discord describes it (a client that has not cached it, as after
            # a restart, builds it from this): a thread, or the text channel.
            "channel": next(
                (t for t in list(self.threads) if t["id"] == channel_id), self._guild()["channels"][0]
            ),
            "member": {
                "user": user_payload(user_id, "alice"),
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "0",
            },
            "token": f"interaction-token-{user_id}",
            "version": 1,
            "message": message,
            "app_permissions": "0",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 8_388_608,
        }
        asyncio.run_coroutine_threadsafe(
            self._dispatch("INTERACTION_CREATE", interaction), self._loop
        ).result(10)
        return str(interaction["id"])

    def bot_files(self, channel_id: str) -> list[tuple[str, bytes]]:
        """(name, bytes) of every file the bot attached in the channel, in order."""
        return [
            (a["filename"], self.cdn[a["url"]])
            for m in list(self.messages.values())
            if m["channel_id"] == channel_id and m["author"]["id"] == self.bot_id
            for a in m["attachments"]
        ]

    def bot_messages(self, channel_id: str) -> list[str]:
        return [
            m["content"]
            for m in list(self.messages.values())
            if m["channel_id"] == channel_id and m["author"]["id"] == self.bot_id
        ]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)

    # -- the server (its own loop) --------------------------------------------------------------

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._auth])
        api = "/api/v10"
        app.router.add_get(f"{api}/users/@me", self._me)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._application)
        app.router.add_post(f"{api}/channels/{{cid}}/messages/{{mid}}/threads", self._create_thread)
        app.router.add_post(f"{api}/channels/{{cid}}/messages", self._send)
        app.router.add_patch(f"{api}/channels/{{cid}}/messages/{{mid}}", self._edit)
        app.router.add_delete(f"{api}/channels/{{cid}}/messages/{{mid}}", self._delete)
        app.router.add_put(f"{api}/channels/{{cid}}/messages/{{mid}}/reactions/{{emoji}}/@me", self._react)
        app.router.add_delete(f"{api}/channels/{{cid}}/messages/{{mid}}/reactions/{{emoji}}/@me", self._react)
        app.router.add_post(f"{api}/channels/{{cid}}/typing", self._typing)
        app.router.add_get(f"{api}/channels/{{cid}}", self._channel)
        app.router.add_get(f"{api}/channels/{{cid}}/messages", self._history)
        app.router.add_get("/attachments/{cid}/{aid}/{name}", self._attachment)
        app.router.add_post(f"{api}/interactions/{{iid}}/{{token}}/callback", self._interaction_callback)
        app.router.add_post(f"{api}/webhooks/{{app_id}}/{{token}}", self._followup)
        app.router.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/api/"):
            self.requests.append((request.method, request.path[len("/api/v10") :]))
            # Interaction callbacks authenticate with the interaction's token in the path.
            interaction = request.path.startswith(("/api/v10/interactions/", "/api/v10/webhooks/"))
            if not interaction and request.headers.get("Authorization") != f"Bot {self.token}":
                return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def _me(self, request: web.Request) -> web.Response:
        return _json(self.bot)

    async def _application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": self.bot_id,
                "name": "netclaw",
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "k",
                "owner": user_payload("42", "alice"),
                "flags": 0,
            }
        )

    def _message(self, channel_id: str, content: str, author: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": str(next(self._ids)),
            "channel_id": channel_id,
            "guild_id": self.guild_id,
            "author": author,
            "content": content,
            "timestamp": TIMESTAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }

    async def _create_thread(self, request: web.Request) -> web.Response:
        body = await request.json()
        starter = request.match_info["mid"]
        if any(t["id"] == starter for t in self.threads):
            # As Discord: a message starts one thread, whose id is the message's.
            return _json(
                {"message": "A thread has already been created for this message", "code": 160004},
                status=400,
            )
        thread = self._thread_payload(
            starter,
            body["name"],
            request.match_info["cid"],
            self.bot_id,
            request.match_info["mid"],
            body.get("auto_archive_duration", 1440),
        )
        self.threads.append(thread)
        if self.announce_threads:
            await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return _json(thread, status=201)

    def _thread_payload(
        self,
        thread_id: str,
        name: str,
        parent_id: str,
        owner_id: str,
        starter: str | None,
        archive: int = 1440,
    ) -> dict[str, Any]:
        return {
            "id": thread_id,
            "type": 11,
            "name": name,
            "guild_id": self.guild_id,
            "parent_id": parent_id,
            "owner_id": owner_id,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": archive,
                "archive_timestamp": TIMESTAMP,
                "locked": False,
            },
            "starter_message_id": starter,
        }

    async def _send(self, request: web.Request) -> web.Response:
        if self._limits:
            retry_after = self._limits.popleft()
            self.rate_limited.append(request.path)
            return _json(
                {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
                status=429,
                headers={"Via": "1.1 google", "Retry-After": str(max(1, round(retry_after)))},
            )
        files: list[tuple[str, bytes]] = []
        if request.content_type.startswith("multipart/"):  # a message with files (discord.File)
            body = {}
            async for part in await request.multipart():
                if not isinstance(part, BodyPartReader):
                    continue
                if part.name == "payload_json":
                    body = json.loads(await part.text())
                elif part.filename is not None:
                    files.append((part.filename, bytes(await part.read())))
        else:
            body = await request.json()
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce") and nonce in self._nonces:
            return _json(self.messages[self._nonces[nonce]])
        message = self._message(request.match_info["cid"], body.get("content") or "", self.bot)
        message["components"] = body.get("components", [])
        for name, data in files:
            aid = str(next(self._ids))
            url = f"http://127.0.0.1:{self.port}/attachments/{message['channel_id']}/{aid}/{name}"
            self.cdn[url] = data
            message["attachments"].append(
                {"id": aid, "filename": name, "size": len(data), "url": url, "proxy_url": url}
            )
        if nonce is not None:
            message["nonce"] = nonce
            self._nonces[nonce] = message["id"]
        self.messages[message["id"]] = message
        self.shown[message["id"]] = [(time.monotonic(), str(message["content"]))]
        return _json(message)

    async def _history(self, request: web.Request) -> web.Response:
        """A channel's messages before ``before``, newest first, at most ``limit``."""
        cid = request.match_info["cid"]
        before = int(request.query.get("before") or 2**63)
        limit = int(request.query.get("limit") or 50)
        found = sorted(
            (m for m in list(self.messages.values()) if m["channel_id"] == cid and int(m["id"]) < before),
            key=lambda m: -int(m["id"]),
        )
        return _json(found[:limit])

    async def _attachment(self, request: web.Request) -> web.Response:
        data = self.cdn.get(str(request.url.with_query(None)))
        if data is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=data, content_type="application/octet-stream")

    async def _edit(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["mid"])
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        body = await request.json()
        message["content"] = body["content"]
        self.shown.setdefault(message["id"], []).append((time.monotonic(), str(body["content"])))
        if "components" in body:  # `view=None` sends [] (the buttons go)
            message["components"] = body["components"]
        message["edited_timestamp"] = TIMESTAMP
        return _json(message)

    async def _delete(self, request: web.Request) -> web.Response:
        self.messages.pop(request.match_info["mid"], None)
        return web.Response(status=204)

    async def _react(self, request: web.Request) -> web.Response:
        self.reactions.append((request.method, request.match_info["mid"], request.match_info["emoji"]))
        return web.Response(status=204)

    async def _channel(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        for thread in self.threads:
            if thread["id"] == cid:
                return _json(thread)
        if cid == self.channel_id:
            return _json(self._guild()["channels"][0])
        return _json({"message": "Unknown Channel", "code": 10003}, status=404)

    async def _followup(self, request: web.Request) -> web.Response:
        """An interaction follow-up (``interaction.followup.send``); flags 64 = ephemeral."""
        body = await request.json()
        self.followups.append(
            {
                "content": body.get("content"),
                "ephemeral": bool(int(body.get("flags") or 0) & 64),
                "token": request.match_info["token"],  # the interaction's: says who pressed
            }
        )
        message = self._message("0", str(body.get("content") or ""), self.bot)
        return _json(message)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        iid = request.match_info["iid"]
        kind = int((await request.json())["type"])
        self.interaction_responses.append((iid, kind))
        return _json({"interaction": {"id": iid, "type": 3}})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(request.match_info["cid"])
        return web.Response(status=204)

    # -- the gateway ----------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 45_000}}))
        identified = [False]  # counted in `connected` while it lasts
        try:
            await self._serve_gateway(ws, identified)
        finally:
            if identified[0]:
                self.connected -= 1
        return ws

    async def _serve_gateway(self, ws: web.WebSocketResponse, identified: list[bool]) -> None:
        async for frame in ws:
            payload = json.loads(frame.data)
            if payload["op"] == 1:  # heartbeat
                await ws.send_str(json.dumps({"op": 11}))
            elif payload["op"] == 2:  # identify
                self.identify = payload["d"]
                self.identifies += 1
                self.connected += 1
                self.most_connected = max(self.most_connected, self.connected)
                identified[0] = True
                if self.refuse_intents:
                    await ws.close(code=4014, message=b"Disallowed intent(s).")
                    break
                self._ws = ws
                await self._dispatch(
                    "READY",
                    {
                        "v": 10,
                        "user": self.bot,
                        "guilds": [{"id": self.guild_id, "unavailable": True}],
                        "session_id": "fake-session",
                        "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                        "application": {"id": self.bot_id, "flags": 0},
                    },
                )
                await self._dispatch("GUILD_CREATE", self._guild())
        if self._ws is ws:
            self._ws = None

    def _guild(self) -> dict[str, Any]:
        everyone = {"id": self.guild_id, "name": "@everyone", "permissions": "0", "position": 0}
        own = {
            "id": "888",
            "name": "netclaw",
            "permissions": "0",
            "position": 1,
            "managed": True,
            "tags": {"bot_id": self.bot_id},
        }
        channel = {
            "id": self.channel_id,
            "type": 0,
            "name": "general",
            "position": 0,
            "guild_id": self.guild_id,
            "permission_overwrites": [],
        }
        return {
            "id": self.guild_id,
            "name": "team",
            "unavailable": False,
            "member_count": 2,
            "roles": [everyone, own],
            "channels": [channel],
            "threads": [],
            "members": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "joined_at": TIMESTAMP,
            "large": False,
        }

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))
