"""A local fake of the Mattermost server (REST API v4 and its websocket), for netclaw's
real Mattermost client to talk to.

:class:`FakeMattermost` is an aiohttp server on 127.0.0.1 answering ``/api/v4/...`` the
way Mattermost does (JSON bodies; errors as ``{"id", "message", "detailed_error",
"request_id", "status_code"}``; ids of 26 characters of its base32 alphabet):

- users (``/users/me``, ``/users/{id}``), the channels a user is in
  (``/users/{id}/channels``), ``/channels/{id}``, preferences (``PUT
  /users/{id}/preferences``, ``GET /users/{id}/preferences/{category}/name/{name}``);
- posts: ``POST /posts`` (``root_id`` must be a root of the same channel; at most 16,383
  characters; ``pending_post_id`` seen within 30 s returns the post already made; a bot's
  posts get ``props.from_bot``; an attachment's actions keep their ``integration`` on the
  server and every post a client reads has it stripped), ``GET /posts/{id}``, ``PUT
  /posts/{id}/patch`` (``props`` replaces the props whole), ``DELETE /posts/{id}``, ``GET
  /posts/{id}/thread``, ``GET /channels/{id}/posts?since=`` (posts changed after it);
- ``POST /posts/{id}/actions/{action_id}``: a person presses a button; the server POSTs
  the action's context with who pressed to its integration URL and applies the answer
  (``update`` replaces the post, props kept unless given; ``ephemeral_text`` is shown to
  the presser alone: :attr:`FakeMattermost.ephemerals`). A non-200 answer fails the press;
- reactions (``POST /reactions``, ``DELETE /users/{id}/posts/{id}/reactions/{emoji}``);
  files (``POST /files`` multipart, ``GET /files/{id}``, ``GET /files/{id}/info``);
- the websocket ``/api/v4/websocket``: an ``authentication_challenge`` (answered
  ``{"status": "OK", "seq_reply": 1}``, then the ``hello`` with its ``connection_id``);
  events with ``seq`` counting from 0 per connection: ``posted`` (the post as a JSON
  string, with ``channel_type``, ``sender_name`` and ``mentions``), ``post_edited``,
  ``post_deleted``, ``typing`` (what a ``user_typing`` action makes; recorded in
  :attr:`FakeMattermost.typing`).

It keeps every text a bot post showed, with when it arrived (``Post.shown``). Tests act as
people (:meth:`FakeMattermost.say`, :meth:`upload`, :meth:`press`), deliver an event again
(:meth:`redeliver`), drop the websockets (:meth:`drop_sockets`; :meth:`drop_on_patch`: at
the bot's next edit, as a network blip mid-stream), refuse new ones for a while
(:meth:`refuse_sockets`), and say where the integration URL leads (:meth:`reach`, as the
proxy in front of a daemon whose port is known only once it listens).
:class:`FakeMattermostThread` runs one on its own loop for sync tests (and for daemons in
subprocesses).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web

from tests.fakes._loop_thread import LoopThread

T = TypeVar("T")

ALPHABET = "ybndrfg8ejkmcpqxot1uwisza345h769"  # Mattermost's NewId encoding
MAX_MESSAGE = 16383
PENDING_TTL_S = 30.0
SERVER_VERSION = "10.5.0.13192.fake"


def new_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(26))


def now_ms() -> int:
    return int(time.time() * 1000)


class _ApiError(Exception):
    def __init__(self, status: int, error_id: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_id, self.message = status, error_id, message


@dataclass
class Post:
    """A post as the server keeps it (integrations included)."""

    data: dict[str, Any]
    shown: list[tuple[float, str]] = field(default_factory=list)  # (monotonic arrival, message)

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def message(self) -> str:
        return str(self.data.get("message") or "")

    @property
    def deleted(self) -> bool:
        return bool(self.data.get("delete_at"))

    def client_view(self) -> dict[str, Any]:
        """What a client reads: the actions' integrations stripped."""
        view: dict[str, Any] = json.loads(json.dumps(self.data))
        for attachment in (view.get("props") or {}).get("attachments") or []:
            for action in attachment.get("actions") or []:
                action.pop("integration", None)
        return view

    def actions(self) -> list[dict[str, Any]]:
        return [
            action
            for attachment in (self.data.get("props") or {}).get("attachments") or []
            for action in attachment.get("actions") or []
        ]


@dataclass
class ApiCall:
    method: str
    path: str
    status: int
    at: float


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    user_id: str = ""
    connection_id: str = ""
    seq: int = 0
    lose: int = 0  # events to lose on the way (their seq used)

    async def send(self, event: dict[str, Any]) -> None:
        if "event" in event:
            event = {**event, "seq": self.seq}
            self.seq += 1
            if self.lose:
                self.lose -= 1
                return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_str(json.dumps(event))


class FakeMattermost:
    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self._port = 0
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self.users: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # token → user id
        self.team: dict[str, str] = {"id": new_id(), "name": "kit", "display_name": "Kit"}
        self.channels: dict[str, dict[str, Any]] = {}
        self.members: dict[str, set[str]] = {}
        self.posts: dict[str, Post] = {}
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.preferences: dict[tuple[str, str, str], str] = {}
        self.reactions: set[tuple[str, str, str]] = set()
        self.ephemerals: list[dict[str, str]] = []  # what a press's answer showed one person
        self.typing: list[dict[str, str]] = []
        self.calls: list[ApiCall] = []
        self.presses: list[dict[str, Any]] = []  # each press: who, what, the answer's status
        self.sockets: list[_Socket] = []
        self.connections = 0  # websockets authenticated so far
        self.connected_at: list[float] = []  # monotonic time of each authentication
        self.dropped_at: list[float] = []  # when drop_on_patch dropped the sockets
        self.reaches: str | None = None  # where integration URLs lead (scheme://host:port)
        self._pending: dict[str, tuple[str, float]] = {}
        self._last_create = 0
        self._drop_on_patch: tuple[str, float] | None = None  # (user, refuse for) at their next patch
        self._refuse_until = 0.0  # monotonic: websockets refused (503) until then

    # ----- lifecycle

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("FakeMattermost is not started")
        return f"http://{self.host}:{self._port}"

    async def start(self) -> str:
        app = web.Application(client_max_size=60 * 1024 * 1024, middlewares=[self._record])
        r = app.router
        r.add_get("/api/v4/websocket", self._websocket)
        r.add_get("/api/v4/users/me", self._me)
        r.add_get("/api/v4/users/{user_id}", self._user)
        r.add_get("/api/v4/users/{user_id}/channels", self._user_channels)
        r.add_put("/api/v4/users/{user_id}/preferences", self._put_preferences)
        r.add_get("/api/v4/users/{user_id}/preferences/{category}/name/{name}", self._get_preference)
        r.add_delete("/api/v4/users/{user_id}/posts/{post_id}/reactions/{emoji}", self._unreact)
        r.add_get("/api/v4/channels/{channel_id}", self._channel)
        r.add_get("/api/v4/channels/{channel_id}/posts", self._channel_posts)
        r.add_post("/api/v4/posts", self._create_post)
        r.add_get("/api/v4/posts/{post_id}", self._get_post)
        r.add_put("/api/v4/posts/{post_id}/patch", self._patch_post)
        r.add_delete("/api/v4/posts/{post_id}", self._delete_post)
        r.add_get("/api/v4/posts/{post_id}/thread", self._thread)
        r.add_post("/api/v4/posts/{post_id}/actions/{action_id}", self._do_action)
        r.add_post("/api/v4/reactions", self._react)
        r.add_post("/api/v4/files", self._upload)
        r.add_get("/api/v4/files/{file_id}", self._download)
        r.add_get("/api/v4/files/{file_id}/info", self._file_info)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        await site.start()
        self._runner = runner
        server = site._server
        assert server is not None
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._http = aiohttp.ClientSession()
        return self.url

    async def stop(self) -> None:
        for socket in list(self.sockets):
            with contextlib.suppress(Exception):
                await socket.ws.close()
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ----- the world: people, channels

    def add_user(self, username: str, *, bot: bool = False) -> tuple[dict[str, Any], str]:
        """A user (a bot account with ``bot``) and an access token for them."""
        user_id = new_id()
        user: dict[str, Any] = {
            "id": user_id,
            "username": username,
            "first_name": username.capitalize() if not bot else "",
            "last_name": "",
            "nickname": "",
            "email": f"{username}@kit.example",
            "roles": "system_user",
            "is_bot": bot,
            "create_at": now_ms(),
            "update_at": now_ms(),
            "delete_at": 0,
            "locale": "en",
        }
        self.users[user_id] = user
        token = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(26))
        self.tokens[token] = user_id
        return user, token

    def add_channel(self, name: str, members: list[str], *, kind: str = "O") -> str:
        channel_id = new_id()
        channel: dict[str, Any] = {
            "id": channel_id,
            "team_id": self.team["id"] if kind in ("O", "P") else "",
            "type": kind,
            "name": name,
            "display_name": name.capitalize(),
            "header": "",
            "purpose": "",
            "create_at": now_ms(),
            "update_at": now_ms(),
            "delete_at": 0,
            "last_post_at": 0,
            "last_root_post_at": 0,
            "total_msg_count": 0,
            "creator_id": members[0] if members else "",
        }
        self.channels[channel_id] = channel
        self.members[channel_id] = set(members)
        return channel_id

    def reach(self, base_url: str) -> None:
        """Integration URLs lead to ``base_url`` (their path kept), as through a proxy."""
        self.reaches = base_url.rstrip("/")

    # ----- scripting (on the fake's loop)

    async def say(
        self,
        user_id: str,
        channel_id: str,
        message: str,
        *,
        root_id: str = "",
        file_ids: list[str] | None = None,
    ) -> Post:
        """``user_id`` posts, as their client would."""
        body = {"channel_id": channel_id, "message": message, "root_id": root_id, "file_ids": file_ids or []}
        return await self._create(user_id, body)

    async def upload(self, user_id: str, channel_id: str, name: str, data: bytes, mime_type: str) -> str:
        return self._store_file(user_id, channel_id, name, data, mime_type)["id"]  # type: ignore[no-any-return]

    async def press(self, user_id: str, post_id: str, action_id: str) -> tuple[int, dict[str, Any]]:
        """``user_id`` presses the button ``action_id`` of ``post_id`` (the client's
        ``POST /posts/{id}/actions/{action}``): the status and body the client gets."""
        try:
            return 200, await self._action(user_id, post_id, action_id)
        except _ApiError as exc:
            return exc.status, self._error_body(exc)

    async def redeliver(self, post_id: str) -> None:
        """The ``posted`` event of ``post_id`` again, as a replayed websocket event."""
        await self._broadcast_posted(self.posts[post_id])

    async def drop_sockets(self, user_id: str | None = None) -> int:
        """Close the websockets (of ``user_id``) from the server's side; how many."""
        dropped = [s for s in self.sockets if user_id is None or s.user_id == user_id]
        for socket in dropped:
            self.sockets.remove(socket)
            with contextlib.suppress(Exception):
                await socket.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        return len(dropped)

    def lose_next_event(self, user_id: str) -> None:
        """The next event for ``user_id`` is lost on the way (its ``seq`` used all the same)."""
        for socket in self.sockets:
            if socket.user_id == user_id:
                socket.lose += 1

    def revoke(self, token: str) -> None:
        self.tokens.pop(token, None)

    def drop_on_patch(self, user_id: str, *, refuse_s: float = 0.0) -> None:
        """At ``user_id``'s next edit of a post, drop their websockets (after the edit) and
        refuse new ones for ``refuse_s``."""
        self._drop_on_patch = (user_id, refuse_s)

    def refuse_sockets(self, seconds: float) -> None:
        """New websockets are refused (503) for ``seconds``."""
        self._refuse_until = time.monotonic() + seconds

    def thread_posts(self, root_id: str) -> list[Post]:
        return sorted(
            (p for p in self.posts.values() if p.id == root_id or p.data.get("root_id") == root_id),
            key=lambda p: int(p.data["create_at"]),
        )

    def posts_by(self, user_id: str) -> list[Post]:
        return sorted(
            (p for p in self.posts.values() if p.data["user_id"] == user_id),
            key=lambda p: int(p.data["create_at"]),
        )

    # ----- plumbing

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        at = time.monotonic()
        try:
            response: web.StreamResponse = await handler(request)
        except _ApiError as exc:
            response = web.json_response(self._error_body(exc), status=exc.status)
        if request.path != "/api/v4/websocket":
            self.calls.append(ApiCall(request.method, request.path, response.status, at))
        return response

    @staticmethod
    def _error_body(exc: _ApiError) -> dict[str, Any]:
        return {
            "id": exc.error_id,
            "message": exc.message,
            "detailed_error": "",
            "request_id": new_id(),
            "status_code": exc.status,
        }

    def _auth(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else header
        user = self.tokens.get(token)
        if user is None:
            raise _ApiError(
                401,
                "api.context.session_expired.app_error",
                "Invalid or expired session, please login again.",
            )
        return user

    def _user_of(self, user_id: str) -> dict[str, Any]:
        if user_id == "me":
            raise _ApiError(400, "api.context.invalid_url_param.app_error", "Invalid or missing user_id")
        user = self.users.get(user_id)
        if user is None:
            raise _ApiError(404, "app.user.missing_account.const", "Unable to find the user.")
        return user

    def _member(self, user_id: str, channel_id: str) -> dict[str, Any]:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise _ApiError(404, "app.channel.get.existing.app_error", "Unable to find the existing channel.")
        if user_id not in self.members.get(channel_id, set()):
            raise _ApiError(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
            )
        return channel

    def _post_of(self, post_id: str, user_id: str) -> Post:
        post = self.posts.get(post_id)
        if post is None or post.deleted:
            raise _ApiError(404, "app.post.get.app_error", "Unable to get the post.")
        self._member(user_id, str(post.data["channel_id"]))
        return post

    @staticmethod
    def _list(posts: list[Post]) -> dict[str, Any]:
        ordered = sorted(posts, key=lambda p: int(p.data["create_at"]), reverse=True)
        return {
            "order": [p.id for p in ordered],
            "posts": {p.id: p.client_view() for p in ordered},
            "next_post_id": "",
            "prev_post_id": "",
            "has_next": False,
        }

    # ----- users, channels, preferences

    async def _me(self, request: web.Request) -> web.Response:
        return web.json_response(self.users[self._auth(request)])

    async def _user(self, request: web.Request) -> web.Response:
        self._auth(request)
        return web.json_response(self._user_of(request.match_info["user_id"]))

    def _self(self, request: web.Request) -> str:
        me = self._auth(request)
        asked = request.match_info["user_id"]
        if asked not in ("me", me):
            raise _ApiError(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
            )
        return me

    async def _user_channels(self, request: web.Request) -> web.Response:
        me = self._self(request)
        return web.json_response([c for cid, c in self.channels.items() if me in self.members[cid]])

    async def _channel(self, request: web.Request) -> web.Response:
        return web.json_response(self._member(self._auth(request), request.match_info["channel_id"]))

    async def _put_preferences(self, request: web.Request) -> web.Response:
        me = self._self(request)
        body = await request.json()
        if not isinstance(body, list):
            raise _ApiError(
                400,
                "api.context.invalid_body_param.app_error",
                "Invalid or missing preferences in request body.",
            )
        for preference in body:
            if preference.get("user_id") != me:
                raise _ApiError(
                    403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
                )
            key = (me, str(preference["category"]), str(preference["name"]))
            self.preferences[key] = str(preference.get("value", ""))
        return web.json_response({"status": "OK"})

    async def _get_preference(self, request: web.Request) -> web.Response:
        me = self._self(request)
        category, name = request.match_info["category"], request.match_info["name"]
        value = self.preferences.get((me, category, name))
        if value is None:
            raise _ApiError(404, "app.preference.get.app_error", "Unable to get preference.")
        return web.json_response({"user_id": me, "category": category, "name": name, "value": value})

    # ----- posts

    async def _create_post(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        body = await request.json()
        if not isinstance(body, dict):
            raise _ApiError(
                400, "api.context.invalid_body_param.app_error", "Invalid or missing post in request body."
            )
        pending = str(body.get("pending_post_id") or "")
        seen = self._pending.get(pending) if pending else None
        if seen is not None and seen[1] > time.monotonic() and seen[0] in self.posts:
            return web.json_response(self.posts[seen[0]].client_view(), status=201)
        post = await self._create(me, body)
        if pending:
            self._pending[pending] = (post.id, time.monotonic() + PENDING_TTL_S)
        return web.json_response(post.client_view(), status=201)

    async def _create(self, user_id: str, body: dict[str, Any]) -> Post:
        arrived = time.monotonic()
        channel_id = str(body.get("channel_id") or "")
        channel = self._member(user_id, channel_id)
        message = str(body.get("message") or "")
        if len(message) > MAX_MESSAGE:
            raise _ApiError(
                400,
                "model.post.is_valid.message_length.app_error",
                f"Post Message property is longer than the maximum permitted length of {MAX_MESSAGE} characters.",
            )
        root_id = str(body.get("root_id") or "")
        if root_id:
            root = self.posts.get(root_id)
            if root is None or root.data["channel_id"] != channel_id or root.data.get("root_id"):
                raise _ApiError(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.")
        file_ids = [str(f) for f in body.get("file_ids") or []]
        for file_id in file_ids:
            if file_id not in self.files:
                raise _ApiError(400, "api.post.create_post.file_ids.app_error", "Invalid file id.")
        props = dict(body.get("props") or {})
        if self.users[user_id]["is_bot"]:
            props["from_bot"] = "true"
        for attachment in props.get("attachments") or []:
            for action in attachment.get("actions") or []:
                action.setdefault("id", new_id())
                if not re.fullmatch(r"[A-Za-z0-9]+", str(action["id"])):
                    raise _ApiError(
                        400, "model.post.is_valid.action_id.app_error", "Action ids must be alphanumeric."
                    )
                if not (action.get("integration") or {}).get("url"):
                    raise _ApiError(
                        400, "model.post.is_valid.action.app_error", "action must have an integration URL"
                    )
        created = max(now_ms(), self._last_create + 1)
        self._last_create = created
        infos = []
        for file_id in file_ids:
            info = self.files[file_id][0]
            info["post_id"] = "pending"
            infos.append(info)
        data = {
            "id": new_id(),
            "create_at": created,
            "update_at": created,
            "edit_at": 0,
            "delete_at": 0,
            "is_pinned": False,
            "user_id": user_id,
            "channel_id": channel_id,
            "root_id": root_id,
            "original_id": "",
            "message": message,
            "type": "",
            "props": props,
            "hashtags": "",
            "pending_post_id": str(body.get("pending_post_id") or ""),
            "reply_count": 0,
            "file_ids": file_ids,
            "metadata": {"files": infos} if infos else {},
        }
        for info in infos:
            info["post_id"] = data["id"]
        post = Post(data, [(arrived, message)])
        self.posts[post.id] = post
        channel["last_post_at"] = created
        if root_id:
            self.posts[root_id].data["reply_count"] += 1
        await self._broadcast_posted(post)
        return post

    def _mentions(self, post: Post) -> list[str]:
        members = self.members.get(str(post.data["channel_id"]), set())
        found = []
        for user_id in sorted(members):
            name = re.escape(self.users[user_id]["username"])
            if re.search(rf"@{name}(?![A-Za-z0-9._-])", post.message, re.IGNORECASE):
                found.append(user_id)
        return found

    async def _broadcast_posted(self, post: Post) -> None:
        channel = self.channels[str(post.data["channel_id"])]
        data: dict[str, Any] = {
            "channel_display_name": channel["display_name"],
            "channel_name": channel["name"],
            "channel_type": channel["type"],
            "post": json.dumps(post.client_view()),
            "sender_name": "@" + self.users[str(post.data["user_id"])]["username"],
            "set_online": True,
            "team_id": channel["team_id"],
        }
        mentions = self._mentions(post)
        if mentions:
            data["mentions"] = json.dumps(mentions)
        await self._broadcast(str(channel["id"]), {"event": "posted", "data": data})

    async def _broadcast(self, channel_id: str, event: dict[str, Any], omit: str = "") -> None:
        members = self.members.get(channel_id, set())
        full = {
            **event,
            "broadcast": {
                "omit_users": {omit: True} if omit else None,
                "user_id": "",
                "channel_id": channel_id,
                "team_id": "",
            },
        }
        for socket in list(self.sockets):
            if socket.user_id in members and socket.user_id != omit:
                await socket.send(full)

    async def _get_post(self, request: web.Request) -> web.Response:
        return web.json_response(
            self._post_of(request.match_info["post_id"], self._auth(request)).client_view()
        )

    async def _patch_post(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        me = self._auth(request)
        post = self._post_of(request.match_info["post_id"], me)
        if post.data["user_id"] != me:
            raise _ApiError(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
            )
        patch = await request.json()
        if "message" in patch:
            message = str(patch["message"] or "")
            if len(message) > MAX_MESSAGE:
                raise _ApiError(
                    400, "model.post.is_valid.message_length.app_error", "Post Message property is too long."
                )
            if message != post.message:
                post.shown.append((arrived, message))
            post.data["message"] = message
        if "props" in patch and patch["props"] is not None:
            props = dict(patch["props"])
            if self.users[me]["is_bot"]:
                props["from_bot"] = "true"
            post.data["props"] = props
        if "file_ids" in patch and patch["file_ids"] is not None:
            post.data["file_ids"] = list(patch["file_ids"])
        post.data["update_at"] = post.data["edit_at"] = max(now_ms(), int(post.data["update_at"]) + 1)
        await self._broadcast(
            str(post.data["channel_id"]),
            {"event": "post_edited", "data": {"post": json.dumps(post.client_view())}},
        )
        if self._drop_on_patch is not None and self._drop_on_patch[0] == me:
            refuse_s, self._drop_on_patch = self._drop_on_patch[1], None
            self.refuse_sockets(refuse_s)
            self.dropped_at.append(time.monotonic())
            await self.drop_sockets(me)
        return web.json_response(post.client_view())

    async def _delete_post(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        post = self._post_of(request.match_info["post_id"], me)
        if post.data["user_id"] != me:
            raise _ApiError(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
            )
        post.data["delete_at"] = post.data["update_at"] = max(now_ms(), int(post.data["update_at"]) + 1)
        await self._broadcast(
            str(post.data["channel_id"]),
            {"event": "post_deleted", "data": {"post": json.dumps(post.client_view())}},
        )
        return web.json_response({"status": "OK"})

    async def _thread(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        root = self._post_of(request.match_info["post_id"], me)
        root_id = str(root.data.get("root_id") or root.id)
        return web.json_response(self._list([p for p in self.thread_posts(root_id) if not p.deleted]))

    async def _channel_posts(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        channel_id = request.match_info["channel_id"]
        self._member(me, channel_id)
        posts = [p for p in self.posts.values() if p.data["channel_id"] == channel_id]
        since = request.query.get("since")
        if since is not None:
            # Posts changed after `since` (deleted ones too, as the server sends them).
            return web.json_response(self._list([p for p in posts if int(p.data["update_at"]) > int(since)]))
        per_page = min(int(request.query.get("per_page", "60")), 200)
        page = int(request.query.get("page", "0"))
        live = sorted(
            (p for p in posts if not p.deleted), key=lambda p: int(p.data["create_at"]), reverse=True
        )
        return web.json_response(self._list(live[page * per_page : (page + 1) * per_page]))

    # ----- button presses

    async def _do_action(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        await self._action(me, request.match_info["post_id"], request.match_info["action_id"])
        return web.json_response({"status": "OK", "trigger_id": new_id()})

    async def _action(self, user_id: str, post_id: str, action_id: str) -> dict[str, Any]:
        post = self._post_of(post_id, user_id)
        action = next((a for a in post.actions() if a.get("id") == action_id), None)
        if action is None or not action.get("integration"):
            raise _ApiError(404, "api.post.do_action.action_id.app_error", "Unable to find the action.")
        channel = self.channels[str(post.data["channel_id"])]
        integration = action["integration"]
        request = {
            "user_id": user_id,
            "user_name": self.users[user_id]["username"],
            "channel_id": channel["id"],
            "channel_name": channel["name"],
            "team_id": channel["team_id"],
            "team_domain": self.team["name"] if channel["team_id"] else "",
            "post_id": post.id,
            "trigger_id": new_id(),
            "type": action.get("type", "button"),
            "data_source": "",
            "context": integration.get("context") or {},
        }
        url = str(integration["url"])
        if self.reaches is not None:
            parts = urlsplit(url)
            base = urlsplit(self.reaches)
            url = urlunsplit((base.scheme, base.netloc, parts.path, parts.query, ""))
        assert self._http is not None
        record: dict[str, Any] = {"user_id": user_id, "post_id": post.id, "action": action_id, "status": 0}
        self.presses.append(record)
        try:
            async with self._http.post(url, json=request, timeout=aiohttp.ClientTimeout(total=30)) as answer:
                record["status"] = answer.status
                raw = await answer.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _ApiError(
                400, "api.post.do_action.action_integration.app_error", f"Action integration error: {exc}"
            ) from exc
        if record["status"] != 200:
            raise _ApiError(
                400,
                "api.post.do_action.action_integration.app_error",
                f"Action integration error: status={record['status']}",
            )
        response = json.loads(raw) if raw.strip() else {}
        update = response.get("update")
        if isinstance(update, dict):
            if "message" in update:
                post.data["message"] = str(update["message"])
                post.shown.append((time.monotonic(), post.message))
            if update.get("props") is not None:
                post.data["props"] = dict(update["props"])
            post.data["update_at"] = max(now_ms(), int(post.data["update_at"]) + 1)
        text = response.get("ephemeral_text")
        if text:
            root = str(post.data.get("root_id") or post.id)
            self.ephemerals.append(
                {"user_id": user_id, "channel_id": str(channel["id"]), "root_id": root, "message": str(text)}
            )
        return response if isinstance(response, dict) else {}

    # ----- reactions

    async def _react(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        body = await request.json()
        if body.get("user_id") != me:
            raise _ApiError(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions."
            )
        self._post_of(str(body.get("post_id")), me)
        self.reactions.add((me, str(body["post_id"]), str(body["emoji_name"])))
        return web.json_response({**body, "create_at": now_ms()}, status=201)

    async def _unreact(self, request: web.Request) -> web.Response:
        me = self._self(request)
        key = (me, request.match_info["post_id"], request.match_info["emoji"])
        self.reactions.discard(key)
        return web.json_response({"status": "OK"})

    # ----- files

    def _store_file(
        self, user_id: str, channel_id: str, name: str, data: bytes, mime_type: str
    ) -> dict[str, Any]:
        self._member(user_id, channel_id)
        info = {
            "id": new_id(),
            "user_id": user_id,
            "post_id": "",
            "channel_id": channel_id,
            "create_at": now_ms(),
            "update_at": now_ms(),
            "delete_at": 0,
            "name": name,
            "extension": name.rpartition(".")[2] if "." in name else "",
            "size": len(data),
            "mime_type": mime_type,
            "has_preview_image": False,
        }
        self.files[str(info["id"])] = (info, data)
        return info

    async def _upload(self, request: web.Request) -> web.Response:
        me = self._auth(request)
        form = await request.post()
        channel_id = str(form.get("channel_id") or request.query.get("channel_id") or "")
        if not channel_id:
            raise _ApiError(
                400, "api.file.upload_file.channel_id.app_error", "Invalid or missing channel_id."
            )
        infos = []
        for key, value in form.items():
            if key == "files" and isinstance(value, web.FileField):
                infos.append(
                    self._store_file(me, channel_id, value.filename, value.file.read(), value.content_type)
                )
        if not infos:
            raise _ApiError(
                400, "api.file.upload_file.bad_parse.app_error", "Unable to upload file. No files."
            )
        return web.json_response({"file_infos": infos, "client_ids": []}, status=201)

    def _file(self, request: web.Request) -> tuple[dict[str, Any], bytes]:
        me = self._auth(request)
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            raise _ApiError(404, "app.file_info.get.app_error", "Unable to get the file info.")
        self._member(me, str(found[0]["channel_id"]))
        return found

    async def _download(self, request: web.Request) -> web.Response:
        info, data = self._file(request)
        return web.Response(
            body=data,
            content_type=str(info["mime_type"]),
            headers={"Content-Disposition": f'attachment; filename="{info["name"]}"'},
        )

    async def _file_info(self, request: web.Request) -> web.Response:
        return web.json_response(self._file(request)[0])

    # ----- the websocket

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if time.monotonic() < self._refuse_until:
            raise _ApiError(503, "api.server.unavailable", "The server is unavailable.")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        socket = _Socket(ws)
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    action = json.loads(message.data)
                except ValueError:
                    continue
                seq = action.get("seq")
                name = action.get("action")
                data = action.get("data") or {}
                if name == "authentication_challenge":
                    user = self.tokens.get(str(data.get("token") or ""))
                    if user is None:
                        await ws.close()  # as the server does with a bad token
                        break
                    socket.user_id, socket.connection_id = user, new_id()
                    self.sockets.append(socket)
                    self.connections += 1
                    self.connected_at.append(time.monotonic())
                    await socket.send({"status": "OK", "seq_reply": seq})
                    await socket.send(
                        {
                            "event": "hello",
                            "data": {"connection_id": socket.connection_id, "server_version": SERVER_VERSION},
                            "broadcast": {
                                "omit_users": None,
                                "user_id": user,
                                "channel_id": "",
                                "team_id": "",
                            },
                        }
                    )
                elif not socket.user_id:
                    continue  # nothing before the challenge
                elif name == "user_typing":
                    channel = str(data.get("channel_id") or "")
                    self.typing.append(
                        {
                            "user_id": socket.user_id,
                            "channel_id": channel,
                            "parent_id": str(data.get("parent_id") or ""),
                        }
                    )
                    await socket.send({"status": "OK", "seq_reply": seq})
                    await self._broadcast(
                        channel,
                        {
                            "event": "typing",
                            "data": {
                                "parent_id": str(data.get("parent_id") or ""),
                                "user_id": socket.user_id,
                            },
                        },
                        omit=socket.user_id,
                    )
                else:
                    await socket.send(
                        {
                            "status": "FAIL",
                            "seq_reply": seq,
                            "error": {"id": "api.web_socket_router.bad_action.app_error"},
                        }
                    )
        finally:
            if socket in self.sockets:
                self.sockets.remove(socket)
        return ws


class FakeMattermostThread(LoopThread[FakeMattermost]):
    """A :class:`FakeMattermost` on its own event loop in a daemon thread, for sync tests.

    Read state through :meth:`read` (a consistent snapshot on the fake's loop); the async
    methods have sync twins that run there."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(FakeMattermost(**kwargs), "fake-mattermost")

    @property
    def url(self) -> str:
        return self.server.url

    def say(self, user_id: str, channel_id: str, message: str, **kwargs: Any) -> Post:
        return self.run(self.server.say(user_id, channel_id, message, **kwargs))

    def upload(self, user_id: str, channel_id: str, name: str, data: bytes, mime_type: str) -> str:
        return self.run(self.server.upload(user_id, channel_id, name, data, mime_type))

    def press(self, user_id: str, post_id: str, action_id: str) -> tuple[int, dict[str, Any]]:
        return self.run(self.server.press(user_id, post_id, action_id))

    def redeliver(self, post_id: str) -> None:
        self.run(self.server.redeliver(post_id))

    def drop_sockets(self, user_id: str | None = None) -> int:
        return self.run(self.server.drop_sockets(user_id))

    def wait_for(self, predicate: Callable[[FakeMattermost], T], what: str, timeout: float = 15.0) -> T:
        """Until ``predicate(server)`` (read on the fake's loop) is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.read(predicate)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)
