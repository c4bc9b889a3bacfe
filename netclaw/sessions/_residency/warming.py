"""Warm start: sessions recovered at start-up before anyone talks to them (the ones a
graceful restart found active), so their interrupted turns resume without waiting for a
message. They are held — recovered, not going on — until the channels that show their
replies are listening (:meth:`WarmStart.take_held`); those a restart interrupted learn it
once, on their first model call (the continuity notice)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)


class WarmStart:
    """Loop-confined. ``admit(session_id, resumed_at=, held=)`` starts a session (the
    manager's), ``busy`` says it is resident or waiting already, ``closed`` that no new
    session may start."""

    def __init__(
        self, admit: Callable[..., object], busy: Callable[[str], bool], closed: Callable[[], bool]
    ) -> None:
        self._admit = admit
        self._busy = busy
        self._closed = closed
        # Warmed after a graceful restart and not yet told so: session → when it stopped.
        self.continuity: dict[str, float] = {}
        self._recovering: dict[str, asyncio.Future[None]] = {}  # warm_all() waits on these
        self._held: set[str] = set()  # warmed, waiting for take_held()

    async def warm_all(
        self,
        session_ids: Sequence[str],
        *,
        concurrency: int,
        resumed_at: float | None,
        resumed: frozenset[str],
        timeout_s: float,
    ) -> int:
        """Recover sessions ``concurrency`` at a time; those in ``resumed`` were interrupted
        by a restart at ``resumed_at``. Returns how many started."""
        started = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for first in range(0, len(session_ids), max(1, concurrency)):
            waiting = []
            for session_id in session_ids[first : first + concurrency]:
                if self._busy(session_id) or self._closed():
                    continue
                when = resumed_at if session_id in resumed else None
                if when is not None:
                    self.continuity[session_id] = when
                waiting.append(self._recovering.setdefault(session_id, loop.create_future()))
                self._admit(session_id, resumed_at=when, held=True)
                self._held.add(session_id)
                started += 1
            if waiting:
                _, late = await asyncio.wait(waiting, timeout=max(0.1, deadline - loop.time()))
                if late:
                    log.warning("%d session(s) still recovering; going on without waiting", len(late))
        return started

    def recovered(self, session_id: str) -> None:
        """It is ready (or failed trying): warm_all stops waiting for it."""
        waiter = self._recovering.pop(session_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take_held(self) -> list[str]:
        """The warmed sessions, to be told they may go on (once)."""
        held, self._held = self._held, set()
        return sorted(held)
