"""The outbox: every reply a session recorded reaches its conversation exactly once.

A reply shown live is recorded as delivered (:meth:`Outbox.mark_delivered`, with the ids
of its messages). One recorded with nobody watching — or shown by a process that crashed
before recording it — is owed: when the session's stream is joined, the outbox posts
what is owed (:meth:`Outbox.deliver_owed`). Every piece keeps its outbox key
(:func:`~adapters.chat.outbox_key`), so a piece the crashed process did post is found
(where the platform can tell) and edited to the final text, not posted twice. Which
sessions owe anything is :mod:`adapters.chat._outbox_watch`'s part.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Protocol

from adapters.chat._calls import PlatformCalls
from adapters.chat._port import MUST_DELIVER, Conversation, outbox_key
from adapters.chat._text import split_message
from netclaw import outputs as out
from netclaw.errors import NetclawError

log = logging.getLogger(__name__)

OUTBOX_LOOKBACK_S = 300.0  # a crashed post is looked for from this long before its reply was recorded


class Deliveries(Protocol):
    """What the outbox needs of the gateway: the session's record of replies shown."""

    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]: ...

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool: ...


class Outbox:
    """The replies one session owes its conversation."""

    def __init__(self, gateway: Deliveries, calls: PlatformCalls, session_id: str, to: Conversation) -> None:
        self._gateway = gateway
        self._calls = calls
        self._session_id = session_id
        self._to = to
        self._delivered: set[int] = set()  # turns whose reply we showed and recorded

    async def deliver_owed(self, joined: out.Joined) -> None:
        """Post the replies the session recorded but the conversation never showed (nobody
        was watching, or we crashed between the two). A turn still running is left to the
        live path."""
        port, sid = self._calls.port, self._session_id
        try:
            owed = await self._gateway.undelivered_replies(sid)
        except NetclawError as exc:
            log.warning("%s: cannot ask %s what it owes: %s", port.platform, sid, exc)
            return
        running = joined.turns if joined.phase in ("processing", "compacting") else joined.turns + 1
        for turn, text, recorded_at in owed:
            if turn >= running or turn in self._delivered:
                continue
            ids: list[str] = []
            pieces = [port.escape(p) for p in split_message(text, port.message_limit)] if text.strip() else []
            for index, piece in enumerate(pieces):
                key = outbox_key(sid, turn, index)
                found = await self._calls.retried(
                    "look for a posted reply",
                    partial(port.find_posted, self._to, key, recorded_at - OUTBOX_LOOKBACK_S),
                )
                if found is None:
                    found = await self._calls.retried(
                        "post an owed reply", partial(port.post, self._to, piece, key=key), MUST_DELIVER
                    )
                else:
                    await self._calls.quietly("finish an owed reply", port.edit(self._to, found, piece))
                ids.append(found)
            log.info("%s: posted the owed reply of turn %d in %s", port.platform, turn, sid)
            await self.mark_delivered(turn, ids)

    async def mark_delivered(self, turn: int, message_ids: list[str]) -> None:
        """The reply of ``turn`` is shown in these messages: record it (a failure is logged;
        the outbox finds the messages by key later)."""
        self._delivered.add(turn)
        try:
            await self._gateway.mark_delivered(self._session_id, turn, message_ids)
        except NetclawError as exc:  # shown but not recorded: the outbox finds it by key later
            log.warning(
                "%s: could not record the reply of turn %d in %s: %s",
                self._calls.platform,
                turn,
                self._session_id,
                exc,
            )
            self._delivered.discard(turn)
