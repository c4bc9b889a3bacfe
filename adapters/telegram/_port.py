"""The narrow port between the Telegram adapter and the Bot API (no telegram import here).

Everything the adapter does on Telegram goes through a :class:`TelegramPort`: the shared
:class:`~adapters.chat.ChatPort` (post, edit, delete, react, typing, upload, buttons) plus
fetching updates, the webhook and downloading files. Ids are strings; failures are
:class:`TelegramApiError`. A conversation is ``Conversation(chat_id)`` or, in a forum
topic, ``Conversation(chat_id, topic_id)``. The real implementation over
python-telegram-bot lives in ``_client.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from adapters.chat import ButtonClick, ChatApiError, ChatPort

MESSAGE_LIMIT = 4096  # characters in one Telegram message
SEEN_EMOJI = "\N{EYES}"  # on a message while its turn runs (one of Telegram's reactions)
CALLBACK_PREFIX = "nc:"  # our inline buttons' callback_data: nc:<action>:<value>
CALLBACK_DATA_LIMIT = 64  # bytes of callback_data Telegram keeps


class TelegramApiError(ChatApiError):
    """A Bot API call failed (see :class:`~adapters.chat.ChatApiError`)."""

    code = "telegram_api_error"


def rate_limited(retry_after: float, what: str = "the request") -> TelegramApiError:
    """Telegram's flood control (HTTP 429 with ``retry_after``)."""
    return TelegramApiError(
        f"Telegram rate-limited {what}; retry in {retry_after:g}s",
        status=429,
        retry_after=retry_after,
        transient=True,
    )


@dataclass(frozen=True, slots=True)
class TelegramFile:
    """A document or photo a message carries, before it is downloaded."""

    name: str
    file_id: str
    mime_type: str
    size: int | None


@dataclass(frozen=True, slots=True)
class TelegramMessage:
    """One message as the adapter sees it (``_client.normalise``)."""

    message_id: str
    chat_id: str
    user_id: str
    text: str  # text or caption; the bot's @mention removed, `/cmd@bot` as `/cmd`
    is_private: bool = False
    topic_id: str | None = None  # the forum topic it was posted in (None: a chat's main line)
    addressed: bool = False  # the bot was @mentioned, replied to, or given a /command@bot
    from_bot: bool = False
    from_self: bool = False
    user_name: str = ""
    files: tuple[TelegramFile, ...] = ()


@dataclass(frozen=True, slots=True)
class TelegramUpdate:
    """One update: a message, a press on one of our buttons, or something we ignore."""

    update_id: int
    message: TelegramMessage | None = None
    click: ButtonClick | None = None


class TelegramPort(ChatPort, Protocol):
    """The chat port, plus what only Telegram needs."""

    async def updates(self, offset: int | None, timeout: int) -> list[TelegramUpdate]:
        """Long-poll for updates from ``offset`` on (which confirms every earlier one)."""
        ...

    def parse(self, data: Any) -> TelegramUpdate:
        """An update Telegram posted to the webhook."""
        ...

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        """A file's bytes; TelegramApiError past ``max_bytes``."""
        ...
