"""The narrow port between the Matrix adapter and the homeserver (no matrix-nio import here).

Everything the adapter does on Matrix goes through a :class:`MatrixPort`: the shared
:class:`~adapters.chat.ChatPort` (post, edit, delete, react, typing, upload, approval
prompts) plus the sync long-poll, joining and leaving rooms, reading an event and a
thread, downloading media and keeping the sync position. A conversation is
``Conversation(room_id, thread_root)``: a thread's root event, or None for a direct
chat's main timeline. Failures are :class:`MatrixApiError`. The real implementation over
matrix-nio lives in ``_client.py``; what arrives is normalised by ``_events.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from adapters.chat import ChatApiError, ChatPort

# Characters in one message. An event may hold 65,536 bytes and an edit carries its text
# twice (the fallback body and m.new_content), so a message stays well under that.
MESSAGE_LIMIT = 4000
EDIT_INTERVAL_S = 2.0  # Synapse allows a burst of edits, then about one every few seconds
# The renderer's "working on it" mark. On Matrix it is shown as a read receipt, not as a
# reaction (ClientPort.react): see there why.
SEEN_REACTION = "\N{EYES}"
# How people decide an approval: a reaction on its prompt (also: a reply saying the word).
APPROVAL_REACTIONS = {
    "approve": "\N{THUMBS UP SIGN}",
    "deny": "\N{THUMBS DOWN SIGN}",
    "always": "\N{WHITE HEAVY CHECK MARK}",
}


class MatrixApiError(ChatApiError):
    """A Matrix call failed (see :class:`~adapters.chat.ChatApiError`); ``errcode`` is the
    homeserver's (``M_FORBIDDEN``, ``M_LIMIT_EXCEEDED``, …) when it gave one."""

    code = "matrix_api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        transient: bool = False,
        errcode: str = "",
    ) -> None:
        super().__init__(message, status=status, retry_after=retry_after, transient=transient)
        self.errcode = errcode


@dataclass(frozen=True, slots=True)
class MatrixFile:
    name: str
    url: str  # mxc://server/media
    mime_type: str
    size: int | None


@dataclass(frozen=True, slots=True)
class MatrixMessage:
    """One message event, reduced to what the adapter needs (``_events.message_of``)."""

    event_id: str
    room_id: str
    sender: str
    text: str  # the body without the bot's mention (and without a reply's quoted fallback)
    thread_root: str | None = None  # in a thread (m.thread): its root event
    reply_to: str | None = None  # a reply (m.in_reply_to) to this event, outside a thread's fallback
    mentioned: bool = False  # the bot is mentioned (m.mentions, its id, its display name)
    from_self: bool = False
    from_bot: bool = False  # an m.notice: what bots send
    sender_name: str = ""  # the sender's display name in the room, when known
    is_dm: bool = False  # the room is a direct chat with the bot
    files: tuple[MatrixFile, ...] = ()
    ts: int = 0  # origin_server_ts, ms


@dataclass(frozen=True, slots=True)
class MatrixReaction:
    """An m.annotation on an event (``key``: the emoji as sent, variation selectors dropped)."""

    event_id: str
    room_id: str
    sender: str
    target: str
    key: str
    from_self: bool = False
    sender_name: str = ""


@dataclass(frozen=True, slots=True)
class MatrixInvite:
    room_id: str
    inviter: str
    is_direct: bool = False
    encrypted: bool = False


RoomEvent = MatrixMessage | MatrixReaction


@dataclass(slots=True)
class SyncBatch:
    """One /sync answer, normalised: what the adapter acts on, in timeline order."""

    next_batch: str
    events: list[RoomEvent] = field(default_factory=list)
    invites: list[MatrixInvite] = field(default_factory=list)
    encrypted: list[str] = field(default_factory=list)  # joined rooms found end-to-end encrypted
    limited: list[str] = field(default_factory=list)  # rooms whose timeline was cut (a gap)


class MatrixPort(ChatPort, Protocol):
    """The chat port, plus what only Matrix needs."""

    @property
    def user_id(self) -> str:
        """The bot's own user id (``@netclaw:example.org``)."""
        ...

    async def sync(self, since: str | None, timeout_ms: int) -> SyncBatch:
        """The next batch since ``since`` (None: an initial sync; its history is not for
        answering), waiting up to ``timeout_ms`` for something to happen."""
        ...

    async def load_since(self) -> str | None:
        """The sync position saved by :meth:`save_since` (kept on the homeserver, in the
        bot's account data: the next process, on any node, goes on from there)."""
        ...

    async def save_since(self, since: str) -> None: ...

    async def join(self, room_id: str) -> None: ...

    async def leave(self, room_id: str, reason: str) -> None:
        """Leave (or reject the invite to) a room, saying why."""
        ...

    async def mark_direct(self, room_id: str, user_id: str) -> None:
        """Record the room as the bot's direct chat with ``user_id`` (m.direct)."""
        ...

    async def event(self, room_id: str, event_id: str) -> dict[str, object] | None:
        """One event as the homeserver returns it (None: gone or not visible)."""
        ...

    async def thread(self, room_id: str, root: str, before: str, limit: int) -> list[MatrixMessage]:
        """The thread's root and replies before ``before``, oldest first, at most ``limit``."""
        ...

    async def download(self, url: str, max_bytes: int) -> bytes:
        """An mxc:// file's bytes; MatrixApiError past ``max_bytes``."""
        ...

    async def close(self) -> None:
        """Let the connection go (the adapter stops)."""
        ...
