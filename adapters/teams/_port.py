"""The narrow port between the Teams adapter and the Bot Connector service (no SDK import
here).

Everything the adapter does on Teams goes through a :class:`TeamsPort`: the shared
:class:`~adapters.chat.ChatPort` plus telling one person alone and downloading a file.
A conversation is ``Conversation(key)`` for a personal or group chat and
``Conversation(key, root)`` for a reply chain in a channel: ``key`` names the chat or
channel (:func:`conversation_key`; the stored :class:`Reference` says where it is), ``root``
is the id of the chain's first message. The implementation over the Microsoft 365 Agents
SDK lives in ``_client.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal, Protocol

from adapters.chat import ChatApiError, ChatPort, Conversation

MESSAGE_LIMIT = 8000  # characters of one message (Teams refuses activities past ~28 KB)
FILE_LIMIT = 64_000  # bytes of a file posted inline (a whole activity stays under ~100 KB)
ACTION_KEY = "netclaw"  # an Adaptive Card Action.Submit's data: {"netclaw": action, "value": id}
THREAD_MARK = ";messageid="  # a channel reply chain's conversation id: <channel id>;messageid=<root>

Kind = Literal["personal", "groupChat", "channel"]


class TeamsApiError(ChatApiError):
    """A Bot Connector or token call failed (see :class:`~adapters.chat.ChatApiError`)."""

    code = "teams_api_error"


def conversation_key(conversation_id: str) -> str:
    """A short, stable name for a Teams chat or channel id (those run to 150 characters
    of ``:``, ``@`` and ``;`` that a session id may not hold)."""
    return hashlib.sha256(conversation_id.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Reference:
    """Where a chat or channel is, as the last activity from it said: what a proactive
    message (a reminder, a sub-agent's report) needs to reach it after a restart."""

    conversation_id: str  # the chat's id, or the channel's (without ;messageid=)
    service_url: str
    tenant_id: str
    kind: Kind
    bot_id: str = ""  # the bot's id in Teams (28:<app id>)

    @property
    def key(self) -> str:
        return conversation_key(self.conversation_id)

    def conversation_id_of(self, to: Conversation) -> str:
        """The id the Bot Connector knows ``to`` by (a reply chain carries its root)."""
        return f"{self.conversation_id}{THREAD_MARK}{to.thread}" if to.thread else self.conversation_id


@dataclass(frozen=True, slots=True)
class TeamsFile:
    """A file a message carries, before it is downloaded."""

    name: str
    mime_type: str
    url: str
    authorized: bool  # fetched with the bot's token (a connector URL), or as it is (a download URL)


@dataclass(frozen=True, slots=True)
class TeamsMessage:
    """One message activity as the adapter sees it (``_client.normalise``)."""

    activity_id: str
    reference: Reference
    thread: str | None  # the reply chain's root in a channel
    user_id: str  # the person's Entra object id (their Teams id when there is none)
    user_name: str
    account_id: str  # their id in this bot's conversations (29:…): whom a targeted message reaches
    text: str  # the bot's mention removed
    mentioned: bool = False
    from_bot: bool = False
    files: tuple[TeamsFile, ...] = ()
    action: tuple[str, str] | None = None  # an Adaptive Card button pressed: (action, value)
    reply_to: str | None = None  # the message (a card) it answers

    @property
    def conversation(self) -> Conversation:
        return Conversation(self.reference.key, self.thread)


class TeamsPort(ChatPort, Protocol):
    """The chat port, plus what only Teams needs."""

    async def tell(self, to: Conversation, user_id: str, text: str) -> None:
        """Show ``text`` to one person alone (a targeted message)."""
        ...

    async def download(self, file: TeamsFile, max_bytes: int) -> bytes:
        """A file's bytes; TeamsApiError past ``max_bytes``."""
        ...
