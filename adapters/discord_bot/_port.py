"""The narrow port between the Discord adapter and the platform (no discord.py import here).

Everything the adapter does on Discord goes through a :class:`DiscordPort`: the shared
:class:`~adapters.chat.ChatPort` (post, edit, delete, react, typing, upload, buttons) plus
starting a thread, reading a channel's history and downloading attachments. Ids are strings, failures are :class:`DiscordApiError`. The real
implementation over discord.py lives in ``_client.py``; tests use
``tests/fakes/discord_port.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from adapters.chat import ChatApiError, ChatPort

MESSAGE_LIMIT = 2000  # characters in one Discord message
THREAD_NAME_LIMIT = 100  # characters in a thread name
SEEN_EMOJI = "\N{EYES}"  # on a message while its turn runs


class DiscordApiError(ChatApiError):
    """A Discord call failed (see :class:`~adapters.chat.ChatApiError`)."""

    code = "discord_api_error"


def rate_limited(retry_after: float, what: str = "the request") -> DiscordApiError:
    """The error for an HTTP 429 that was not absorbed below the port."""
    return DiscordApiError(
        f"Discord rate-limited {what}; retry in {retry_after:.2f}s",
        status=429,
        retry_after=retry_after,
        transient=True,
    )


@dataclass(frozen=True, slots=True)
class DiscordAttachment:
    name: str
    url: str  # on Discord's CDN (signed; no token needed)
    mime_type: str
    size: int


@dataclass(frozen=True, slots=True)
class DiscordMessage:
    """One Discord message, reduced to what the adapter needs (``_client.normalise``)."""

    message_id: str
    channel_id: str  # where it was posted: a thread id for a message in a thread
    author_id: str
    text: str  # the content without the bot's mention, other people's mentions as @names
    parent_id: str | None = None  # set when posted in a thread: the channel the thread is in
    is_dm: bool = False
    mentioned: bool = False  # the bot (or its managed role) was mentioned
    from_bot: bool = False  # a bot or webhook wrote it
    from_self: bool = False  # this bot wrote it
    author_name: str = ""  # how the guild shows the author (nickname, global name, user name)
    attachments: tuple[DiscordAttachment, ...] = ()

    @property
    def in_thread(self) -> bool:
        return self.parent_id is not None


class DiscordPort(ChatPort, Protocol):
    """The chat port, plus what only Discord needs. A conversation is a thread or DM
    channel id (``Conversation(thread_id)``); a thread id is also a channel id."""

    async def create_thread(self, channel_id: str, message_id: str, name: str) -> str:
        """Start a public thread from a message; returns the thread id (on Discord, the
        message's). DiscordApiError with status 409 when the message already has a thread."""
        ...

    async def history(self, channel_id: str, before: str, limit: int) -> list[DiscordMessage]:
        """Up to ``limit`` messages of a channel (or thread) before message ``before``,
        oldest first; system messages left out."""
        ...

    async def download(self, url: str, max_bytes: int) -> bytes:
        """An attachment's bytes; DiscordApiError past ``max_bytes``."""
        ...
