"""The narrow port between the Discord adapter and the platform (no discord.py import here).

Everything the adapter does on Discord goes through :class:`DiscordPort`: ids are strings,
failures are :class:`DiscordApiError` (an :class:`~netclaw.errors.AdapterError`). The real
implementation over discord.py lives in ``_client.py``; tests use ``tests/fakes/discord_port.py``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from netclaw.errors import AdapterError

log = logging.getLogger("adapters.discord_bot")

T = TypeVar("T")

MESSAGE_LIMIT = 2000  # characters in one Discord message
THREAD_NAME_LIMIT = 100  # characters in a thread name

RETRY_ATTEMPTS = 4  # tries of one call that must get through (a final reply, a thread)
MAX_RETRY_WAIT_S = 60.0  # never sleep longer than this for one retry
BACKOFF_S = (0.5, 2.0, 5.0)  # when Discord gave no retry_after


class DiscordApiError(AdapterError):
    """A Discord call failed. ``transient`` ones (rate limits, 5xx, network) may be retried,
    after ``retry_after`` seconds when Discord said how long."""

    code = "discord_api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        transient: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.transient = transient


def rate_limited(retry_after: float, what: str = "the request") -> DiscordApiError:
    """The error for an HTTP 429 that was not absorbed below the port."""
    return DiscordApiError(
        f"Discord rate-limited {what}; retry in {retry_after:.2f}s",
        status=429,
        retry_after=retry_after,
        transient=True,
    )


@dataclass(frozen=True, slots=True)
class DiscordMessage:
    """One Discord message, reduced to what the adapter needs (``_client.normalise``)."""

    message_id: str
    channel_id: str  # where it was posted: a thread id for a message in a thread
    author_id: str
    text: str  # the content without the bot's mention; attachments appended as links
    parent_id: str | None = None  # set when posted in a thread: the channel the thread is in
    is_dm: bool = False
    mentioned: bool = False  # the bot (or its managed role) was mentioned
    from_bot: bool = False  # a bot or webhook wrote it
    from_self: bool = False  # this bot wrote it

    @property
    def in_thread(self) -> bool:
        return self.parent_id is not None


class DiscordPort(Protocol):
    """The platform calls the adapter makes. Channel, thread and message ids are strings
    (Discord snowflakes); a thread id is also a channel id. Each raises DiscordApiError."""

    async def create_thread(self, channel_id: str, message_id: str, name: str) -> str:
        """Start a public thread from a message; returns the thread id."""
        ...

    async def send(self, channel_id: str, text: str, *, nonce: str | None = None) -> str:
        """Post ``text`` (at most 2,000 characters, mentions never ping); returns the message id.
        Discord enforces ``nonce`` (≤25 characters): a retry with the same nonce within a few
        minutes returns the message already made instead of posting it twice."""
        ...

    async def edit(self, channel_id: str, message_id: str, text: str) -> None: ...

    async def delete(self, channel_id: str, message_id: str) -> None: ...

    async def add_reaction(self, channel_id: str, message_id: str, emoji: str) -> None: ...

    async def remove_reaction(self, channel_id: str, message_id: str, emoji: str) -> None:
        """Remove the bot's own reaction."""
        ...

    async def typing(self, channel_id: str) -> None:
        """Show "is typing…" in the channel (Discord clears it after ~10 s or at our next message)."""
        ...


def new_nonce() -> str:
    return secrets.token_hex(10)


def retry_delay(error: DiscordApiError, attempt: int) -> float:
    """How long to wait before retry number ``attempt`` (0-based) of a transient failure."""
    if error.retry_after is not None:
        return min(max(error.retry_after, 0.0), MAX_RETRY_WAIT_S)
    return BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]


async def with_retry(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = RETRY_ATTEMPTS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``call``; retry transient DiscordApiErrors (rate limits first of all) after the
    delay Discord asked for. Permanent errors, and the last transient one, propagate."""
    for attempt in range(attempts):
        try:
            return await call()
        except DiscordApiError as exc:
            if not exc.transient or attempt == attempts - 1:
                raise
            delay = retry_delay(exc, attempt)
            log.warning("discord: %s failed (%s); retrying in %.2fs", what, exc, delay)
            await sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
