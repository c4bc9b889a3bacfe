"""The "working on it" mark, by message id: one :class:`Reactions` per followed session.

A user message the gateway admitted wears the platform's reaction until the
``turn_completed`` that names it — matched by the message id the turn reports, never by
counting turns, so turns that end out of order unmark the right messages. A turn may end
before its admission is back (a quick reply): it is remembered, and its message is then
never marked. A mark is taken off only after it was put on (the removal waits for the add).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from adapters.chat._calls import PlatformCalls
from adapters.chat._port import MessageRef

REMEMBERED_COMPLETIONS = 64  # turns that ended before their message's reaction was added


@dataclass(slots=True)
class _Mark:
    source: MessageRef  # the platform message wearing the reaction
    added: asyncio.Task[bool] | None = None
    at: float = field(default_factory=time.monotonic)


class Reactions:
    def __init__(self, calls: PlatformCalls, reaction: str) -> None:
        self._calls = calls
        self._reaction = reaction  # the platform's name of the mark
        self._marks: dict[str, _Mark] = {}  # netclaw message id -> its platform message
        self._completed: list[str] = []  # turns that ended before their message was marked

    @property
    def waiting(self) -> bool:
        """Is a marked message still waiting for its turn to end?"""
        return bool(self._marks)

    def mark(self, message_id: str, source: MessageRef) -> bool:
        """An admitted message: mark ``source`` until the turn of ``message_id`` ends. False
        when that turn already ended (nothing to mark)."""
        if message_id in self._completed:
            self._completed.remove(message_id)
            return False
        mark = _Mark(source)
        mark.added = self._calls.spawn(self._react(source, add=True))
        self._marks[message_id] = mark
        return True

    def turn_ended(self, message_id: str) -> None:
        mark = self._marks.pop(message_id, None)
        if mark is not None:
            self._calls.spawn(self._unmark(mark))
            return
        self._completed.append(message_id)  # the admission is still on its way back to us
        del self._completed[:-REMEMBERED_COMPLETIONS]

    def settle(self, before: float) -> None:
        """The session owed nothing when we looked (at monotonic ``before``): unmark the
        messages marked before that (their turns ended on another node, or unseen)."""
        for message_id, mark in list(self._marks.items()):
            if mark.at < before:
                del self._marks[message_id]
                self._calls.spawn(self._unmark(mark))

    def release(self) -> None:
        """We stop following the session: take every mark off."""
        for mark in self._marks.values():
            self._calls.spawn(self._unmark(mark))
        self._marks.clear()

    def removals(self) -> list[Coroutine[Any, Any, bool]]:
        """At stop (the adds were cancelled): a removal of each mark, to await at once. A
        turn cut short resumes after a restart; no "working on it" is left behind."""
        return [self._react(mark.source, add=False) for mark in self._marks.values()]

    async def _unmark(self, mark: _Mark) -> bool:
        if mark.added is not None:
            with contextlib.suppress(Exception):
                if not await mark.added:  # never remove before the add landed
                    return False
        return await self._react(mark.source, add=False)

    async def _react(self, source: MessageRef, *, add: bool) -> bool:
        what = "add a reaction" if add else "remove a reaction"
        return await self._calls.quietly(what, self._calls.port.react(source, self._reaction, add=add))
