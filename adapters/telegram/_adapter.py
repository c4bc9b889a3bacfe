"""The Telegram adapter: updates in (long polling or a webhook), chats and topics ↔ sessions.

Nothing here imports python-telegram-bot: calls go through a :class:`TelegramPort` and
updates arrive normalised as :class:`TelegramUpdate` (see ``_client.py``). How replies
appear (streaming edits, splitting, the 👀 reaction, approval buttons, files, the outbox)
is the shared :class:`~adapters.chat.ChatRenderer`'s.

- A private chat is the session ``telegram:<chat_id>`` (when ``allow_dms``); a group is
  ``telegram:<chat_id>``; a forum topic is ``telegram:<chat_id>:<topic_id>``. Memories
  stay in the chat (``telegram:<chat_id>``); a person is ``telegram:<user_id>`` to roles.
- In a group the bot answers when it is @mentioned, replied to, or given a command
  (``/status@bot``, or a bare netclaw command such as ``/stop``) — unless
  ``require_mention`` is off. What people say in between (seen only with privacy mode
  off) is read by the next turn there. Who may talk is the gateway's chat policy.
- Updates are admitted before they are confirmed: polling confirms an update (the next
  ``getUpdates`` offset) only after the gateway took it, a webhook answers 200 only then;
  a crash in between brings the update again and the gateway's identity
  ``telegram:<chat_id>:<message_id>`` admits it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib.util
import logging
import re
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from adapters.base import AdapterStatus, required_secret
from adapters.chat import (
    Asides,
    ButtonClick,
    ChatRenderer,
    Conversation,
    MessageRef,
    PostedMessages,
    RenderOptions,
    SharedFile,
    fetch_files,
    session_known,
    with_file_names,
)
from adapters.telegram._config import TelegramConfig
from adapters.telegram._port import SEEN_EMOJI, TelegramApiError, TelegramMessage, TelegramUpdate
from netclaw.commands import parse_command, parse_prompt
from netclaw.config import Settings
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.retry import Backoff
from netclaw.security.policy import ChatEvent, Place, dm_audience

if TYPE_CHECKING:
    from telegram import Bot

    from adapters.telegram._client import BotPort

log = logging.getLogger("adapters.telegram")

EDIT_INTERVAL_S = 1.5  # Telegram: about one message a second per chat; groups are paced by the port
WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as a secret_token
_SESSION = re.compile(r"telegram:(-?[0-9]+)(?::([0-9]+))?")


def session_id_for(chat_id: str, topic_id: str | None = None) -> str:
    return f"telegram:{chat_id}:{topic_id}" if topic_id is not None else f"telegram:{chat_id}"


def conversation_of(session_id: str) -> Conversation | None:
    found = _SESSION.fullmatch(session_id)
    return Conversation(found.group(1), found.group(2)) if found is not None else None


def _is_command(text: str) -> bool:
    """A netclaw chat command (``/stop``, ``/status``, ``/prompt …``): in a group, one of
    ours even without ``@bot``."""
    try:
        return parse_command(text) is not None or parse_prompt(text) is not None
    except ValueError:  # a /prompt with an unclosed quote: still meant for us
        return True


class TelegramAdapter:
    """See the module docstring."""

    name = "telegram"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        start_up = TelegramConfig.of(settings)
        self.token_env = start_up.token_env
        self.secret_env = start_up.webhook_secret_env
        self.mode = start_up.mode
        self.webhook_url = start_up.webhook_url
        self.api_url = start_up.api_url
        self.poll_timeout_s = start_up.poll_timeout_s
        self.options = RenderOptions.of(
            settings, edit_interval_s=edit_interval_s, reaction=SEEN_EMOJI, release_after_s=release_after_s
        )
        self._posted = PostedMessages(settings.data_dir / "telegram" / "posted.db")
        self._bot: Bot | None = None
        self._port: BotPort | None = None
        self.renderer: ChatRenderer | None = None
        self._asides: Asides[TelegramMessage] = Asides()
        self._poller: asyncio.Task[None] | None = None
        self._owed: asyncio.Future[None] | None = None
        self._offset: int | None = None  # the next update wanted (all before it are handled)
        self._running = False
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> TelegramConfig:
        """The current ``telegram`` section (follows a reload); how it connects needs a restart."""
        return TelegramConfig.of(self.gateway.settings)

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        try:
            self._token()
            if self.mode == "webhook":
                self._secret()
            if importlib.util.find_spec("telegram") is None:
                raise AdapterError(
                    "telegram: the python-telegram-bot library is not installed; install it with "
                    "pip install 'netclaw[telegram]'"
                )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return [web.post(WEBHOOK_PATH, self.webhook)] if self.mode == "webhook" else []

    async def probe(self) -> str:
        self.check()
        from adapters.telegram._client import probe_bot

        url = self.webhook_url if self.mode == "webhook" else None
        return await probe_bot(self._token(), self.api_url, self.token_env, url)

    async def start(self) -> None:
        self.check()
        from adapters.telegram._client import BotPort, start_bot

        self._status = AdapterStatus("starting", "connecting to Telegram")
        try:
            bot = await start_bot(self._token(), self.api_url, self.poll_timeout_s, self.token_env)
        except TelegramApiError as exc:
            self._status = AdapterStatus("failed", str(exc))
            raise
        self._bot = bot
        await self._posted.open()
        self._port = port = BotPort(bot, self._posted)
        try:
            if self.mode == "webhook":
                assert self.webhook_url is not None
                await port.set_webhook(self.webhook_url, self._secret())
            else:
                await port.leave_webhook()
        except TelegramApiError as exc:
            await self.stop()
            self._status = AdapterStatus("failed", str(exc))
            raise
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        self.gateway.offer_threads("telegram", self._open_thread)
        if self.mode == "polling":
            self._poller = asyncio.create_task(self._poll(port), name="telegram-polling")
            self._poller.add_done_callback(self._polling_ended)
        self._owed = asyncio.ensure_future(self.renderer.resume(conversation_of))
        detail = (
            f"@{port.username}, {'webhook ' + str(self.webhook_url) if self.mode == 'webhook' else 'polling'}"
        )
        self._status = AdapterStatus("running", detail)
        log.info("telegram: running as %s", detail)

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``): the chat, or
        ``<chat>:<topic>``."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: session_id_for(c.channel, c.thread), key=key, since=since
        )

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("telegram", None)
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(BaseException):
                await poller
        port = self._port
        if port is not None and self._offset is not None:
            # Confirm what was handled, so a restart does not fetch it again (it would be
            # admitted once anyway).
            with contextlib.suppress(TelegramApiError, TimeoutError):
                await asyncio.wait_for(port.updates(self._offset, 0), 5)
        if self.renderer is not None:
            await self.renderer.stop()
        if port is not None:
            await port.close()
        self._port = None
        bot, self._bot = self._bot, None
        if bot is not None:
            from adapters.telegram._client import stop_bot

            await stop_bot(bot)
        await self._posted.close()
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- updates in ---------------------------------------------------------------------------

    async def _poll(self, port: BotPort) -> None:
        """Long polling: each update handled (admitted) before the next offset confirms it."""
        backoff = Backoff(first_s=1.0, max_s=60.0, jitter=0.2)
        failures = 0
        while self._running:
            try:
                updates = await port.updates(self._offset, self.poll_timeout_s)
            except TelegramApiError as exc:
                if not exc.transient:  # the token revoked: the supervisor starts us afresh
                    log.error("telegram: polling stopped: %s", exc)
                    self._status = AdapterStatus("failed", str(exc))
                    return
                failures += 1
                wait = exc.retry_after if exc.retry_after is not None else backoff.delay(failures - 1)
                self._status = AdapterStatus("reconnecting", f"{exc}; polling again in {wait:.0f}s")
                log.warning("telegram: %s; polling again in %.1fs", exc, wait)
                await asyncio.sleep(wait)
                continue
            if failures:
                failures = 0
                self._status = AdapterStatus("running", f"@{port.username}, polling")
                if self.renderer is not None:
                    self.renderer.reconnected()
            for update in updates:
                await self.dispatch(update)
                self._offset = update.update_id + 1

    def _polling_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or not self._running:
            return
        exc = task.exception()
        if exc is not None:
            log.error("telegram: polling failed: %r", exc)
            self._status = AdapterStatus("failed", f"polling failed: {type(exc).__name__}: {exc}")

    async def webhook(self, request: web.Request) -> web.StreamResponse:
        """``POST /telegram/webhook``: an update from Telegram, proven by the secret header.
        200 once it is admitted; otherwise Telegram sends it again."""
        given = request.headers.get(SECRET_HEADER, "")
        secret = read_secret(self.secret_env) or ""
        if not secret or not hmac.compare_digest(given.encode(), secret.encode()):
            return web.json_response(
                {"error": "unauthorized", "message": f"missing or wrong {SECRET_HEADER}"}, status=401
            )
        port = self._port
        if not self._running or port is None:
            return web.json_response(
                {"error": "unavailable", "message": "the Telegram channel is not running"}, status=503
            )
        try:
            data = await request.json()
            update = port.parse(data)
        except (ValueError, TelegramApiError) as exc:
            return web.json_response({"error": "invalid_update", "message": str(exc)}, status=400)
        await self.dispatch(update)
        return web.json_response({})

    async def dispatch(self, update: TelegramUpdate) -> None:
        """One update, from polling or the webhook. A failure is logged: one bad update
        must not stop the ones after it."""
        try:
            if update.click is not None:
                self.clicked(update.click)
            elif update.message is not None:
                await self.handle(update.message)
        except Exception:  # logged, and the next update goes on
            log.exception("telegram: update %d could not be handled", update.update_id)

    def clicked(self, click: ButtonClick) -> None:
        if self._running and self.renderer is not None:
            self.renderer.clicked(click)

    async def handle(self, message: TelegramMessage) -> str | None:
        """One incoming message. Returns the session id it was admitted to, or None."""
        renderer, port = self.renderer, self._port
        if not self._running or renderer is None or port is None or message.from_self:
            return None
        session_id = session_id_for(message.chat_id, message.topic_id)
        target = Conversation(message.chat_id, message.topic_id)
        addressed = message.addressed or (not message.is_private and _is_command(message.text))
        event = ChatEvent(
            platform="telegram",
            channel_id=message.chat_id,
            user_id=message.user_id,
            is_dm=message.is_private,
            mentioned=addressed,
            from_bot=message.from_bot,
        )
        permit = self.gateway.permit(event)
        if permit is None:
            if (
                not message.is_private
                and not message.from_bot
                and not message.text.startswith("/")  # a command for another bot says nothing
                and message.chat_id in self.config.channels
                and await self._knows(session_id)
            ):
                self._asides.add(session_id, message)  # said in a followed chat, not to us
            return None
        if not message.text.strip() and not message.files:
            return None
        files, refused = await fetch_files(
            [
                SharedFile(f.name, f.mime_type, f.size, partial(port.download, f.file_id))
                for f in message.files
            ],
            "telegram",
        )
        if refused:
            await renderer.note(target, refused)
        if not message.text.strip() and not files:
            return None
        # What was said meanwhile goes with the next message to the model (a command keeps it).
        earlier = [] if parse_command(message.text) is not None else self._asides.take(session_id)
        inbound = Inbound(
            session_id,
            message.text,
            user=message.user_id,
            identity=f"telegram:{message.chat_id}:{message.message_id}",
            user_name=message.user_name or None,
            prior=[PriorMessage(m.user_id, m.user_name, with_file_names(m.text, m.files)) for m in earlier],
            files=files,
            # Memories stay in the chat (a forum's topics share them); a private chat is one
            # person's, "team" only when a user allowlist vetted who may write.
            place=Place(
                f"telegram:{message.chat_id}", dm_audience(self.config) if message.is_private else None
            ),
        )
        # None: refused (noted), a redelivery already handled, or not followed (shutting down).
        return (
            session_id
            if await renderer.taken(permit, inbound, target, MessageRef(message.chat_id, message.message_id))
            else None
        )

    def following(self) -> list[str]:
        return self.renderer.following() if self.renderer is not None else []

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "telegram")

    def _token(self) -> str:
        return required_secret(
            self.token_env, what="bot token", key="telegram.token_env", docs="docs/channels/telegram.md"
        )

    def _secret(self) -> str:
        secret = read_secret(self.secret_env)
        if not secret:
            raise AdapterError(
                f"telegram: webhook mode needs a secret in {self.secret_env} "
                f"(telegram.webhook_secret_env), so only Telegram can post updates; "
                f"{where_to_put(self.secret_env)} (see docs/channels/telegram.md)"
            )
        if not _SECRET.fullmatch(secret):
            raise AdapterError(
                f"telegram: the webhook secret in {self.secret_env} must be 1-256 characters "
                "from A-Z, a-z, 0-9, _ and - (Telegram's rule for secret_token)"
            )
        return secret
