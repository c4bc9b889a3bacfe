"""Everything that touches python-telegram-bot: the bot, the real port, update
normalisation and the translation of its exceptions into netclaw's (imported only when
the adapter starts, so a daemon without the library still runs; ``check()`` reports it).

Only ``telegram.Bot`` is used — one httpx client per bot, a typed method per Bot API
call, its objects parsed from the answers. Its ``Application`` (with the ``Updater``)
is not: it runs its own polling loop, update queue, handler dispatch and retry policy,
and owns its start and stop. netclaw needs those to be its own — the offset confirmed
only after an update was admitted to the gateway, errors mapped to the supervisor's
states, one shutdown order — so the adapter polls ``getUpdates`` itself and serves the
webhook on the daemon's own listener.

Rate limits: Telegram answers flood control with HTTP 429 and ``retry_after``. The bot
does not retry; the answer becomes a transient :class:`TelegramApiError` carrying
``retry_after``, which the renderer's retries (:mod:`netclaw.retry`) honour. Until then
the port refuses further calls to that chat itself (Telegram extends the wait for each
call made during it), and paces edits: one a second in a chat (:data:`EDIT_GAP_S`), one
every :data:`GROUP_EDIT_GAP_S` in a group (Telegram allows about 20 messages a minute
there). A paced edit is refused with how long to wait: a streaming update is shown by
the next one, a final one is retried after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import mimetypes
import re
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReactionTypeEmoji,
    Update,
)
from telegram.constants import ChatAction, ChatType, MessageEntityType
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from adapters.chat import Button, ButtonClick, Conversation, MessageRef, PostedMessages
from adapters.telegram._port import (
    CALLBACK_DATA_LIMIT,
    CALLBACK_PREFIX,
    MESSAGE_LIMIT,
    TelegramApiError,
    TelegramFile,
    TelegramMessage,
    TelegramUpdate,
    rate_limited,
)

log = logging.getLogger("adapters.telegram")

# The library warns, on every flood-control answer, that RetryAfter.retry_after becomes a
# timedelta in its next major version; both types are read here (``_seconds``).
warnings.filterwarnings("ignore", message=r".*`retry_after` will be of type", category=PTBDeprecationWarning)

T = TypeVar("T")

DEFAULT_API_URL = "https://api.telegram.org"
ALLOWED_UPDATES = ("message", "callback_query")  # what the bot asks Telegram for
EDIT_GAP_S = 1.0  # the least time between two edits in one chat (about a message a second)
GROUP_EDIT_GAP_S = 3.0  # ... in one group (about 20 messages a minute)
# A refusal's wait is slept on the event loop's clock. uvloop's counts whole milliseconds
# and rounds a delay to one, so a sleep of exactly what is left can end up to 1.5 ms
# short and be refused again (a final edit then spent its retries in a few milliseconds).
WAIT_MARGIN_S = 0.005
ANSWER_CLICK_AFTER_S = 1.0  # a press not answered by then is answered without a text
NO_PREVIEWS = LinkPreviewOptions(is_disabled=True)  # a model's links never unfurl
ANONYMOUS_ADMIN_ID = 1087968824  # @GroupAnonymousBot: an admin posting as the group


def make_bot(token: str, api_url: str | None, poll_timeout_s: int) -> Bot:
    """A bot on Telegram's Bot API (or ``api_url``, a test double): one pool for calls,
    one connection for the long poll (its read timeout grows by the poll's own)."""
    base = api_url or DEFAULT_API_URL
    return Bot(
        token,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=HTTPXRequest(
            connection_pool_size=8,
            connect_timeout=10.0,
            read_timeout=20.0,
            write_timeout=20.0,
            pool_timeout=5.0,
            media_write_timeout=60.0,
        ),
        get_updates_request=HTTPXRequest(
            connection_pool_size=1,
            connect_timeout=10.0,
            read_timeout=10.0,
            pool_timeout=poll_timeout_s + 20.0,
        ),
    )


# -- normalisation ------------------------------------------------------------------------------


def normalise(message: Message, bot_id: int, username: str) -> TelegramMessage | None:
    """A library message as the adapter sees it; None for service messages (joins, pins,
    topics opened, ...) and anything without text or files."""
    chat = message.chat
    author = message.from_user
    text = message.text or message.caption or ""
    files = _files_of(message)
    if not text and not files:
        return None
    mention = re.compile(rf"@{re.escape(username)}\b", re.IGNORECASE) if username else None
    addressed = False
    entities = message.entities or message.caption_entities or ()
    for entity in entities:
        if entity.type == MessageEntityType.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            addressed = True
    command = re.match(r"\s*([/!][A-Za-z0-9_]+)@([A-Za-z0-9_]+)\b", text)
    if command is not None and command.group(2).lower() == username.lower():
        text = text[: command.start(1)] + command.group(1) + text[command.end() :]  # /cmd@bot → /cmd
        addressed = True
    if mention is not None and mention.search(text):
        text = mention.sub("", text)
        addressed = True
    replied = message.reply_to_message
    if (
        replied is not None
        and replied.from_user is not None
        and replied.from_user.id == bot_id
        and replied.forum_topic_created is None  # in a forum, every message "replies" to its topic
    ):
        addressed = True
    topic = message.message_thread_id if message.is_topic_message else None
    from_bot = author is None or author.is_bot or author.id == ANONYMOUS_ADMIN_ID
    return TelegramMessage(
        message_id=str(message.message_id),
        chat_id=str(chat.id),
        user_id=str(author.id) if author is not None else "",
        text=" ".join(text.split(" ")).strip(),
        is_private=chat.type == ChatType.PRIVATE,
        topic_id=str(topic) if topic is not None else None,
        addressed=addressed,
        from_bot=from_bot,
        from_self=author is not None and author.id == bot_id,
        user_name=(author.full_name or author.username or "") if author is not None else "",
        files=files,
    )


def _files_of(message: Message) -> tuple[TelegramFile, ...]:
    found = []
    if message.document is not None:
        doc = message.document
        found.append(
            TelegramFile(
                doc.file_name or f"document-{doc.file_unique_id}",
                doc.file_id,
                doc.mime_type or "application/octet-stream",
                doc.file_size,
            )
        )
    if message.photo:
        largest = message.photo[-1]  # Telegram lists a photo's sizes smallest first
        found.append(
            TelegramFile(f"photo-{message.message_id}.jpg", largest.file_id, "image/jpeg", largest.file_size)
        )
    if message.voice is not None:  # a voice note: heard by speech-to-text before its turn
        voice = message.voice
        mime = voice.mime_type or "audio/ogg"
        found.append(
            TelegramFile(f"voice-{message.message_id}{_suffix(mime)}", voice.file_id, mime, voice.file_size)
        )
    if message.audio is not None:
        audio = message.audio
        mime = audio.mime_type or "audio/mpeg"
        name = audio.file_name or f"audio-{message.message_id}{_suffix(mime)}"
        found.append(TelegramFile(name, audio.file_id, mime, audio.file_size))
    return tuple(found)


def _suffix(mime: str) -> str:
    known = {"audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/wav": ".wav"}
    return known.get(mime) or mimetypes.guess_extension(mime) or ""


# -- errors -------------------------------------------------------------------------------------


def _seconds(value: int | float | dt.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def translate_error(exc: BaseException, what: str, *, token_env: str | None = None) -> TelegramApiError:
    """python-telegram-bot's exceptions as netclaw's: a message a person can act on, and
    whether a retry may help."""
    if isinstance(exc, TelegramApiError):
        return exc
    if isinstance(exc, RetryAfter):
        with warnings.catch_warnings():  # an int today, a timedelta in the next major version
            warnings.simplefilter("ignore", PTBDeprecationWarning)
            return rate_limited(_seconds(exc.retry_after), what)
    if isinstance(exc, InvalidToken):
        where = f" in {token_env}" if token_env else ""
        return TelegramApiError(
            f"Telegram rejected the bot token{where} ({exc.message}); copy it again from "
            "@BotFather (/mybots → your bot → API Token)",
            status=401,
        )
    if isinstance(exc, ChatMigrated):
        return TelegramApiError(
            f"could not {what}: the group became a supergroup with id {exc.new_chat_id}; put that "
            "id in telegram.channels",
            status=400,
        )
    if isinstance(exc, Forbidden):
        return TelegramApiError(
            f"Telegram refused to {what} (403: {exc.message}): the bot was blocked, removed from "
            "the chat, or may not post there",
            status=403,
        )
    if isinstance(exc, Conflict):
        return TelegramApiError(
            f"could not {what}: {exc.message} (409: another process polls this bot's updates, "
            "or a webhook is set while polling)",
            status=409,
            transient=True,
        )
    if isinstance(exc, BadRequest):
        gone = "not found" in exc.message.lower()
        return TelegramApiError(
            f"could not {what}: Telegram answered 400 ({exc.message})", status=404 if gone else 400
        )
    if isinstance(exc, NetworkError):  # also TimedOut, and 5xx answers
        return TelegramApiError(f"could not {what}: cannot reach Telegram ({exc.message})", transient=True)
    if isinstance(exc, TelegramError):
        return TelegramApiError(f"could not {what}: {exc.message}")
    return TelegramApiError(f"could not {what}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    try:
        yield
    except TelegramApiError:
        raise
    except TelegramError as exc:
        raise translate_error(exc, what) from exc


def _not_modified(exc: BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def _wait(left: float) -> float:
    """How long a refused call asks to wait when ``left`` seconds remain: past the end."""
    return left + WAIT_MARGIN_S


def _is_group(chat: str) -> bool:
    return chat.startswith("-")  # groups and supergroups have negative ids; a private chat is the user's


# -- the real port ------------------------------------------------------------------------------


class BotPort:
    """:class:`~adapters.telegram._port.TelegramPort` over an initialised ``telegram.Bot``."""

    platform = "telegram"
    message_limit = MESSAGE_LIMIT

    def __init__(self, bot: Bot, posted: PostedMessages) -> None:
        self._bot = bot
        self._posted = posted
        self._blocked_until: dict[str, float] = {}  # chat → monotonic end of its flood wait
        self._last_edit: dict[str, float] = {}  # chat → monotonic time of its last edit
        self._answers: set[asyncio.Task[None]] = set()

    @property
    def bot_id(self) -> int:
        return self._bot.id

    @property
    def username(self) -> str:
        return self._bot.username

    def escape(self, text: str) -> str:
        return text  # sent as plain text (no parse_mode): nothing a model writes can fail to parse

    async def close(self) -> None:
        for task in list(self._answers):
            task.cancel()

    # -- calls ------------------------------------------------------------------------------------

    async def _call(self, what: str, chat: str, call: Callable[[], Awaitable[T]]) -> T:
        """One call to ``chat``, unless Telegram told us to wait there (then refused here,
        with how long is left)."""
        left = self._blocked_until.get(chat, 0.0) - time.monotonic()
        if left > 0:
            raise rate_limited(_wait(left), what)
        try:
            return await call()
        except RetryAfter as exc:
            error = translate_error(exc, what)
            self._blocked_until[chat] = time.monotonic() + (error.retry_after or 0.0)
            raise error from exc
        except TelegramError as exc:
            raise translate_error(exc, what) from exc

    @staticmethod
    def _thread(to: Conversation) -> int | None:
        return int(to.thread) if to.thread is not None else None

    # -- the chat port ----------------------------------------------------------------------------

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        return await self._post(to, text, key, None)

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        row = []
        for button in buttons:
            data = f"{CALLBACK_PREFIX}{button.action_id}:{button.value}"
            if len(data.encode()) > CALLBACK_DATA_LIMIT:
                raise TelegramApiError(
                    f"a button's data is longer than Telegram's {CALLBACK_DATA_LIMIT} bytes: {data!r}"
                )
            row.append(InlineKeyboardButton(button.label, callback_data=data))
        return await self._post(to, text, key, InlineKeyboardMarkup([row]))

    async def _post(self, to: Conversation, text: str, key: str, markup: InlineKeyboardMarkup | None) -> str:
        # Telegram takes no idempotency key: a key posted before is that message, shown anew.
        known = await self._posted.find(key, to.channel)
        if known is not None:
            try:
                await self._edit(to, known, text, markup)
                return known
            except TelegramApiError as exc:
                if exc.status != 404:
                    raise
                log.info("telegram: message %s posted with this key is gone; posting anew", known)
        message = await self._call(
            "send a message",
            to.channel,
            lambda: self._bot.send_message(
                int(to.channel),
                text[:MESSAGE_LIMIT],
                message_thread_id=self._thread(to),
                reply_markup=markup,
                link_preview_options=NO_PREVIEWS,
            ),
        )
        message_id = str(message.message_id)
        await self._posted.remember(key, to.channel, message_id)
        return message_id

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        # A bot cannot read a chat's history: only this node's record of its own posts says.
        return await self._posted.find(key, to.channel, since)

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        # Telegram has no threads under a message: a delivery goes to the chat (or to the topic,
        # "<chat>:<topic>"), whose session it continues.
        chat, _, topic = channel.partition(":")
        to = Conversation(chat, topic or None)
        await self.post(to, text, key=key)
        return to

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        gap = GROUP_EDIT_GAP_S if _is_group(to.channel) else EDIT_GAP_S
        left = self._last_edit.get(to.channel, 0.0) + gap - time.monotonic()
        if left > 0:  # the chat's pace: a streaming edit waits for the next one, a final one retries
            raise TelegramApiError(
                f"editing in chat {to.channel} again in {left:.1f}s (Telegram's pace)",
                retry_after=_wait(left),
                transient=True,
            )
        await self._edit(to, message_id, text, None)

    async def _edit(
        self, to: Conversation, message_id: str, text: str, markup: InlineKeyboardMarkup | None
    ) -> None:
        self._last_edit[to.channel] = time.monotonic()

        async def edit() -> None:
            try:
                # Without reply_markup Telegram removes the inline keyboard: a decided
                # approval's buttons go with its new text.
                await self._bot.edit_message_text(
                    text[:MESSAGE_LIMIT],
                    chat_id=int(to.channel),
                    message_id=int(message_id),
                    reply_markup=markup,
                    link_preview_options=NO_PREVIEWS,
                )
            except BadRequest as exc:
                if not _not_modified(exc):
                    raise

        await self._call("edit a message", to.channel, edit)

    async def delete(self, to: Conversation, message_id: str) -> None:
        try:
            await self._call(
                "delete a message",
                to.channel,
                lambda: self._bot.delete_message(int(to.channel), int(message_id)),
            )
        except TelegramApiError as exc:
            if exc.status not in (400, 404):  # already gone, or too old to delete (48 h)
                raise

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        await self._call(
            "set a reaction",
            message.channel,
            lambda: self._bot.set_message_reaction(
                int(message.channel),
                int(message.message_id),
                reaction=[ReactionTypeEmoji(reaction)] if add else [],
            ),
        )

    async def typing(self, to: Conversation) -> None:
        await self._call(
            "show typing",
            to.channel,
            lambda: self._bot.send_chat_action(
                int(to.channel), ChatAction.TYPING, message_thread_id=self._thread(to)
            ),
        )

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        """A file as a document; audio Telegram plays in the chat as what it is: Ogg (Opus)
        as a voice message, MP3 and M4A as an audio track (a spoken reply, say)."""
        chat, thread = int(to.channel), self._thread(to)
        mime = mime_type.split(";", 1)[0].strip().lower()
        send: Callable[[], Awaitable[Message]]
        if mime == "audio/ogg":
            send = partial(self._bot.send_voice, chat, voice=data, filename=name, message_thread_id=thread)
        elif mime in ("audio/mpeg", "audio/mp4"):
            send = partial(self._bot.send_audio, chat, audio=data, filename=name, message_thread_id=thread)
        else:
            send = partial(
                self._bot.send_document, chat, document=data, filename=name, message_thread_id=thread
            )
        message = await self._call("upload a file", to.channel, send)
        return str(message.message_id)

    # -- Telegram's own -----------------------------------------------------------------------------

    async def updates(self, offset: int | None, timeout: int) -> list[TelegramUpdate]:
        with translated("fetch updates"):
            found = await self._bot.get_updates(
                offset=offset, timeout=timeout, allowed_updates=list(ALLOWED_UPDATES)
            )
        return [self._update(update) for update in found]

    def parse(self, data: Any) -> TelegramUpdate:
        with translated("read an update"):
            update = Update.de_json(data, self._bot)
        return self._update(update)

    def _update(self, update: Update) -> TelegramUpdate:
        if update.callback_query is not None:
            return TelegramUpdate(update.update_id, click=self._click(update.callback_query))
        message = update.message
        if message is None:
            return TelegramUpdate(update.update_id)
        return TelegramUpdate(update.update_id, message=normalise(message, self._bot.id, self._bot.username))

    def _click(self, query: CallbackQuery) -> ButtonClick | None:
        """A press on an inline button, answered always (Telegram shows a spinner until
        then): with the renderer's word for the presser when it has one within
        :data:`ANSWER_CLICK_AFTER_S`, else without a text. None when not one of ours."""
        answered = False

        async def answer(text: str | None) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            with translated("answer a button press"):
                await self._bot.answer_callback_query(
                    query.id, text=text[:200] if text else None, show_alert=bool(text)
                )

        async def answer_later() -> None:
            await asyncio.sleep(ANSWER_CLICK_AFTER_S)
            with contextlib.suppress(TelegramApiError):
                await answer(None)

        task = asyncio.ensure_future(answer_later())
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)
        data = query.data or ""
        if not data.startswith(CALLBACK_PREFIX):
            return None
        action, _, value = data.removeprefix(CALLBACK_PREFIX).partition(":")
        message = query.message
        user = query.from_user
        return ButtonClick(
            action_id=action,
            value=value,
            user_id=str(user.id),
            message=MessageRef(str(message.chat.id), str(message.message_id))
            if message is not None
            else None,
            user_name=user.full_name or user.username or str(user.id),
            respond=answer,
        )

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        with translated("download a file"):
            file = await self._bot.get_file(file_id)
            if file.file_size is not None and file.file_size > max_bytes:
                raise TelegramApiError(f"the file is larger than {max_bytes:,} bytes")
            data = bytes(await file.download_as_bytearray())
        if len(data) > max_bytes:
            raise TelegramApiError(f"the file is larger than {max_bytes:,} bytes")
        return data

    async def set_webhook(self, url: str, secret: str) -> None:
        with translated("set the webhook"):
            await self._bot.set_webhook(url, secret_token=secret, allowed_updates=list(ALLOWED_UPDATES))

    async def leave_webhook(self) -> None:
        """Polling: a webhook left set from webhook mode makes getUpdates fail (409)."""
        with translated("remove the webhook"):
            info = await self._bot.get_webhook_info()
            if info.url:
                log.info("telegram: removing the webhook %s to poll instead", info.url)
                await self._bot.delete_webhook()


async def start_bot(token: str, api_url: str | None, poll_timeout_s: int, token_env: str) -> Bot:
    """A bot that has said who it is (getMe): the token works."""
    bot = make_bot(token, api_url, poll_timeout_s)
    try:
        await bot.initialize()
    except TelegramError as exc:
        with contextlib.suppress(TelegramError):
            await bot.shutdown()
        raise translate_error(exc, "log in", token_env=token_env) from exc
    return bot


async def stop_bot(bot: Bot) -> None:
    with contextlib.suppress(TelegramError):
        await bot.shutdown()


async def probe_bot(token: str, api_url: str | None, token_env: str, webhook_url: str | None) -> str:
    """``netclaw doctor``: who the token logs in as and, in webhook mode, what Telegram
    says about the webhook (its URL, the last delivery error, updates waiting)."""
    bot = await start_bot(token, api_url, 1, token_env)
    try:
        said = f"logged in as @{bot.username} (id {bot.id})"
        if webhook_url is None:
            return said
        with translated("read the webhook's state"):
            info = await bot.get_webhook_info()
        if info.url != webhook_url:
            set_to = info.url or "nothing"
            said += f"; the webhook is set to {set_to} (netclaw sets {webhook_url} when it starts)"
        else:
            said += f"; webhook {info.url}, {info.pending_update_count} update(s) waiting"
        if info.last_error_message:
            said += f"; Telegram's last delivery error: {info.last_error_message}"
        return said
    finally:
        await stop_bot(bot)
