"""Which sessions owe this platform a reply, so that a link follows each (and its
:class:`~adapters.chat._outbox.Outbox` posts what is owed when the stream is joined).

Looked for when the adapter resumes (a turn a restart interrupted, a reply recorded but
never shown), after a platform reconnect, and — with several nodes — every
``cluster_poll_s`` (a reply another node recorded while not connected to this platform).
Between looks, the gateway tells the watch of every reply recorded with nobody watching.
With several nodes a message acknowledged here whose turn ran elsewhere loses its mark
once its session owes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from adapters.chat._calls import PlatformCalls
from adapters.chat._links import Link, Links
from adapters.chat._port import Conversation
from netclaw.errors import NetclawError
from netclaw.security.policy import channel_of

log = logging.getLogger(__name__)

ConversationOf = Callable[[str], Conversation | None]


class Owing(Protocol):
    """What the watch needs of the gateway."""

    @property
    def cluster_poll_s(self) -> float | None: ...

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]: ...

    async def sessions_owing_replies(self, platform: str) -> list[str]: ...

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...


class OutboxWatch:
    def __init__(self, gateway: Owing, calls: PlatformCalls, links: Links) -> None:
        self._gateway = gateway
        self._calls = calls
        self._links = links
        self._conversation_of: ConversationOf | None = None  # set by resume

    async def resume(self, conversation_of: ConversationOf) -> None:
        """Follow every session of this platform that owes its conversation something; from
        now on, also each that records a reply with nobody watching — and, with several
        nodes, one another node recorded: they are looked for every few seconds."""
        if self._conversation_of is None:
            self._conversation_of = conversation_of
            self._gateway.watch_owed_replies(self._calls.platform, self.reply_owed)
            every = self._gateway.cluster_poll_s
            if every is not None:
                self._calls.spawn(self._keep_looking(every))
        await self.look()

    def stop(self) -> None:
        self._gateway.unwatch_owed_replies(self._calls.platform, self.reply_owed)

    async def look(self) -> None:
        platform, conversation_of, links = self._calls.platform, self._conversation_of, self._links
        if conversation_of is None:  # not resumed yet: nothing to post to
            return
        clustered = self._gateway.cluster_poll_s is not None
        looked_at = time.monotonic()
        try:
            pending = await self._gateway.sessions_with_pending_input(channel=platform)
            owing = await self._gateway.sessions_owing_replies(platform)
            for session_id in dict.fromkeys([*pending, *owing]):
                conversation = conversation_of(session_id)
                if conversation is None or links.listening(session_id):
                    continue
                # Owned by another node: it posts the reply itself, or (not connected to
                # this platform) lets the session go once it recorded one, and a later look
                # finds it free.
                if await links.owned_elsewhere(session_id):
                    continue
                links.follow(session_id, conversation)
        except NetclawError as exc:  # best effort: the next message follows it anyway
            log.warning("%s: cannot list sessions owing replies: %s", platform, exc)
            return
        if clustered:
            # A message acknowledged here whose turn ran on another node (or ended before
            # this node listened): once its session owes nothing, its reaction comes off.
            owes = {*pending, *owing}
            for link in [link for link in links if link.session_id not in owes]:
                self._settle(link, looked_at)

    def reply_owed(self, session_id: str) -> None:
        """A session recorded a reply: if no link shows it live, follow the session (its
        ``joined`` makes the outbox post what is owed)."""
        conversation_of = self._conversation_of
        if channel_of(session_id) != self._calls.platform or self._links.stopping or conversation_of is None:
            return
        if self._links.listening(session_id):
            return
        conversation = conversation_of(session_id)
        if conversation is not None:
            self._links.follow(session_id, conversation)

    def _settle(self, link: Link, before: float) -> None:
        """The session owed nothing when we looked: take the reaction off the messages
        acknowledged before that, and let the link go if nothing here is under way."""
        link.reactions.settle(before)
        if not link.listening() and not link.pending():
            self._links.drop(link)

    async def _keep_looking(self, every_s: float) -> None:
        while not self._links.stopping:
            await asyncio.sleep(every_s)
            await self.look()
