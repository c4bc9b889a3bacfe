"""The real :class:`~adapters.mattermost._port.MattermostPort`: Mattermost's REST API v4
over httpx and its websocket over aiohttp, and the translation of their failures into
netclaw's (imported only when the adapter starts or probes).

Plain httpx and aiohttp, both already netclaw's, rather than a driver package: the
maintained drivers (``mattermostautodriver``) wrap the REST calls one method each, but
their websocket reconnects by itself in a loop that swallows every error, after a fixed
pause and without saying it reconnected — netclaw must own the reconnect (the shared
backoff, the adapter's status) and catch up on what was posted while it was away, and
needs the socket to send ``user_typing``.

- Posting is idempotent for a while: each post carries ``pending_post_id`` (the server
  returns the post it already made for a repeat within 30 s) and our key in
  ``props.netclaw_key``, which :meth:`ClientPort.find_posted` looks for after a crash.
- A prompt's buttons are an interactive message attachment (``_actions.py``); editing a
  prompt takes its attachment away.
- Rate limits: a 429 becomes a transient error carrying the server's ``X-Ratelimit-Reset``
  (or ``Retry-After``), which the renderer's retries honour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import aiohttp
import httpx

from adapters.chat import Button, Conversation, MessageRef
from adapters.mattermost._actions import action_key, attachment
from adapters.mattermost._port import (
    ACTIONS_PATH,
    MESSAGE_LIMIT,
    ChannelInfo,
    MattermostApiError,
)

log = logging.getLogger("adapters.mattermost")

REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0  # the websocket's handshake and authentication
HEARTBEAT_S = 30.0  # pings on the websocket: a dead connection is noticed within this
KEY_PROP = "netclaw_key"
POSITION_CATEGORY = "netclaw"  # the bot's preference holding the position
POSITION_NAME = "position"
# A model's text must not notify a whole channel.
_CHANNEL_WIDE = re.compile(r"@(all|channel|here)\b", re.IGNORECASE)


def _retry_after(response: httpx.Response) -> float:
    for header in ("Retry-After", "X-Ratelimit-Reset"):
        value = response.headers.get(header)
        if value is not None:
            with contextlib.suppress(ValueError):
                return max(float(value), 0.0)
    return 1.0


def translate(response: httpx.Response, what: str, *, token_env: str = "") -> MattermostApiError:
    """A failed answer as netclaw's error: what to do about it, and whether a retry helps."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    said = str(body.get("message") or response.reason_phrase or f"HTTP {status}")
    error_id = str(body.get("id") or "")
    if status == 401:
        where = f" in {token_env}" if token_env else ""
        return MattermostApiError(
            f"Mattermost rejected the bot token{where} ({said}); create a new one in "
            "Integrations → Bot Accounts",
            status=401,
            error_id=error_id,
        )
    if status == 429:
        wait = _retry_after(response)
        return MattermostApiError(
            f"Mattermost rate-limited {what}; retry in {wait:g}s",
            status=429,
            retry_after=wait,
            transient=True,
            error_id=error_id,
        )
    if status == 403:
        return MattermostApiError(
            f"Mattermost refused to {what} (403: {said}): is the bot a member of the channel, "
            "with the permission to post?",
            status=403,
            error_id=error_id,
        )
    return MattermostApiError(
        f"could not {what}: Mattermost answered {status} ({said})",
        status=status,
        transient=status >= 500,
        error_id=error_id,
    )


class _Socket:
    """One authenticated websocket (:class:`~adapters.mattermost._port.EventStream`)."""

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        connection_id: str,
        hello_seq: int,
        first: list[dict[str, Any]],
    ) -> None:
        self._ws = ws
        self.connection_id = connection_id
        self._waiting = first  # events that came with the handshake
        self._seq = 1  # ours: 1 was the authentication challenge
        self._send = asyncio.Lock()
        self._expected = hello_seq + 1  # the server's: every event counts up from the hello's
        self._missed = False

    def missed(self) -> bool:
        missed, self._missed = self._missed, False
        return missed

    def _counted(self, event: dict[str, Any]) -> dict[str, Any]:
        seq = event.get("seq")
        if "event" in event and isinstance(seq, int):
            if seq > self._expected:
                self._missed = True
            self._expected = max(self._expected, seq + 1)
        return event

    async def receive(self) -> dict[str, Any]:
        if self._waiting:
            return self._counted(self._waiting.pop(0))
        while True:
            message = await self._ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                try:
                    event = json.loads(message.data)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    return self._counted(event)
                continue
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                raise MattermostApiError("the websocket was closed by the server", transient=True)
            if message.type == aiohttp.WSMsgType.ERROR:
                raise MattermostApiError(f"the websocket failed: {self._ws.exception()!r}", transient=True)

    async def action(self, action: str, data: dict[str, Any]) -> None:
        async with self._send:
            self._seq += 1
            await self._ws.send_str(json.dumps({"action": action, "seq": self._seq, "data": data}))

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def close(self) -> None:
        await self._ws.close()


class ClientPort:
    """See the module docstring. Made by :func:`connect_port` (which logs in)."""

    platform = "mattermost"
    message_limit = MESSAGE_LIMIT

    def __init__(self, url: str, token: str, token_env: str, actions_url: str) -> None:
        self.url = url
        self._token = token
        self._token_env = token_env
        self._actions_url = f"{actions_url}{ACTIONS_PATH}" if actions_url else ""
        self._key = action_key(token)
        self._http = httpx.AsyncClient(
            base_url=f"{url}/api/v4",
            headers={"Authorization": f"Bearer {token}", "X-Requested-With": "XMLHttpRequest"},
            timeout=REQUEST_TIMEOUT_S,
        )
        self._session: aiohttp.ClientSession | None = None
        self._socket: _Socket | None = None
        self.user_id = ""
        self.username = ""
        self._names: dict[str, str] = {}
        self._types: dict[str, str] = {}
        self._prompts: set[str] = set()

    # -- plumbing -----------------------------------------------------------------------------

    async def _call(
        self, method: str, path: str, what: str, *, ok: tuple[int, ...] = (200, 201), **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise MattermostApiError(
                f"could not {what}: cannot reach {self.url} ({exc})", transient=True
            ) from exc
        except httpx.HTTPError as exc:  # a timeout, the connection lost: a repeat is safe (keys)
            raise MattermostApiError(
                f"could not {what}: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        if response.status_code not in ok:
            raise translate(response, what, token_env=self._token_env)
        return response

    async def _json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        response = await self._call(method, path, what, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise MattermostApiError(f"could not {what}: the answer is not JSON", transient=True) from exc

    async def login(self) -> None:
        me = await self._json("GET", "/users/me", "log in")
        self.user_id, self.username = str(me["id"]), str(me.get("username") or "")
        self._names[self.user_id] = self.username

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._http.aclose()

    def escape(self, text: str) -> str:
        # Markdown is Mattermost's own: shown as the model wrote it, but never a channel-wide ping.
        return _CHANNEL_WIDE.sub(lambda m: "@\u200b" + m.group(1), text)

    # -- the websocket --------------------------------------------------------------------------

    async def connect(self) -> _Socket:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        old, self._socket = self._socket, None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close()
        ws_url = re.sub(r"^http", "ws", self.url) + "/api/v4/websocket"
        try:
            ws = await asyncio.wait_for(
                self._session.ws_connect(
                    ws_url, heartbeat=HEARTBEAT_S, timeout=aiohttp.ClientWSTimeout(ws_close=CONNECT_TIMEOUT_S)
                ),
                CONNECT_TIMEOUT_S,
            )
        except aiohttp.WSServerHandshakeError as exc:
            raise MattermostApiError(
                f"the websocket at {ws_url} was refused ({exc.status})",
                status=exc.status,
                transient=exc.status != 401,
            ) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise MattermostApiError(
                f"cannot reach the websocket at {ws_url}: {exc}", transient=True
            ) from exc
        try:
            await ws.send_str(
                json.dumps({"seq": 1, "action": "authentication_challenge", "data": {"token": self._token}})
            )
            try:
                socket = await asyncio.wait_for(self._authenticated(ws), CONNECT_TIMEOUT_S)
            except (TimeoutError, ValueError, aiohttp.ClientError) as exc:
                raise MattermostApiError(
                    f"the websocket did not authenticate: {type(exc).__name__}: {exc}", transient=True
                ) from exc
        except MattermostApiError:
            await ws.close()
            # The server closes a socket whose token it does not take: a revoked token is
            # said so (for good, 401) rather than retried as a lost connection.
            await self.login()
            raise
        except BaseException:
            await ws.close()
            raise
        self._socket = socket
        return socket

    async def _authenticated(self, ws: aiohttp.ClientWebSocketResponse) -> _Socket:
        """Until the challenge is answered OK and the hello arrived (in either order)."""
        ok, connection_id, hello_seq, early = False, "", 0, []
        while not (ok and connection_id):
            message = await ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise MattermostApiError("the websocket closed while authenticating", transient=True)
            event = json.loads(message.data)
            if event.get("seq_reply") == 1:
                if event.get("status") != "OK":
                    raise MattermostApiError(
                        f"the websocket refused the token: {event.get('error')}", status=401
                    )
                ok = True
            elif event.get("event") == "hello":
                connection_id = str((event.get("data") or {}).get("connection_id") or "-")
                hello_seq = int(event.get("seq") or 0)
            elif "event" in event:
                early.append(event)
        return _Socket(ws, connection_id, hello_seq, early)

    # -- the chat port ---------------------------------------------------------------------------

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        return await self._post(to, text[:MESSAGE_LIMIT], key)

    async def _post(
        self,
        to: Conversation,
        text: str,
        key: str,
        *,
        props: dict[str, Any] | None = None,
        file_ids: Sequence[str] = (),
    ) -> str:
        body: dict[str, Any] = {
            "channel_id": to.channel,
            "message": text,
            "root_id": to.thread or "",
            # A repeat within the server's 30 s returns the post it made (a lost answer).
            "pending_post_id": f"{self.user_id}:{key}",
            "props": {**(props or {}), KEY_PROP: key},
        }
        if file_ids:
            body["file_ids"] = list(file_ids)
        post = await self._json("POST", "/posts", "post a message", json=body)
        return str(post["id"])

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        if not self._actions_url:
            raise MattermostApiError("approval buttons need mattermost.actions_url")
        props = {"attachments": [attachment(self._key, self._actions_url, to.channel, buttons)]}
        post_id = await self._post(to, text[:MESSAGE_LIMIT], key, props=props)
        self._prompts.add(post_id)
        return post_id

    def mark_prompt(self, message_id: str) -> None:
        self._prompts.add(message_id)

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        patch: dict[str, Any] = {"message": text[:MESSAGE_LIMIT]}
        if message_id in self._prompts:
            # A decided prompt: its buttons go (props are replaced whole; ours are kept).
            post = await self._json("GET", f"/posts/{message_id}", "read a prompt", ok=(200,))
            props = post.get("props") if isinstance(post.get("props"), dict) else {}
            patch["props"] = {k: v for k, v in props.items() if k != "attachments"}
        await self._call("PUT", f"/posts/{message_id}/patch", "edit a message", json=patch)
        if "props" in patch:
            self._prompts.discard(message_id)

    async def delete(self, to: Conversation, message_id: str) -> None:
        with contextlib.suppress(MattermostApiError):
            await self._call("DELETE", f"/posts/{message_id}", "delete a message", ok=(200, 404))

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        if add:
            body = {"user_id": self.user_id, "post_id": message.message_id, "emoji_name": reaction}
            await self._call("POST", "/reactions", "add a reaction", json=body)
        else:
            await self._call(
                "DELETE",
                f"/users/{self.user_id}/posts/{message.message_id}/reactions/{reaction}",
                "remove a reaction",
                ok=(200, 404),
            )

    async def typing(self, to: Conversation) -> None:
        socket = self._socket
        if socket is None or socket.closed:
            return  # reconnecting: nobody would see it anyway
        try:
            await socket.action("user_typing", {"channel_id": to.channel, "parent_id": to.thread or ""})
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            raise MattermostApiError(f"could not show typing: {exc}", transient=True) from exc

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        answer = await self._json(
            "POST",
            "/files",
            "upload a file",
            data={"channel_id": to.channel},
            files={"files": (name, data, mime_type)},
        )
        infos = answer.get("file_infos") or []
        if not infos:
            raise MattermostApiError("could not upload a file: the server returned no file info")
        file_id = str(infos[0]["id"])
        # One post per file (its key: the file's id, so a repeat finds it).
        return await self._post(to, "", f"file-{file_id}", file_ids=[file_id])

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        top = Conversation(channel)
        found = await self.find_posted(top, key, since)
        post_id = found if found is not None else await self.post(top, text, key=key)
        return Conversation(channel, post_id)

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        since_ms = int(since * 1000)
        if to.thread is not None:
            posts = await self.thread(to.thread)
        else:
            posts = await self.posts_since(to.channel, max(since_ms - 1, 0))
        for post in posts:
            props = post.get("props")
            if not isinstance(props, dict):
                continue
            if (
                post.get("user_id") == self.user_id
                and props.get(KEY_PROP) == key
                and not post.get("delete_at")
                and int(post.get("create_at") or 0) >= since_ms
            ):
                if props.get("attachments"):
                    self._prompts.add(str(post["id"]))
                return str(post["id"])
        return None

    # -- Mattermost's own -------------------------------------------------------------------------

    async def channels(self) -> list[ChannelInfo]:
        found = await self._json("GET", f"/users/{self.user_id}/channels", "list the bot's channels")
        infos = []
        for channel in found or []:
            self._types[str(channel["id"])] = str(channel.get("type") or "")
            infos.append(
                ChannelInfo(
                    str(channel["id"]), str(channel.get("type") or ""), int(channel.get("last_post_at") or 0)
                )
            )
        return infos

    async def channel_type(self, channel_id: str) -> str:
        if channel_id not in self._types:
            channel = await self._json("GET", f"/channels/{channel_id}", "read a channel")
            self._types[channel_id] = str(channel.get("type") or "")
        return self._types[channel_id]

    def note_channel_type(self, channel_id: str, kind: str) -> None:
        if kind:
            self._types[channel_id] = kind

    async def posts_since(self, channel_id: str, since_ms: int) -> list[dict[str, Any]]:
        listing = await self._json(
            "GET", f"/channels/{channel_id}/posts", "read a channel's posts", params={"since": str(since_ms)}
        )
        return _ordered(listing)

    async def thread(self, root_id: str) -> list[dict[str, Any]]:
        return _ordered(await self._json("GET", f"/posts/{root_id}/thread", "read a thread"))

    async def user_name(self, user_id: str) -> str:
        if user_id not in self._names:
            try:
                user = await self._json("GET", f"/users/{user_id}", "read a user")
            except MattermostApiError:
                return user_id
            self._names[user_id] = str(user.get("username") or user_id)
        return self._names[user_id]

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        try:
            async with self._http.stream("GET", f"/files/{file_id}") as response:
                if response.status_code != 200:
                    await response.aread()
                    raise translate(response, "download a file")
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise MattermostApiError(f"the file is larger than {max_bytes:,} bytes")
        except httpx.HTTPError as exc:
            raise MattermostApiError(f"could not download a file: {exc}", transient=True) from exc
        return bytes(data)

    async def load_position(self) -> int | None:
        try:
            found = await self._json(
                "GET",
                f"/users/{self.user_id}/preferences/{POSITION_CATEGORY}/name/{POSITION_NAME}",
                "read the saved position",
            )
        except MattermostApiError as exc:
            if exc.status == 404:
                return None
            raise
        try:
            return int(found.get("value"))
        except (TypeError, ValueError):
            return None

    async def save_position(self, position_ms: int) -> None:
        preference = {
            "user_id": self.user_id,
            "category": POSITION_CATEGORY,
            "name": POSITION_NAME,
            "value": str(position_ms),
        }
        await self._call("PUT", f"/users/{self.user_id}/preferences", "save the position", json=[preference])


def _ordered(listing: Any) -> list[dict[str, Any]]:
    """A PostList's posts, oldest first."""
    posts = listing.get("posts") if isinstance(listing, dict) else None
    if not isinstance(posts, dict):
        return []
    return sorted(
        (p for p in posts.values() if isinstance(p, dict)), key=lambda p: int(p.get("create_at") or 0)
    )


async def connect_port(url: str, token: str, token_env: str, actions_url: str) -> ClientPort:
    """A port logged in (GET /users/me): the token works and the server answers."""
    port = ClientPort(url, token, token_env, actions_url)
    try:
        await port.login()
    except BaseException:
        await port.close()
        raise
    return port


async def probe(url: str, token: str, token_env: str) -> str:
    """``netclaw doctor``: who the token logs in as."""
    port = await connect_port(url, token, token_env, "")
    try:
        return f"logged in to {url} as @{port.username} (id {port.user_id})"
    finally:
        await port.close()
