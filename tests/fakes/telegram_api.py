"""A local fake of Telegram's Bot API, for the real python-telegram-bot to talk to.

:class:`FakeTelegram` is an aiohttp server on 127.0.0.1 answering ``/bot<token>/<method>``
the way Telegram does (form, multipart or JSON arguments; ``{"ok": true, "result"}``, or
``{"ok": false, "error_code", "description"[, "parameters": {"retry_after"}]}``):

- ``getMe``; ``getUpdates`` with long-poll ``timeout`` and offset semantics (an offset
  confirms every earlier update, which is then gone for good; 409 while a webhook is set);
- ``sendMessage``, ``editMessageText`` (``reply_markup`` left out removes the inline
  keyboard; "message is not modified" and "message to edit not found" as Telegram says
  them), ``deleteMessage``, ``setMessageReaction``, ``sendChatAction``,
  ``answerCallbackQuery``, ``sendDocument`` / ``sendPhoto`` (multipart);
- ``getFile`` and the file download path ``/file/bot<token>/<file_path>``;
- ``setWebhook`` / ``deleteWebhook`` / ``getWebhookInfo``: while a webhook is set, every
  update is POSTed to it with the ``X-Telegram-Bot-Api-Secret-Token`` header, and posted
  again (as Telegram does) until it is answered 2xx (to ``webhook_reaches`` when set:
  where the public URL leads, as through a proxy; see :meth:`FakeTelegram.reach`).

It keeps the chats' messages, so posts, edits and deletes agree, and records every call
and every text a bot message showed, with when (``Sent.shown``: its first text, then each
edit). Tests inject a person's message (:meth:`FakeTelegram.say`, with mentions, commands,
replies, a topic, a document or a photo), a forum topic a person opens
(:meth:`FakeTelegram.open_topic`), a press on an inline button
(:meth:`FakeTelegram.click`) or the same update again (:meth:`FakeTelegram.redeliver`);
:meth:`FakeTelegram.fail_next` answers the next N calls of a method with an error (a 429
with ``retry_after`` by default); :meth:`FakeTelegram.hold_next` carries them out but
withholds the answer a while. :class:`FakeTelegramThread` runs one on its own loop for
sync tests (and for daemons in subprocesses).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from tests.fakes._loop_thread import LoopThread

T = TypeVar("T")

TOKEN = "123456:fake-telegram-token"
BOT_ID = 7000
BOT_USERNAME = "netclaw_test_bot"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice", "username": "alice"}
BOB = {"id": 43, "is_bot": False, "first_name": "Bob", "username": "bob"}
CAROL = {"id": 44, "is_bot": False, "first_name": "Carol", "username": "carol"}
MAX_TEXT = 4096


@dataclass
class ApiCall:
    method: str
    args: dict[str, Any]
    status: int
    at: float  # time.monotonic() on arrival


@dataclass
class _Failure:
    count: int
    status: int
    description: str
    retry_after: float | None


@dataclass
class Delivery:
    """One POST of an update to the webhook."""

    update_id: int
    status: int  # 0: the connection failed
    secret: str | None


@dataclass
class Sent:
    """A message in a chat (the bot's or a person's), as the fake keeps it."""

    data: dict[str, Any]
    edits: list[float] = field(default_factory=list)  # monotonic times of each edit
    shown: list[tuple[float, str]] = field(default_factory=list)  # (when, text): posted, then each edit
    deleted: bool = False
    reactions: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return str(self.data.get("text") or self.data.get("caption") or "")

    @property
    def from_bot(self) -> bool:
        return bool(self.data.get("from", {}).get("id") == BOT_ID)


def _chat(chat_id: int) -> dict[str, Any]:
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": "Alice"}
    return {"id": chat_id, "type": "supergroup", "title": f"group {chat_id}", "is_forum": True}


class FakeTelegram:
    def __init__(self, *, host: str = "127.0.0.1", token: str = TOKEN) -> None:
        self.host = host
        self.token = token
        self._port = 0
        self._runner: web.AppRunner | None = None
        self.calls: list[ApiCall] = []
        self.updates: list[dict[str, Any]] = []  # not yet confirmed
        self.sent_updates: list[dict[str, Any]] = []  # every update, in order
        self.messages: dict[int, list[Sent]] = {}  # chat id → its messages, in order
        self.files: dict[str, tuple[bytes, str, str]] = {}  # file_id → (data, name, mime)
        self.answers: list[dict[str, Any]] = []  # answerCallbackQuery arguments
        self.chat_actions: list[dict[str, Any]] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        # Where the public webhook URL leads (the proxy in front of a daemon whose port is
        # known only once it listens); None: the webhook URL itself.
        self.webhook_reaches: str | None = None
        self.deliveries: list[Delivery] = []
        self.polling = 0  # getUpdates requests under way
        self.most_polling = 0
        self._failures: dict[str, list[_Failure]] = {}
        self._holds: dict[str, list[float]] = {}  # method → seconds to withhold its next answers
        self._update_ids = itertools.count(100)
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._file_ids = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._deliverer: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._closing = False  # long polls under way return at once

    # ----- lifecycle

    @property
    def port(self) -> int:
        if self._runner is None:
            raise RuntimeError("FakeTelegram is not started")
        return self._port

    @property
    def api_url(self) -> str:
        """The Bot API base (``telegram.api_url`` in netclaw's config)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        self._changed = asyncio.Condition()
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        await site.start()
        self._runner = runner
        server = site._server
        assert server is not None
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._http = aiohttp.ClientSession()
        return self.api_url

    async def stop(self) -> None:
        self._closing = True
        if self._changed is not None:
            await self._notify()
        if self._deliverer is not None:
            self._deliverer.cancel()
            with contextlib.suppress(BaseException):
                await self._deliverer
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # ----- scripting

    def fail_next(
        self,
        method: str,
        count: int = 1,
        *,
        status: int = 429,
        description: str = "Too Many Requests: retry after 1",
        retry_after: float | None = 1,
    ) -> None:
        self._failures.setdefault(method, []).append(_Failure(count, status, description, retry_after))

    def hold_next(self, method: str, seconds: float, count: int = 1) -> None:
        """Carry out the next ``count`` calls of ``method`` but withhold each answer for
        ``seconds``: what Telegram did is visible at once, while the caller still waits
        (a process killed meanwhile never learns it; an answer lost on the way)."""
        self._holds.setdefault(method, []).extend([seconds] * count)

    def _next_id(self, chat_id: int) -> int:
        return next(self._message_ids.setdefault(chat_id, itertools.count(1)))

    async def say(
        self,
        chat_id: int,
        text: str = "",
        *,
        user: dict[str, Any] | None = None,
        topic: int | None = None,
        reply_to: int | None = None,
        document: tuple[str, bytes, str] | None = None,
        photo: bytes | None = None,
        voice: tuple[bytes, str] | None = None,
    ) -> dict[str, Any]:
        """A person's message in ``chat_id`` (positive: a private chat; negative: a forum
        supergroup), delivered as an update. ``@name`` mentions and a leading ``/command``
        get their entities as Telegram's clients make them."""
        message: dict[str, Any] = {
            "message_id": self._next_id(chat_id),
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": user or ALICE,
        }
        media = document or photo or voice
        key, entities_key = ("caption", "caption_entities") if media else ("text", "entities")
        if text:
            message[key] = text
            entities = [
                {"type": "mention", "offset": m.start(), "length": m.end() - m.start()}
                for m in re.finditer(r"@[A-Za-z0-9_]+", text)
            ]
            command = re.match(r"/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?", text)
            if command is not None:
                entities = [e for e in entities if e["offset"] >= command.end()]
                entities.insert(0, {"type": "bot_command", "offset": 0, "length": command.end()})
            if entities:
                message[entities_key] = entities
        if topic is not None:
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
            opened = self.find(chat_id, topic)
            if reply_to is None and opened is not None and "forum_topic_created" in opened.data:
                message["reply_to_message"] = opened.data  # as Telegram: "replies" to its topic
        if reply_to is not None:
            replied = self.find(chat_id, reply_to)
            assert replied is not None, f"no message {reply_to} in {chat_id}"
            message["reply_to_message"] = replied.data
        if document is not None:
            name, data, mime = document
            message["document"] = self._add_file(data, name, mime)
        if voice is not None:  # a voice note (bytes, MIME type), as a client records it
            data, mime = voice
            added = self._add_file(data, f"voice{len(self.files) + 1}", mime)
            message["voice"] = {**_size_of(added), "duration": max(1, len(data) // 32_000), "mime_type": mime}
        if photo is not None:
            small = self._add_file(photo[:10], "small.jpg", "image/jpeg")
            large = self._add_file(photo, "photo.jpg", "image/jpeg")
            message["photo"] = [
                {**_size_of(small), "width": 90, "height": 90},
                {**_size_of(large), "width": 800, "height": 600},
            ]
        self.messages.setdefault(chat_id, []).append(Sent(message))
        await self._push({"message": message})
        return message

    async def open_topic(self, chat_id: int, name: str, *, user: dict[str, Any] | None = None) -> int:
        """A person opens a forum topic in ``chat_id`` (a forum supergroup): the service
        message ``forum_topic_created``, delivered as an update, whose id is the topic's
        ``message_thread_id`` from then on. A message said in it (``say(topic=...)``) that
        replies to nothing else "replies" to this one, as on Telegram."""
        message_id = self._next_id(chat_id)
        message: dict[str, Any] = {
            "message_id": message_id,
            "message_thread_id": message_id,
            "is_topic_message": True,
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": user or ALICE,
            "forum_topic_created": {"name": name, "icon_color": 0x6FB9F0},
        }
        self.messages.setdefault(chat_id, []).append(Sent(message))
        await self._push({"message": message})
        return message_id

    async def click(
        self, chat_id: int, message_id: int, data: str, *, user: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A press on an inline button of message ``message_id``."""
        message = self.find(chat_id, message_id)
        assert message is not None, f"no message {message_id} in {chat_id}"
        query = {
            "id": f"cq{next(self._update_ids)}",
            "from": user or ALICE,
            "chat_instance": "ci1",
            "message": message.data,
            "data": data,
        }
        return await self._push({"callback_query": query})

    async def redeliver(self, update: dict[str, Any]) -> dict[str, Any]:
        """The same update again, as Telegram sends one it does not know was handled."""
        self.updates.append(update)
        self.sent_updates.append(update)
        await self._notify()
        self._deliver_soon()
        return update

    async def _push(self, content: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": next(self._update_ids), **content}
        return await self.redeliver(update)

    def _add_file(self, data: bytes, name: str, mime: str) -> dict[str, Any]:
        number = next(self._file_ids)
        file_id = f"file{number}"
        self.files[file_id] = (data, name, mime)
        return {
            "file_id": file_id,
            "file_unique_id": f"u{number}",
            "file_name": name,
            "mime_type": mime,
            "file_size": len(data),
        }

    # ----- what tests read

    def find(self, chat_id: int, message_id: int) -> Sent | None:
        return next((m for m in self.messages.get(chat_id, []) if m.data["message_id"] == message_id), None)

    def bot_messages(self, chat_id: int, topic: int | None = None) -> list[Sent]:
        """The bot's messages in the chat (in ``topic``, or outside any topic), not deleted."""
        return [
            m
            for m in self.messages.get(chat_id, [])
            if m.from_bot and not m.deleted and m.data.get("message_thread_id") == topic
        ]

    def bot_texts(self, chat_id: int, topic: int | None = None) -> list[str]:
        return [m.text for m in self.bot_messages(chat_id, topic) if "document" not in m.data]

    def calls_of(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    # ----- the API

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args, uploads = await _arguments(request)
        at = time.monotonic()
        if request.match_info["token"] != self.token:
            self.calls.append(ApiCall(method, args, 401, at))
            return _error(401, "Unauthorized")
        failures = self._failures.get(method)
        if failures:
            failure = failures[0]
            failure.count -= 1
            if failure.count <= 0:
                failures.pop(0)
            self.calls.append(ApiCall(method, args, failure.status, at))
            return _error(failure.status, failure.description, failure.retry_after)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            self.calls.append(ApiCall(method, args, 404, at))
            return _error(404, "Not Found")
        call = ApiCall(method, args, 200, at)
        self.calls.append(call)
        try:
            result = handler(args, uploads)
            if asyncio.iscoroutine(result):
                result = await result
        except _ApiError as exc:
            call.status = exc.status
            return _error(exc.status, exc.description)
        await self._notify()
        holds = self._holds.get(method)
        if holds:
            await asyncio.sleep(holds.pop(0))
        return web.json_response({"ok": True, "result": result})

    def _m_getMe(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "netclaw",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _m_getUpdates(self, args: dict[str, Any], uploads: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
            )
        offset = int(args.get("offset") or 0)
        if offset:  # confirms every update before it: gone for good
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        timeout = float(args.get("timeout") or 0)
        limit = int(args.get("limit") or 100)
        assert self._changed is not None
        self.polling += 1
        self.most_polling = max(self.most_polling, self.polling)
        try:
            deadline = time.monotonic() + timeout
            async with self._changed:
                while not self.updates and not self._closing and time.monotonic() < deadline:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
        finally:
            self.polling -= 1
        return self.updates[:limit]

    def _chat_id(self, args: dict[str, Any]) -> int:
        return int(args["chat_id"])

    def _bot_message(self, args: dict[str, Any], **content: Any) -> dict[str, Any]:
        chat_id = self._chat_id(args)
        message: dict[str, Any] = {
            "message_id": self._next_id(chat_id),
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "netclaw", "username": BOT_USERNAME},
            **content,
        }
        if args.get("message_thread_id"):
            message["message_thread_id"] = int(args["message_thread_id"])
            message["is_topic_message"] = True
        if args.get("reply_markup"):
            message["reply_markup"] = args["reply_markup"]
        sent = Sent(message)
        if sent.text:
            sent.shown.append((time.monotonic(), sent.text))
        self.messages.setdefault(chat_id, []).append(sent)
        return message

    def _m_sendMessage(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        text = str(args.get("text") or "")
        if not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(text) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        if args.get("parse_mode"):
            raise _ApiError(400, "Bad Request: can't parse entities: this fake takes plain text only")
        return self._bot_message(args, text=text)

    def _m_editMessageText(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        message = self.find(self._chat_id(args), int(args["message_id"]))
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to edit not found")
        text = str(args.get("text") or "")
        if len(text) > MAX_TEXT:
            raise _ApiError(400, "Bad Request: message is too long")
        markup = args.get("reply_markup")
        if text == message.text and markup == message.data.get("reply_markup"):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        message.data["text"] = text
        if markup:
            message.data["reply_markup"] = markup
        else:
            message.data.pop("reply_markup", None)
        message.edits.append(time.monotonic())
        message.shown.append((message.edits[-1], text))
        return message.data

    def _m_deleteMessage(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        message = self.find(self._chat_id(args), int(args["message_id"]))
        if message is None or message.deleted:
            raise _ApiError(400, "Bad Request: message to delete not found")
        message.deleted = True
        return True

    def _m_setMessageReaction(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        message = self.find(self._chat_id(args), int(args["message_id"]))
        if message is None:
            raise _ApiError(400, "Bad Request: message to react not found")
        message.reactions = [r["emoji"] for r in args.get("reaction") or []]
        return True

    def _m_sendChatAction(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        self.chat_actions.append(args)
        return True

    def _m_answerCallbackQuery(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        if any(a["callback_query_id"] == args["callback_query_id"] for a in self.answers):
            raise _ApiError(
                400, "Bad Request: query is too old and response timeout expired or query ID is invalid"
            )
        self.answers.append(args)
        return True

    def _m_sendDocument(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        name, data, mime = _upload(uploads, "document")
        content: dict[str, Any] = {"document": self._add_file(data, name, mime)}
        if args.get("caption"):
            content["caption"] = args["caption"]
        return self._bot_message(args, **content)

    def _m_sendVoice(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        name, data, mime = _upload(uploads, "voice")
        added = self._add_file(data, name, mime)
        return self._bot_message(args, voice={**_size_of(added), "duration": 1, "mime_type": mime})

    def _m_sendAudio(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        name, data, mime = _upload(uploads, "audio")
        added = self._add_file(data, name, mime)
        return self._bot_message(
            args, audio={**_size_of(added), "duration": 1, "mime_type": mime, "file_name": name}
        )

    def _m_sendPhoto(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        name, data, mime = _upload(uploads, "photo")
        return self._bot_message(
            args, photo=[{**_size_of(self._add_file(data, name, mime)), "width": 1, "height": 1}]
        )

    def _m_getFile(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        file_id = str(args["file_id"])
        if file_id not in self.files:
            raise _ApiError(400, "Bad Request: invalid file_id")
        data, name, _ = self.files[file_id]
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data),
            "file_path": f"documents/{file_id}/{name}",
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        found = re.fullmatch(r"documents/([^/]+)/.+", request.match_info["path"])
        if found is None or found.group(1) not in self.files:
            return web.Response(status=404)
        self.calls.append(ApiCall("download", {"path": request.match_info["path"]}, 200, time.monotonic()))
        return web.Response(body=self.files[found.group(1)][0])

    def _m_setWebhook(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        self.webhook_url = str(args.get("url") or "")
        self.webhook_secret = args.get("secret_token")
        self._deliver_soon()
        return True

    def _m_deleteWebhook(self, args: dict[str, Any], uploads: dict[str, Any]) -> bool:
        self.webhook_url = ""
        self.webhook_secret = None
        return True

    def _m_getWebhookInfo(self, args: dict[str, Any], uploads: dict[str, Any]) -> dict[str, Any]:
        failed = [d for d in self.deliveries if d.status not in range(200, 300)]
        info: dict[str, Any] = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self.updates) if self.webhook_url else 0,
        }
        if failed:
            info["last_error_date"] = int(time.time())
            info["last_error_message"] = f"Wrong response from the webhook: {failed[-1].status}"
        return info

    # ----- the webhook: updates posted until answered 2xx

    def reach(self, url: str | None) -> None:
        """The public webhook URL leads to ``url`` from now on (a daemon that listens
        there); waiting updates are posted to it."""
        self.webhook_reaches = url
        self._deliver_soon()

    def _deliver_soon(self) -> None:
        if self.webhook_url and (self._deliverer is None or self._deliverer.done()):
            self._deliverer = asyncio.ensure_future(self._deliver())

    async def _deliver(self) -> None:
        assert self._http is not None
        while self.webhook_url and self.updates:
            update = self.updates[0]
            headers = {"X-Telegram-Bot-Api-Secret-Token": self.webhook_secret} if self.webhook_secret else {}
            try:
                url = self.webhook_reaches or self.webhook_url
                async with self._http.post(url, json=update, headers=headers) as response:
                    status = response.status
            except aiohttp.ClientError:
                status = 0
            self.deliveries.append(Delivery(update["update_id"], status, self.webhook_secret))
            if 200 <= status < 300:
                self.updates.pop(0)
            else:
                await asyncio.sleep(0.2)
            await self._notify()


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def _error(status: int, description: str, retry_after: float | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)


def _size_of(file: dict[str, Any]) -> dict[str, Any]:
    return {k: file[k] for k in ("file_id", "file_unique_id", "file_size")}


def _upload(uploads: dict[str, Any], name: str) -> tuple[str, bytes, str]:
    if name not in uploads:
        raise _ApiError(400, f"Bad Request: there is no {name} in the request")
    return uploads[name]  # type: ignore[no-any-return]


async def _arguments(request: web.Request) -> tuple[dict[str, Any], dict[str, tuple[str, bytes, str]]]:
    """A Bot API call's arguments (query, form, multipart or JSON; JSON-encoded values
    decoded) and its uploaded files."""
    args: dict[str, Any] = dict(request.query)
    uploads: dict[str, tuple[str, bytes, str]] = {}
    if request.content_type == "application/json":
        args.update(await request.json())
    elif request.can_read_body:
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                uploads[key] = (value.filename, value.file.read(), value.content_type)
            else:
                args[key] = value
    for key, value in list(args.items()):
        if isinstance(value, str) and value[:1] in "[{":
            with contextlib.suppress(ValueError):
                args[key] = json.loads(value)
    # A multipart upload may name its file through attach://<name>.
    for key, value in list(args.items()):
        if isinstance(value, str) and value.startswith("attach://") and value[9:] in uploads:
            uploads[key] = uploads[value[9:]]
    return args, uploads


class FakeTelegramThread(LoopThread[FakeTelegram]):
    """A :class:`FakeTelegram` on its own event loop in a daemon thread, for sync tests.

    Attribute reads are of live state (read them through :meth:`read` for a consistent
    snapshot); the async methods have sync twins that run on the fake's loop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(FakeTelegram(**kwargs), "fake-telegram", timeout=15.0)

    @property
    def api_url(self) -> str:
        return self.server.api_url

    # sync twins, run on the fake's loop

    def say(self, chat_id: int, text: str = "", **kwargs: Any) -> dict[str, Any]:
        return self.run(self.server.say(chat_id, text, **kwargs))

    def open_topic(self, chat_id: int, name: str, **kwargs: Any) -> int:
        return self.run(self.server.open_topic(chat_id, name, **kwargs))

    def click(self, chat_id: int, message_id: int, data: str, **kwargs: Any) -> dict[str, Any]:
        return self.run(self.server.click(chat_id, message_id, data, **kwargs))

    def redeliver(self, update: dict[str, Any]) -> dict[str, Any]:
        return self.run(self.server.redeliver(update))

    def fail_next(self, method: str, count: int = 1, **kwargs: Any) -> None:
        self.read(lambda s: s.fail_next(method, count, **kwargs))

    def hold_next(self, method: str, seconds: float, count: int = 1) -> None:
        self.read(lambda s: s.hold_next(method, seconds, count))

    def bot_texts(self, chat_id: int, topic: int | None = None) -> list[str]:
        return self.read(lambda s: s.bot_texts(chat_id, topic))

    def bot_messages(self, chat_id: int, topic: int | None = None) -> list[Sent]:
        return self.read(lambda s: s.bot_messages(chat_id, topic))

    def calls_of(self, method: str) -> list[ApiCall]:
        return self.read(lambda s: s.calls_of(method))

    def wait_for(self, predicate: Callable[[FakeTelegram], T], what: str, timeout: float = 15.0) -> T:
        """Until ``predicate(server)`` (read on the fake's loop) is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.read(predicate)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)
