"""Restarting sessions that broke while they still owed replies (queued input, a turn the
journal says is unfinished), with backoff, so a broken journal is not hammered."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from netclaw.errors import NetclawError
from netclaw.persistence import Journal
from netclaw.retry import Backoff

log = logging.getLogger(__name__)

# After the 1st, 2nd, ... failure in a row: 0.5 s, 2 s, 8 s, 32 s, 60 s; then the next message.
RESTART_BACKOFF = Backoff(first_s=0.5, max_s=60.0, factor=4.0, jitter=0.0)
RESTARTS_BEFORE_GIVING_UP = 5
FAILURES_FORGOTTEN_AFTER_S = 600.0  # a session that ran this long without failing starts afresh


@dataclass(slots=True)
class _Failures:
    count: int = 0
    last: float = 0.0
    restart: asyncio.TimerHandle | None = None


class Restarts:
    """Loop-confined. ``start(session_id)`` recovers the session (the manager's admit);
    ``busy(session_id)`` says it is resident or waiting already."""

    def __init__(self, journal: Journal, start: Callable[[str], object], busy: Callable[[str], bool]) -> None:
        self._journal = journal
        self._start = start
        self._busy = busy
        self._failures: dict[str, _Failures] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.restarts = 0  # broken actors restarted because they owed replies
        self.closed = False

    def failed_here(self, session_id: str) -> bool:
        """It failed recently: it restarts on its own backoff, not when warmed."""
        return session_id in self._failures

    def forget(self, session_id: str) -> None:
        """It passivated or was erased: its failures are history."""
        failures = self._failures.pop(session_id, None)
        if failures is not None and failures.restart is not None:
            failures.restart.cancel()

    def schedule(self, session_id: str) -> None:
        """A client was told its accepted message resumes: make that true without waiting
        for the next message."""
        now = time.monotonic()
        failures = self._failures.setdefault(session_id, _Failures())
        if now - failures.last > FAILURES_FORGOTTEN_AFTER_S:
            failures.count = 0
        failures.count += 1
        failures.last = now
        if failures.restart is not None:
            failures.restart.cancel()
            failures.restart = None
        if failures.count > RESTARTS_BEFORE_GIVING_UP:
            log.error(
                "%s: failed %d times in a row; not restarting it until its next message",
                session_id,
                failures.count,
            )
            return
        delay = RESTART_BACKOFF.delay(failures.count - 1)
        failures.restart = asyncio.get_running_loop().call_later(delay, self._spawn, session_id)

    def close(self) -> None:
        self.closed = True
        for failures in self._failures.values():
            if failures.restart is not None:
                failures.restart.cancel()
        self._failures.clear()
        for task in self._tasks:
            task.cancel()

    def _spawn(self, session_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._restart_if_owed(session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart_if_owed(self, session_id: str) -> None:
        failures = self._failures.get(session_id)
        if failures is not None:
            failures.restart = None
        if self.closed or self._busy(session_id):
            return  # shutting down, or a new message already recovered it (or will)
        try:
            row = await self._journal.get_session(session_id)
        except NetclawError as exc:
            log.warning("%s: cannot tell whether the failed session owes replies: %s", session_id, exc)
            self.schedule(session_id)
            return
        if row is None or row.pending == 0 or self.closed or self._busy(session_id):
            return
        log.info(
            "%s: restarting the failed session: %d message(s) still owe a reply", session_id, row.pending
        )
        self.restarts += 1
        self._start(session_id)
