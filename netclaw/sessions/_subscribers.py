"""Subscribers: who watches a session, with which filter, and the queue that keeps a
slow one from stalling it.

The actor owns a :class:`SubscriberSet` and calls :meth:`Sink.offer` from its own
thread; offering never blocks. :class:`OutputQueue` is the sink of every loop-side
consumer: it hops each output onto the loop, coalesces consecutive text deltas, and —
if the consumer still falls too far behind — drops only droppable outputs, then
disconnects it rather than grow without bound or lose a ``text`` or lifecycle output
silently. :class:`Subscription` is what the gateway hands out: an async iterator over
such a queue whose ``close()`` unsubscribes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from netclaw import outputs as out
from netclaw.process.runtime import call_soon

log = logging.getLogger(__name__)


class Sink(Protocol):
    def offer(self, output: out.Output) -> bool:
        """Queue ``output`` for delivery without blocking; False once the sink is gone."""
        ...

    def close(self) -> None:
        """The session is going away: end the stream once what was offered is delivered.
        Callable from any thread."""
        ...


@dataclass(slots=True)
class Subscriber:
    id: str
    filter: out.OutputFilter
    sink: Sink


class SubscriberSet:
    """The actor's subscribers. A sink that reports itself gone is removed on the spot."""

    __slots__ = ("_subs", "streams_text")

    def __init__(self) -> None:
        self._subs: dict[str, Subscriber] = {}
        # Does anyone take streamed text (``text_delta``)? Kept by the actor, read by its model
        # calls on the loop (a bool: one read, no lock): nobody's, and deltas are not relayed.
        self.streams_text = False

    def add(self, sub: Subscriber) -> None:
        self._subs[sub.id] = sub
        self._changed()

    def remove(self, sub_id: str) -> bool:
        removed = self._subs.pop(sub_id, None) is not None
        self._changed()
        return removed

    def _changed(self) -> None:
        self.streams_text = any(out.OutputFilter.TEXT_STREAMING & sub.filter for sub in self._subs.values())

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._subs

    def publish(self, output: out.Output) -> list[str]:
        """Offer ``output`` to whoever wants it; returns the subscribers found gone (removed)."""
        gone = [
            sub.id
            for sub in self._subs.values()
            if output.wanted_by(sub.filter) and not sub.sink.offer(output)
        ]
        for sub_id in gone:
            log.info("subscriber %s disconnected; removed", sub_id)
            self._subs.pop(sub_id, None)
        if gone:
            self._changed()
        return gone

    def close_all(self) -> None:
        """The actor stops: end every stream, so clients reconnect to its successor."""
        for sub in self._subs.values():
            sub.sink.close()
        self._subs.clear()
        self._changed()

    def send_to(self, sub_id: str, output: out.Output) -> bool:
        """Offer ``output`` to one subscriber; False when it is found gone (removed)."""
        sub = self._subs.get(sub_id)
        if sub is not None and not sub.sink.offer(output):
            self._subs.pop(sub_id, None)
            self._changed()
            return False
        return True


class OutputQueue:
    """A bounded, coalescing queue consumed by a coroutine on the I/O loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        soft_limit: int = 256,
        hard_limit: int = 4096,
    ) -> None:
        self._loop = loop
        self._items: deque[out.Output] = deque()
        self._ready = asyncio.Event()
        self._soft_limit = soft_limit
        self._hard_limit = hard_limit
        self.closed = False
        self._closing = False  # close() was called; outputs offered before it still arrive
        self.overflowed = False
        self.dropped = 0

    # -- producer side (any thread) -----------------------------------------------------------

    def offer(self, output: out.Output) -> bool:
        if self.closed or self._closing:
            return False
        try:
            call_soon(self._loop, self._push, output)
        except RuntimeError:  # the loop is closed: the consumer is gone
            self.closed = True
            return False
        return True

    # -- loop side ----------------------------------------------------------------------------

    def _push(self, output: out.Output) -> None:
        if self.closed:
            return
        items = self._items
        last = items[-1] if items else None
        if isinstance(output, out.TextDelta) and isinstance(last, out.TextDelta) and last.turn == output.turn:
            items[-1] = replace(last, delta=last.delta + output.delta)
        else:
            items.append(output)
        if len(items) > self._soft_limit:
            self._shed()
        self._ready.set()

    def _shed(self) -> None:
        before = len(self._items)
        self._items = deque(o for o in self._items if not o.droppable)
        self.dropped += before - len(self._items)
        if len(self._items) > self._hard_limit:
            # Too far behind even on must-deliver outputs: cut it loose, visibly.
            log.warning("subscriber fell %d outputs behind; disconnecting it", len(self._items))
            self.overflowed = True
            self._close_now()

    def close(self) -> None:
        """End the stream after everything offered so far (callable from any thread)."""
        self._closing = True
        # Queued behind the pushes already scheduled, so a last `error` still arrives.
        # A closed loop means nobody is waiting.
        with contextlib.suppress(RuntimeError):
            call_soon(self._loop, self._close_now)

    def _close_now(self) -> None:
        self.closed = True
        self._ready.set()

    async def get(self) -> out.Output | None:
        """Next output, or None once closed and drained."""
        while not self._items:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)


class Subscription:
    """One subscriber's view of a session: ``async for output in subscription``.

    The first output is always :class:`~netclaw.outputs.Joined`. The stream ends (the
    iterator stops, :meth:`get` returns None) when the session's actor stops — it was
    passivated, evicted or failed; a consumer that still expects output subscribes
    again — or when this subscriber fell too far behind (:attr:`overflowed`).
    :meth:`close` unsubscribes; it never starts a session that has stopped.
    Loop-confined, like everything that consumes outputs.
    """

    def __init__(
        self, session_id: str, sub_id: str, queue: OutputQueue, unsubscribe: Callable[[], None]
    ) -> None:
        self.session_id = session_id
        self.id = sub_id
        self._queue = queue
        self._unsubscribe: Callable[[], None] | None = unsubscribe

    @property
    def ended(self) -> bool:
        """No more outputs will come (closed, or the session ended the stream) and none wait."""
        return self._queue.closed and not len(self._queue)

    @property
    def overflowed(self) -> bool:
        return self._queue.overflowed

    async def get(self, timeout: float | None = None) -> out.Output | None:
        """The next output; None once the stream has ended. Raises TimeoutError after
        ``timeout`` seconds without one (the subscription stays open)."""
        if timeout is None:
            return await self._queue.get()
        return await asyncio.wait_for(self._queue.get(), timeout)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> out.Output:
        output = await self._queue.get()
        if output is None:
            raise StopAsyncIteration
        return output

    def close(self) -> None:
        """Stop receiving and unsubscribe (idempotent)."""
        self._queue.close()
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
