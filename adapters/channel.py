"""The channel API: what a channel package declares, so netclaw can run it unchanged.

A channel is a Python package that names a :class:`Channel` under the ``netclaw.channels``
entry point group (the way Mopidy finds its extensions)::

    [project.entry-points."netclaw.channels"]
    telegram = "netclaw_telegram:CHANNEL"

The object named there must be importable cheaply: it is loaded by every ``netclaw``
command (to know the config sections), so it names its adapter by ``"module:attribute"``
and the platform library is imported only when the channel is enabled and built.

What a channel gets from netclaw, and must use rather than re-implement:

- **Sessions through the gateway's chat role** (:class:`netclaw.gateway.ChatInput`): the
  adapter builds a :class:`~netclaw.security.policy.ChatEvent`, asks ``permit`` (the
  channel's allowlists and mentions, from its :class:`~netclaw.config.ChatSection`) and
  hands an :class:`~netclaw.gateway.Inbound` with the platform's message id as its
  ``identity`` — so a redelivered event is admitted once, and nothing acknowledged is lost.
- **Replies through the shared renderer** (:class:`adapters.chat.ChatRenderer` over the
  channel's :class:`adapters.chat.ChatPort`): streaming by edits at the channel's pace,
  splitting at its message limit, the "working on it" mark, approval buttons and their
  decisions, files, and the outbox that posts a reply a crash left owed exactly once.
- **Supervision** (:mod:`adapters.supervisor`): a channel whose ``start`` fails or whose
  connection is lost for good is started again with backoff; a broken channel is
  reported on ``/healthz``, ``netclaw channels`` and ``netclaw doctor``, never fatal.

Session ids are ``<name>:<place>[:<conversation>]`` (``telegram:-1001:42`` is topic 42 of a
group): the place is a session's memory scope, ``<name>:<user id>`` names a speaker for
roles, and the channel's section decides who may talk. docs/channels/writing-a-channel.md
walks through a complete small channel.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from netclaw.config import ChannelSection

if TYPE_CHECKING:
    from adapters.base import Adapter
    from netclaw.config import Settings
    from netclaw.gateway import ChatInput

ENTRY_POINT_GROUP = "netclaw.channels"

# How a platform nests conversations: a thread under a message (Slack, Discord, Matrix),
# a topic of a group (Telegram forums), or one conversation per chat or route.
Conversations = Literal["threads", "topics", "chats", "requests"]
# How a person decides an approval there: buttons under the request, a reaction, a reply;
# "api": only through the control API and the control room.
ApprovalControls = Literal["buttons", "reactions", "replies", "api"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the platform can do, as the channel uses it (shown by ``netclaw channels``)."""

    conversations: Conversations
    approvals: ApprovalControls
    edits: bool = False  # a reply streams by editing one message
    files_in: bool = False  # people's files reach the model
    files_out: bool = False  # the agent's files (share_file) reach people
    typing: bool = False  # a "typing" or "working on it" indicator
    message_limit: int = 0  # characters in one message; longer replies are split (0: no limit)
    edit_interval_s: float = 0.0  # the least time between two streaming edits of a message (rate limits)

    def summary(self) -> str:
        parts = [self.conversations, f"approvals by {self.approvals}"]
        if self.edits:
            parts.append(f"streams by edits (every {self.edit_interval_s:g}s)")
        files = "/".join(d for d, on in (("in", self.files_in), ("out", self.files_out)) if on)
        if files:
            parts.append(f"files {files}")
        if self.typing:
            parts.append("typing")
        if self.message_limit:
            parts.append(f"{self.message_limit} chars a message")
        return ", ".join(parts)


AdapterFactory = Callable[["Settings", "ChatInput"], "Adapter"]


@dataclass(frozen=True, slots=True)
class Channel:
    """One channel as its package declares it.

    ``name`` is the key of its section in netclaw.json, the prefix of its session ids and
    of its speakers (``telegram:123``); ``section`` is that section's model (a
    :class:`~netclaw.config.ChatSection` for a chat platform: allowlists, mentions, DMs);
    ``adapter`` is ``"module:attribute"`` of a callable ``(settings, chat_input) ->
    Adapter``, imported only when the channel runs; ``one_node``: only one node of a
    cluster may hold its connection (a bot allowed one connection, as Discord's gateway).
    The adapter's ``check`` and ``probe`` are its ``netclaw doctor`` checks: configured,
    then its credentials tried against the platform (reachable, token valid, permissions).
    """

    name: str
    section: type[ChannelSection]
    adapter: str
    capabilities: Capabilities
    summary: str = ""
    one_node: bool = False
    requires: str = ""  # how to install what it needs, when its library is missing
    docs: str = ""  # where people read how to set it up

    def __post_init__(self) -> None:
        if self.section.key != self.name:
            raise ValueError(
                f"channel {self.name!r}: its section model {self.section.__name__} has key "
                f"{self.section.key!r}; they must be the same"
            )
        if ":" not in self.adapter:
            raise ValueError(
                f"channel {self.name!r}: adapter must be 'module:attribute', not {self.adapter!r}"
            )

    def factory(self) -> AdapterFactory:
        """The adapter's constructor, imported now (the platform library with it)."""
        module, _, attribute = self.adapter.partition(":")
        found: AdapterFactory = getattr(importlib.import_module(module), attribute)
        return found
