"""The narrow port between the Mattermost adapter and the server (REST API v4 and its
websocket), and the shapes that cross it.

Everything the adapter does on Mattermost goes through a :class:`MattermostPort`: the
shared :class:`~adapters.chat.ChatPort` (post, edit, delete, react, typing, upload,
approval prompts) plus the websocket, reading posts, threads and channels, files, users
and the saved position. A conversation is ``Conversation(channel_id, root_id)``: a
thread's root post, or None in a direct message channel. Failures are
:class:`MattermostApiError`. The real implementation over httpx and aiohttp's websocket
lives in ``_client.py``; what arrives is normalised by ``_events.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from adapters.chat import ChatApiError, ChatPort

# Characters in one post: the server's PostMessageMaxRunesV2 (it counts code points, as
# len() does).
MESSAGE_LIMIT = 16383
EDIT_INTERVAL_S = 1.0  # every edit is broadcast to the channel: about one a second is kind
SEEN_EMOJI = "eyes"  # the "working on it" reaction, by its Mattermost name
ACTIONS_PATH = "/mattermost/actions"  # where approval buttons post their presses


class MattermostApiError(ChatApiError):
    """A Mattermost call failed (see :class:`~adapters.chat.ChatApiError`); ``error_id``
    is the server's (``api.context.session_expired.app_error``, …) when it gave one."""

    code = "mattermost_api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        transient: bool = False,
        error_id: str = "",
    ) -> None:
        super().__init__(message, status=status, retry_after=retry_after, transient=transient)
        self.error_id = error_id


@dataclass(frozen=True, slots=True)
class MattermostFile:
    file_id: str
    name: str
    mime_type: str
    size: int | None


@dataclass(frozen=True, slots=True)
class MattermostPost:
    """One post, reduced to what the adapter needs (``_events.post_of``)."""

    post_id: str
    channel_id: str
    user_id: str
    text: str  # the message without the bot's @mention
    create_at: int  # ms, the server's clock
    root_id: str | None = None  # a reply in the thread under this post
    channel_type: str = ""  # O open, P private, D direct, G group
    mentioned: bool = False
    from_self: bool = False
    from_bot: bool = False  # posted by a bot account or an integration
    sender_name: str = ""
    files: tuple[MattermostFile, ...] = ()

    @property
    def is_dm(self) -> bool:
        return self.channel_type == "D"


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    channel_id: str
    type: str
    last_post_at: int  # ms


class EventStream(Protocol):
    """One websocket connection, authenticated (its hello received)."""

    @property
    def connection_id(self) -> str: ...

    async def receive(self) -> dict[str, Any]:
        """The next event (``event``, ``data``, ``seq``); MattermostApiError (transient)
        when the connection is lost."""
        ...

    def missed(self) -> bool:
        """Did the events so far skip a ``seq`` (an event lost on the way)? Asked once per
        gap: True once, then False until the next one."""
        ...

    async def close(self) -> None: ...


class MattermostPort(ChatPort, Protocol):
    """The chat port, plus what only Mattermost needs."""

    @property
    def user_id(self) -> str:
        """The bot's own user id."""
        ...

    @property
    def username(self) -> str: ...

    async def connect(self) -> EventStream:
        """Open the websocket and authenticate (the typing indicator goes through it)."""
        ...

    async def channels(self) -> list[ChannelInfo]:
        """Every channel the bot is a member of (direct messages too)."""
        ...

    async def channel_type(self, channel_id: str) -> str:
        """O, P, D or G (asked once, then remembered)."""
        ...

    def note_channel_type(self, channel_id: str, kind: str) -> None:
        """What an event said the channel is (saves asking)."""
        ...

    async def posts_since(self, channel_id: str, since_ms: int) -> list[dict[str, Any]]:
        """The channel's posts changed after ``since_ms``, as the server returns them."""
        ...

    async def thread(self, root_id: str) -> list[dict[str, Any]]:
        """A thread's posts (its root too), oldest first."""
        ...

    async def user_name(self, user_id: str) -> str:
        """How to name a person (their username); the id when unknown."""
        ...

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        """A file's bytes; MattermostApiError past ``max_bytes``."""
        ...

    async def load_position(self) -> int | None:
        """The position saved by :meth:`save_position` (ms of the newest post handled; kept
        on the server, in the bot's preferences, so any node goes on from there)."""
        ...

    async def save_position(self, position_ms: int) -> None: ...

    def mark_prompt(self, message_id: str) -> None:
        """``message_id`` carries approval buttons: an edit of it takes them away."""
        ...

    async def close(self) -> None: ...
