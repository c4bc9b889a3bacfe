"""How every part of the renderer calls the platform: one :class:`PlatformCalls` per
renderer, over its :class:`~adapters.chat.ChatPort`.

- ``retried``: what must get through (a final reply, a note, a thread) is tried again
  while the failure is transient (:mod:`netclaw.retry`, the port's classifier).
- ``quietly``: what may be lost (a reaction, "typing", a stale piece's deletion) is tried
  once; a failure is logged, never raised.
- ``spawn``: what nobody waits for runs in the background; ``cancel_all`` ends it at stop.

A request already on its way is never cut off by a cancelled caller: the platform may act
on it anyway, and whatever follows a stop (the next renderer's outbox, after an adapter
restart in this process) must find it landed — not see it land later, a post whose key
then answers for a partial reply, or a stale edit over the final text. ``cancel_all``
waits for such requests (bounded) and cancels only what has not started one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from adapters.chat._port import MUST_DELIVER, ChatApiError, ChatPort, retry_verdict
from netclaw.retry import RetryPolicy, with_retries

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_WAIT_S = 5.0  # at stop, how long the cancelled work gets to finish


class PlatformCalls:
    def __init__(self, port: ChatPort) -> None:
        self.port = port
        self._tasks: set[asyncio.Task[Any]] = set()
        self._landing: set[asyncio.Task[Any]] = set()  # requests under way: awaited at stop

    @property
    def platform(self) -> str:
        return self.port.platform

    async def retried(
        self, what: str, call: Callable[[], Awaitable[T]], policy: RetryPolicy = MUST_DELIVER
    ) -> T:
        """``call`` under ``policy``; the last failure (a ChatApiError) is raised."""
        return await with_retries(
            lambda: self._landed(call()),
            classify=retry_verdict,
            policy=policy,
            what=f"{self.platform}: {what}",
            logger=log,
        )

    async def quietly(self, what: str, call: Awaitable[object]) -> bool:
        """A best-effort call: True if it worked; a failure is logged, not raised."""
        try:
            await self._landed(call)
        except ChatApiError as exc:
            log.info("%s: could not %s: %s", self.platform, what, exc)
            return False
        return True

    async def _landed(self, call: Awaitable[T]) -> T:
        """``call``, carried on to its end even when the caller is cancelled."""
        task: asyncio.Task[T] = asyncio.ensure_future(call)
        self._landing.add(task)
        task.add_done_callback(_retrieved)
        task.add_done_callback(self._landing.discard)
        return await asyncio.shield(task)

    def spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self, also: Iterable[asyncio.Task[Any] | None] = ()) -> None:
        """Cancel the background work and wait a little for it (and for ``also``) to end."""
        for task in list(self._tasks):
            task.cancel()
        waiting = [t for t in (*self._tasks, *self._landing, *also) if t is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=STOP_WAIT_S)


def _retrieved(task: asyncio.Task[Any]) -> None:
    # Its caller may have left: a failure nobody awaits is not an asyncio warning.
    if not task.cancelled():
        task.exception()
