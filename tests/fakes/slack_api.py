"""A local fake of Slack: the Web API methods netclaw uses and the Socket Mode WebSocket.

:class:`FakeSlack` is a real aiohttp server on 127.0.0.1:

- ``/api/<method>`` answers ``auth.test``, ``apps.connections.open``, ``chat.postMessage``,
  ``chat.update``, ``chat.delete``, ``reactions.add``, ``reactions.remove``,
  ``conversations.replies``, ``conversations.history``, ``users.info``, the file upload
  flow (``files.getUploadURLExternal`` → POST the bytes → ``files.completeUploadExternal``),
  the streaming methods (``chat.startStream`` / ``appendStream`` / ``stopStream``, when
  ``streaming`` is on) and ``assistant.threads.setStatus`` the way Slack does (query, form or JSON arguments; the token
  in ``Authorization: Bearer``; HTTP 200 with ``{"ok": false, "error"}`` for errors, 429
  with ``Retry-After`` for rate limits). It keeps the channels' messages, so a
  post, an edit and a reply lookup agree with each other, and records every call.
- ``/socket`` is the Socket Mode WebSocket that ``apps.connections.open`` hands out. It
  sends ``hello`` on connect; tests push real ``events_api`` envelopes and the fake
  records the acknowledgements (``{"envelope_id": ...}``) the client sends back.
- ``/files/<id>/<name>`` serves a file a person shared (:meth:`FakeSlack.say` with
  ``files``) to a request carrying the bot token, as ``url_private_download`` does; without
  it, Slack's login page (HTML).

Scripting: :meth:`FakeSlack.fail_next` answers the next N calls of a method with an
error (a 429 with Retry-After by default); :meth:`FakeSlack.drop_next` carries out the
next N calls of a method and then drops the connection instead of answering (a lost
response). :meth:`FakeSlack.redeliver` sends an envelope's event again as Slack does
after a slow ack (same ``event_id``, ``retry_attempt`` set); :meth:`FakeSlack.click`
presses a button (an ``interactive`` envelope); :meth:`FakeSlack.close_socket` closes the
WebSocket to force a reconnect. ``shown`` keeps every text each bot message showed, with when.

:class:`FakeSlackThread` runs one on its own loop for sync tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from aiohttp import WSMsgType, web

from tests.fakes._loop_thread import LoopThread

T = TypeVar("T")

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "TFAKE"
APP_ID = "AFAKE"


@dataclass
class ApiCall:
    """One Web API request as the fake saw it."""

    method: str
    args: dict[str, Any]
    token: str | None
    status: int  # the HTTP status answered (0: the connection was dropped)
    error: str | None  # the ``error`` answered, if not ok
    at: float  # time.monotonic() on arrival


@dataclass
class _Failure:
    count: int
    status: int
    error: str
    retry_after: float | None


@dataclass
class Socket:
    """One Socket Mode connection."""

    ws: web.WebSocketResponse
    number: int
    received: list[dict[str, Any]] = field(default_factory=list)


class FakeSlack:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
    ) -> None:
        self.host = host
        self.bot_token = bot_token
        self.app_token = app_token
        self._port = port
        self._runner: web.AppRunner | None = None
        self.calls: list[ApiCall] = []
        self.acks: list[dict[str, Any]] = []
        self.envelopes: list[dict[str, Any]] = []  # every envelope pushed, in order
        self.messages: dict[str, list[dict[str, Any]]] = {}  # channel -> messages
        self.connections = 0
        self._sockets: list[Socket] = []
        self._failures: dict[str, list[_Failure]] = {}
        self._drops: dict[str, int] = {}
        self._clock = itertools.count(1)
        self._base_ts = int(time.time())
        self._events = itertools.count(1)
        self._changed = asyncio.Condition()
        self.files: dict[str, dict[str, Any]] = {}  # file id -> {"name", "length", "data"}
        self.users: dict[str, str] = {"U1": "Alice", "U2": "Bob", "U3": "Carol"}  # id -> display name
        self.streaming = False  # chat.startStream & co. answer (a workspace with AI apps)
        self.statuses: list[dict[str, Any]] = []  # assistant.threads.setStatus calls
        self.ephemeral: list[
            dict[str, Any]
        ] = []  # chat.postEphemeral: {"channel", "user", "text", "thread_ts"}
        # Every text each bot message showed, with when (monotonic): posted, then each update.
        self.shown: dict[str, list[tuple[float, str]]] = {}  # message ts -> [(at, text)]

    # ----- lifecycle

    @property
    def port(self) -> int:
        if self._runner is None:
            raise RuntimeError("FakeSlack is not started")
        return self._port

    @property
    def api_url(self) -> str:
        """The Web API base URL (``slack.api_url`` in netclaw's config)."""
        return f"http://{self.host}:{self.port}/api/"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._socket)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self.api_url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for sock in list(self._sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sock.ws.close(), 1.0)
        await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ----- scripting

    def fail_next(
        self,
        method: str,
        *,
        count: int = 1,
        status: int = 429,
        error: str = "ratelimited",
        retry_after: float | None = 1.0,
    ) -> None:
        """Answer the next ``count`` calls of ``method`` with an error instead of doing them."""
        self._failures.setdefault(method, []).append(
            _Failure(count, status, error, retry_after if status == 429 else None)
        )

    def drop_next(self, method: str, *, count: int = 1) -> None:
        """Carry out the next ``count`` calls of ``method``, then drop the connection unanswered."""
        self._drops[method] = self._drops.get(method, 0) + count

    def share_file(self, name: str, mime_type: str, data: bytes) -> dict[str, Any]:
        """A file a person uploads: stored, and described as a message event's ``files``."""
        file_id = f"F{next(self._clock):06d}"
        self.files[file_id] = {"name": name, "length": len(data), "data": data, "shared": True}
        url = f"http://{self.host}:{self.port}/files/{file_id}/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mime_type,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url + "?download=1",
        }

    def next_ts(self) -> str:
        """A new, increasing message timestamp in Slack's ``seconds.micros`` form."""
        n = next(self._clock)
        return f"{self._base_ts + n // 1000}.{(n % 1000) * 100:06d}"

    # ----- people writing (events pushed over the socket)

    def user_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        thread_ts: str | None = None,
        channel_type: str = "channel",
        files: list[tuple[str, str, bytes]] | None = None,
    ) -> dict[str, Any]:
        """Store a person's message and return its ``message`` event (not yet sent);
        ``files`` are (name, mime type, bytes) shared with it (a ``file_share``)."""
        ts = self.next_ts()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": channel_type,
            "client_msg_id": str(uuid.uuid4()),
            "team": TEAM_ID,
            "blocks": [],
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        if files:
            event["subtype"] = "file_share"
            event["files"] = [self.share_file(name, mime, data) for name, mime, data in files]
        stored = {k: v for k, v in event.items() if k not in ("channel", "event_ts", "channel_type")}
        self.messages.setdefault(channel, []).append(stored)
        return event

    async def say(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        thread_ts: str | None = None,
        channel_type: str = "channel",
        files: list[tuple[str, str, bytes]] | None = None,
        socket: int | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        """A person writes: store the message and push the events Slack would send for it —
        a ``message`` event and, when it mentions the bot outside a DM, an ``app_mention``
        (each with its own event id). ``socket``: the connection (numbered from 1, in the
        order they connected) that gets them; the newest by default. Returns the message ts
        and the envelopes pushed."""
        event = self.user_message(
            channel, text, user=user, thread_ts=thread_ts, channel_type=channel_type, files=files
        )
        envelopes = []
        if f"<@{BOT_USER_ID}" in text and channel_type != "im":
            mention = {k: v for k, v in event.items() if k not in ("channel_type", "blocks") and k != "type"}
            envelopes.append(await self.push({"type": "app_mention", **mention}, socket=socket))
        envelopes.append(await self.push(event, socket=socket))
        return str(event["ts"]), envelopes

    def envelope(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """An ``events_api`` envelope carrying ``event``, as Slack sends it over Socket Mode."""
        event_id = event_id or f"Ev{next(self._events):010d}"
        return {
            "envelope_id": str(uuid.uuid4()),
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": {
                "token": "fake-verification-token",
                "team_id": TEAM_ID,
                "api_app_id": APP_ID,
                "event": event,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": int(time.time()),
                "authorizations": [
                    {
                        "enterprise_id": None,
                        "team_id": TEAM_ID,
                        "user_id": BOT_USER_ID,
                        "is_bot": True,
                        "is_enterprise_install": False,
                    }
                ],
                "is_ext_shared_channel": False,
                "event_context": f"4-{uuid.uuid4().hex}",
            },
        }

    async def push(
        self, event: dict[str, Any], *, event_id: str | None = None, socket: int | None = None
    ) -> dict[str, Any]:
        """Send ``event`` in a new envelope on the current socket (or connection number
        ``socket``); returns the envelope."""
        envelope = self.envelope(event, event_id=event_id)
        await self.send_envelope(envelope, socket=socket)
        return envelope

    async def click(
        self, channel: str, message_ts: str, action_id: str, value: str, *, user: str = "U1"
    ) -> dict[str, Any]:
        """A person presses a button on a message: an ``interactive`` envelope carrying a
        ``block_actions`` payload, as Slack sends it over Socket Mode."""
        message = self.find(channel, message_ts) or {"ts": message_ts}
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "interactive",
            "accepts_response_payload": False,
            "payload": {
                "type": "block_actions",
                "user": {"id": user, "username": "alice", "name": "alice", "team_id": TEAM_ID},
                "api_app_id": APP_ID,
                "token": "fake-verification-token",
                "container": {
                    "type": "message",
                    "message_ts": message_ts,
                    "channel_id": channel,
                    "is_ephemeral": False,
                },
                "trigger_id": f"{next(self._events)}.{uuid.uuid4().hex[:8]}",
                "team": {"id": TEAM_ID, "domain": "fake"},
                "enterprise": None,
                "is_enterprise_install": False,
                "channel": {"id": channel, "name": "general"},
                "message": _public(message),
                "state": {"values": {}},
                "response_url": f"{self.api_url}response/{uuid.uuid4().hex}",
                "actions": [
                    {
                        "action_id": action_id,
                        "block_id": "actions",
                        "text": {"type": "plain_text", "text": action_id, "emoji": True},
                        "value": value,
                        "type": "button",
                        "action_ts": f"{time.time():.6f}",
                    }
                ],
            },
        }
        await self.send_envelope(envelope)
        return envelope

    async def redeliver(self, envelope: dict[str, Any], *, reason: str = "timeout") -> dict[str, Any]:
        """Deliver ``envelope``'s event again (same event_id, a new envelope id, the next
        ``retry_attempt``), as Slack does when an ack came too late."""
        again = {
            **envelope,
            "envelope_id": str(uuid.uuid4()),
            "retry_attempt": int(envelope.get("retry_attempt") or 0) + 1,
            "retry_reason": reason,
        }
        await self.send_envelope(again)
        return again

    async def send_envelope(
        self, envelope: dict[str, Any], timeout: float = 10.0, *, socket: int | None = None
    ) -> None:
        sock = await self._current_socket(timeout, socket)
        self.envelopes.append(envelope)
        await sock.ws.send_str(json.dumps(envelope))

    async def close_socket(self) -> None:
        """Close the current WebSocket (the client should reconnect)."""
        sock = await self._current_socket(5.0)
        await sock.ws.close()

    async def request_disconnect(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message (the client should reconnect)."""
        sock = await self._current_socket(5.0)
        await sock.ws.send_str(json.dumps({"type": "disconnect", "reason": reason}))

    async def _current_socket(self, timeout: float, number: int | None = None) -> Socket:
        async def ready() -> Socket:
            async with self._changed:
                while True:
                    live = [s for s in self._sockets if not s.ws.closed and number in (None, s.number)]
                    if live:
                        return live[-1]
                    await self._changed.wait()

        return await asyncio.wait_for(ready(), timeout)

    # ----- queries

    def calls_of(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    @property
    def sockets(self) -> list[Socket]:
        """Every Socket Mode connection so far, open or closed."""
        return list(self._sockets)

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages in ``channel`` (in thread ``thread_ts`` if given), oldest first."""
        return [
            m
            for m in self.messages.get(channel, [])
            if m.get("user") == BOT_USER_ID and (thread_ts is None or m.get("thread_ts") == thread_ts)
        ]

    def find(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)

    # ----- the WebSocket

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        sock = Socket(ws, self.connections)
        async with self._changed:
            self._sockets.append(sock)
            self._changed.notify_all()
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": len([s for s in self._sockets if not s.ws.closed]),
                    "debug_info": {"host": "fake-applink", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": APP_ID},
                }
            )
        )
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                sock.received.append(data)
                if "envelope_id" in data:
                    self.acks.append(data)
        finally:
            async with self._changed:
                self._changed.notify_all()
        return ws

    # ----- the Web API

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    args.update(body)
            else:
                args.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        token = args.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[len("Bearer ") :]
        call = ApiCall(method, args, token, 200, None, time.monotonic())
        self.calls.append(call)

        failures = self._failures.get(method)
        if failures:
            failure = failures[0]
            failure.count -= 1
            if failure.count <= 0:
                failures.pop(0)
            call.status, call.error = failure.status, failure.error
            headers = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = _seconds(failure.retry_after)
            return web.json_response(
                {"ok": False, "error": failure.error}, status=failure.status, headers=headers
            )

        handler = self._METHODS.get(method)
        if handler is None:
            result: dict[str, Any] = {"ok": False, "error": "unknown_method"}
        else:
            expected = self.app_token if method == "apps.connections.open" else self.bot_token
            if token != expected:
                wrong = token is not None and token.startswith("xox") and method == "apps.connections.open"
                result = {"ok": False, "error": "not_allowed_token_type" if wrong else "invalid_auth"}
            else:
                result = handler(self, args)
        if not result.get("ok"):
            call.error = str(result.get("error"))
        if self._drops.get(method, 0) > 0:
            self._drops[method] -= 1
            call.status = 0
            if request.transport is not None:
                request.transport.close()  # done, but the answer never arrives
            return web.Response(status=500)  # never reaches the client
        return web.json_response(result)

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": "netclaw",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://{self.host}:{self.port}/socket?ticket={uuid.uuid4().hex}"}

    def _post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel") or not args.get("user"):
            return {
                "ok": False,
                "error": "channel_not_found" if not args.get("channel") else "user_not_in_channel",
            }
        self.ephemeral.append({k: args.get(k) for k in ("channel", "user", "text", "thread_ts")})
        return {"ok": True, "message_ts": self.next_ts()}

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        text = args.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not text and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        message: dict[str, Any] = {
            "type": "message",
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": text,
            "ts": self.next_ts(),
            "team": TEAM_ID,
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        if metadata:
            message["metadata"] = metadata
        blocks = args.get("blocks")
        if blocks:
            message["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
        message["edits"] = []
        self.messages.setdefault(str(channel), []).append(message)
        self.shown[message["ts"]] = [(time.monotonic(), str(text or ""))]
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": _public(message)}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.find(str(args.get("channel")), str(args.get("ts")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.get("user") != BOT_USER_ID:
            return {"ok": False, "error": "cant_update_message"}
        message["edits"].append(message["text"])
        message["text"] = args.get("text")
        self.shown.setdefault(message["ts"], []).append((time.monotonic(), str(message["text"] or "")))
        if "blocks" in args:
            blocks = args["blocks"]
            message["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
        return {"ok": True, "channel": args["channel"], "ts": message["ts"], "text": message["text"]}

    def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel"))
        message = self.find(channel, str(args.get("ts")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        self.messages[channel].remove(message)
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    def _reaction(self, args: dict[str, Any], *, add: bool) -> dict[str, Any]:
        message = self.find(str(args.get("channel")), str(args.get("timestamp")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        names: list[str] = message.setdefault("reactions_by_bot", [])
        name = str(args.get("name"))
        if add:
            if name in names:
                return {"ok": False, "error": "already_reacted"}
            names.append(name)
        else:
            if name not in names:
                return {"ok": False, "error": "no_reaction"}
            names.remove(name)
        return {"ok": True}

    def _replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel"))
        root = str(args.get("ts"))
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(args.get("oldest") or 0)
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            m
            for m in self.messages[channel]
            if m["ts"] == root or (m.get("thread_ts") == root and float(m["ts"]) >= oldest)
        ]
        if not any(m["ts"] == root for m in found):
            return {"ok": False, "error": "thread_not_found"}
        shown = [_public(m, with_metadata=with_metadata) for m in sorted(found, key=lambda m: float(m["ts"]))]
        return {"ok": True, "messages": shown, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _history(self, args: dict[str, Any]) -> dict[str, Any]:
        """conversations.history: the channel's top-level messages, newest first."""
        channel = str(args.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(args.get("oldest") or 0)
        latest = float(args.get("latest") or "inf")
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            m
            for m in self.messages.get(channel, [])
            if m.get("thread_ts") in (None, m["ts"])
            and float(m["ts"]) >= oldest
            and (float(m["ts"]) < latest or (inclusive and float(m["ts"]) == latest))
        ]
        limit = int(args.get("limit") or 100)
        shown = [
            _public(m, with_metadata=with_metadata) for m in sorted(found, key=lambda m: -float(m["ts"]))
        ][:limit]
        return {"ok": True, "messages": shown, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._clock):06d}"
        self.files[file_id] = {
            "name": args.get("filename"),
            "length": int(args.get("length") or 0),
            "data": None,
        }
        return {
            "ok": True,
            "file_id": file_id,
            "upload_url": f"http://{self.host}:{self.port}/upload/{file_id}",
        }

    async def _download(self, request: web.Request) -> web.Response:
        entry = self.files.get(request.match_info["file_id"])
        self.calls.append(
            ApiCall(
                "files.download", {"file": request.match_info["file_id"]}, None, 200, None, time.monotonic()
            )
        )
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            # What Slack does without a valid token: its sign-in page, not an error status.
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        if entry is None or entry.get("data") is None:
            return web.Response(status=404, text="file not found")
        return web.Response(body=entry["data"], content_type="application/octet-stream")

    async def _upload(self, request: web.Request) -> web.Response:
        entry = self.files.get(request.match_info["file_id"])
        if entry is None:
            return web.Response(status=404, text="unknown upload")
        entry["data"] = await request.read()
        return web.Response(text="OK - " + str(len(entry["data"])))

    def _complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files")
        items = json.loads(files) if isinstance(files, str) else files or []
        shown = []
        for item in items:
            entry = self.files.get(item.get("id"))
            if entry is None or entry["data"] is None:
                return {"ok": False, "error": "file_not_found"}
            shown.append({"id": item["id"], "name": entry["name"], "title": item.get("title")})
        channel = str(args.get("channel_id") or "")
        if channel:
            message: dict[str, Any] = {
                "type": "message",
                "user": BOT_USER_ID,
                "bot_id": BOT_ID,
                "text": "",
                "ts": self.next_ts(),
                "files": shown,
                "edits": [],
            }
            if args.get("thread_ts"):
                message["thread_ts"] = str(args["thread_ts"])
            self.messages.setdefault(channel, []).append(message)
        return {"ok": True, "files": shown}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user") or "")
        name = self.users.get(user)
        if name is None:
            return {"ok": False, "error": "user_not_found"}
        return {
            "ok": True,
            "user": {
                "id": user,
                "name": name.lower(),
                "real_name": f"{name} Example",
                "profile": {"display_name": name, "real_name": f"{name} Example"},
            },
        }

    def _start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.streaming:
            return {"ok": False, "error": "unknown_method"}
        if not args.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments"}
        result = self._post_message(
            {
                "channel": args.get("channel"),
                "thread_ts": args["thread_ts"],
                "text": args.get("markdown_text") or "",
            }
            | {"blocks": [{"type": "stream"}]}
        )
        if result.get("ok"):
            message = self.find(str(args["channel"]), str(result["ts"]))
            assert message is not None
            message["streaming"] = True
            message["markdown"] = str(args.get("markdown_text") or "")
        return result

    def _append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self.find(str(args.get("channel")), str(args.get("ts")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if not message.get("streaming"):
            return {"ok": False, "error": "message_not_in_streaming_state"}
        message["markdown"] += str(args.get("markdown_text") or "")
        message["text"] = message["markdown"]
        return {"ok": True, "channel": args["channel"], "ts": message["ts"]}

    def _stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        result = self._append_stream(args)
        if result.get("ok"):
            message = self.find(str(args.get("channel")), str(args.get("ts")))
            assert message is not None
            message["streaming"] = False
            metadata = args.get("metadata")
            if metadata:
                message["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        return result

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.streaming:
            return {"ok": False, "error": "unknown_method"}
        self.statuses.append({k: args.get(k) for k in ("channel_id", "thread_ts", "status")})
        return {"ok": True}

    _METHODS: dict[str, Callable[[FakeSlack, dict[str, Any]], dict[str, Any]]] = {
        "users.info": _users_info,
        "chat.startStream": _start_stream,
        "chat.appendStream": _append_stream,
        "chat.stopStream": _stop_stream,
        "assistant.threads.setStatus": _set_status,
        "files.getUploadURLExternal": _upload_url,
        "files.completeUploadExternal": _complete_upload,
        "auth.test": _auth_test,
        "apps.connections.open": _connections_open,
        "chat.postMessage": _post_message,
        "chat.postEphemeral": _post_ephemeral,
        "chat.update": _update,
        "chat.delete": _delete,
        "reactions.add": lambda self, args: self._reaction(args, add=True),
        "reactions.remove": lambda self, args: self._reaction(args, add=False),
        "conversations.replies": _replies,
        "conversations.history": _history,
    }


def _public(message: dict[str, Any], *, with_metadata: bool = True) -> dict[str, Any]:
    hidden = {"edits", "reactions_by_bot"} | (set() if with_metadata else {"metadata"})
    return {k: v for k, v in message.items() if k not in hidden}


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class FakeSlackThread(LoopThread[FakeSlack]):
    """A :class:`FakeSlack` on its own event loop in a daemon thread, for sync tests.

    Attribute reads (``calls``, ``messages``, ``acks``) are snapshots of live lists; the
    async methods have sync twins that run on the fake's loop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(FakeSlack(**kwargs), "fake-slack", timeout=15.0)

    def _call(self, fn: Callable[[], T]) -> T:
        return self.read(lambda _server: fn())

    @property
    def api_url(self) -> str:
        return self.server.api_url

    # sync twins, run on the fake's loop

    def say(self, channel: str, text: str, **kwargs: Any) -> tuple[str, list[dict[str, Any]]]:
        return self.run(self.server.say(channel, text, **kwargs))

    def push(self, event: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.run(self.server.push(event, **kwargs))

    def redeliver(self, envelope: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.run(self.server.redeliver(envelope, **kwargs))

    def click(
        self, channel: str, message_ts: str, action_id: str, value: str, **kwargs: Any
    ) -> dict[str, Any]:
        return self.run(self.server.click(channel, message_ts, action_id, value, **kwargs))

    def close_socket(self) -> None:
        self.run(self.server.close_socket())

    def request_disconnect(self, reason: str = "refresh_requested") -> None:
        self.run(self.server.request_disconnect(reason))

    def fail_next(self, method: str, **kwargs: Any) -> None:
        self._call(lambda: self.server.fail_next(method, **kwargs))

    def drop_next(self, method: str, **kwargs: Any) -> None:
        self._call(lambda: self.server.drop_next(method, **kwargs))

    def calls_of(self, method: str) -> list[ApiCall]:
        return self._call(lambda: self.server.calls_of(method))

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[dict[str, Any]]:
        return self._call(lambda: [dict(m) for m in self.server.bot_messages(channel, thread_ts)])

    def find(self, channel: str, ts: str) -> dict[str, Any] | None:
        return self._call(lambda: _copy(self.server.find(channel, ts)))

    def shown(self, ts: str) -> list[tuple[float, str]]:
        """Every text the bot message ``ts`` showed, with when (monotonic)."""
        return self._call(lambda: list(self.server.shown.get(ts, [])))

    def file_data(self, file_id: str) -> tuple[str, bytes] | None:
        """(name, bytes) of a file the bot uploaded (or a person shared)."""

        def read() -> tuple[str, bytes] | None:
            entry = self.server.files.get(file_id)
            return None if entry is None or entry.get("data") is None else (entry["name"], entry["data"])

        return self._call(read)

    @property
    def acks(self) -> list[dict[str, Any]]:
        return self._call(lambda: list(self.server.acks))

    @property
    def connections(self) -> int:
        return self.server.connections

    def live_sockets(self) -> int:
        """Socket Mode connections open now."""
        return self._call(lambda: len([s for s in self.server.sockets if not s.ws.closed]))


def _copy(message: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if message is None else json.loads(json.dumps(message))
