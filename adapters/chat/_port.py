"""The narrow port between the chat renderer and a chat platform.

Everything the renderer does on a platform goes through a :class:`ChatPort`: ids are
strings, failures are :class:`ChatApiError` (an :class:`~netclaw.errors.AdapterError`)
saying whether a retry may help and after how long. A platform library is confined to
its port implementation (``adapters/slack/_client.py``, ``adapters/discord_bot/_client.py``);
tests use ``tests/fakes/chat_port.py`` — httpx's transport seam, applied to a chat platform.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from netclaw.errors import AdapterError
from netclaw.retry import Retry, RetryPolicy


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a session's replies go: a channel (a Discord thread is one) and, on platforms
    whose threads live inside a channel (Slack), the thread."""

    channel: str
    thread: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRef:
    """One platform message (to react to, edit, delete)."""

    channel: str
    message_id: str


@dataclass(frozen=True, slots=True)
class Button:
    action_id: str  # what a click means ("approve", "deny", "always")
    label: str
    value: str  # what it is about (an approval id)
    style: Literal["primary", "danger", "default"] = "default"


@dataclass(frozen=True, slots=True)
class ButtonClick:
    """Someone pressed one of our buttons (as the platform reported it)."""

    action_id: str  # the Button's action_id
    value: str  # the Button's value (an approval id)
    user_id: str  # who pressed it
    message: MessageRef | None  # the message the buttons are on, when the platform says
    user_name: str = ""  # how to name them to others ("approved by …"); the id when unknown
    # Answers only the person who pressed (Slack: an ephemeral message; Discord: an
    # ephemeral follow-up), e.g. "you may not decide this"; None when the platform cannot.
    respond: Callable[[str], Awaitable[None]] | None = None


class ChatApiError(AdapterError):
    """A platform call failed. ``transient`` ones (rate limits, 5xx, network) may be
    retried, after ``retry_after`` seconds when the platform said how long; ``status`` is
    the HTTP-like status when there is one (404: the message is gone)."""

    code = "chat_api_error"

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


def retry_verdict(exc: BaseException) -> Retry | None:
    """The retry classifier for platform calls (:mod:`netclaw.retry`)."""
    if isinstance(exc, ChatApiError) and exc.transient:
        return Retry(exc.retry_after)
    return None


# What must get through (a final reply, a thread, a note) is retried; a streaming edit is
# not — the next one, a moment later, shows the newer text anyway.
MUST_DELIVER = RetryPolicy(max_retries=4, base_delay_s=0.5, max_delay_s=10.0, max_retry_after_s=60.0)
BEST_EFFORT = RetryPolicy(max_retries=0)


def outbox_key(session_id: str, turn: int, piece: int) -> str:
    """The key of one piece of a turn's final reply: the same wherever and however often it
    is posted (live, or by the outbox after a restart), so the platform finds it again."""
    return hashlib.sha256(f"{session_id}|{turn}|{piece}".encode()).hexdigest()[:20]


def new_key() -> str:
    """An idempotency key for one post (20 hex characters: fits Discord's 25-char nonce)."""
    return secrets.token_hex(10)


class ChatPort(Protocol):
    """What the renderer needs of a chat platform. Every call raises ChatApiError."""

    @property
    def platform(self) -> str:
        """``slack``, ``discord``: the session id prefix and the chat policy's platform."""
        ...

    @property
    def message_limit(self) -> int:
        """Characters in one message."""
        ...

    def escape(self, text: str) -> str:
        """Model text as the platform must receive it (control characters escaped)."""
        ...

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        """Post ``text``; returns the message id. Posting again with the same ``key`` (a
        retry after a lost answer) never makes a second message."""
        ...

    async def edit(self, to: Conversation, message_id: str, text: str) -> None: ...

    async def delete(self, to: Conversation, message_id: str) -> None:
        """Already gone is fine."""
        ...

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        """Add or remove the bot's own reaction (already there / already gone is fine).
        ``reaction`` is the platform's name for the "working on it" mark."""
        ...

    async def typing(self, to: Conversation) -> None:
        """Show that the bot is about to answer (a no-op where the platform has no such thing)."""
        ...

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        """Attach a file to the conversation; returns the message (or file) id."""
        ...

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        """Post ``text`` with buttons under it; returns the message id. ``edit`` replaces
        the message by plain text (the buttons go)."""
        ...

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        """Post ``text`` as a new message in ``channel`` and return the thread under it (a
        delivery target's conversation). With the same ``key`` again (a repeat after a crash,
        since ``since``) the thread already opened, where the platform can tell."""
        ...

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        """The message posted with ``key`` since ``since`` (Unix time), if the platform can
        tell (the outbox asks before posting a reply a crash may have posted already)."""
        ...


class StreamingUnsupported(ChatApiError):
    """The platform (or this workspace, or this conversation) has no native streaming: the
    renderer falls back to posting and editing."""


@runtime_checkable
class StreamingPort(ChatPort, Protocol):
    """A port whose platform streams a reply natively (Slack's ``chat.startStream``): the
    message grows as text is appended and is closed once, carrying the outbox key."""

    async def stream_start(self, to: Conversation, text: str) -> str:
        """Open a streamed message showing ``text`` (Markdown); returns its message id.
        StreamingUnsupported when the platform cannot here."""
        ...

    async def stream_append(self, to: Conversation, message_id: str, text: str) -> None: ...

    async def stream_stop(self, to: Conversation, message_id: str, text: str, *, key: str) -> None:
        """Append the last ``text`` and close the message, marked with ``key`` (the outbox
        finds it after a crash, as it finds a post)."""
        ...
