"""Fault injection into the daemon's own journal: fail, or answer late, chosen appends.

The journal really writes (or really refuses); only the answer to the session is
changed, which is what a full disk, an I/O error or a stalled fsync look like from a
session's side."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence

from netclaw.errors import JournalError
from netclaw.persistence import NewEvent, SessionRow
from tests.conftest import DaemonHandle


class JournalFaults:
    """Wraps the daemon's journal appends (the loop's and the actors' path): fail, or delay
    the answer to, chosen appends."""

    def __init__(self, handle: DaemonHandle) -> None:
        assert handle.daemon.journal is not None
        self.journal = handle.daemon.journal
        self.real = self.journal.append
        self.real_threadsafe = self.journal.append_threadsafe
        self.fail_when: Callable[[Sequence[NewEvent]], bool] | None = None
        self.delay_first_s: float | None = None
        self.answered_late = threading.Event()  # the delayed answer has been given
        self.failed = 0
        self.journal.append = self._append  # type: ignore[method-assign]
        self.journal.append_threadsafe = self._append_threadsafe  # type: ignore[method-assign]

    def _append_threadsafe(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> concurrent.futures.Future[int]:
        answer: concurrent.futures.Future[int] = concurrent.futures.Future()
        if self.fail_when is not None and self.fail_when(events):
            self.fail_when = None
            self.failed += 1
            answer.set_exception(JournalError("injected: the disk is full"))
            return answer
        real = self.real_threadsafe(persistence_id, expected_seq, events, row)
        delay, self.delay_first_s = self.delay_first_s, None
        if delay is None:
            return real

        def late(done: concurrent.futures.Future[int]) -> None:
            # Durable already (or failed): only the answer is late.
            threading.Timer(delay, self._answer_late, (done, answer)).start()

        real.add_done_callback(late)
        return answer

    async def _append(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> int:
        if self.fail_when is not None and self.fail_when(events):
            self.fail_when = None
            self.failed += 1
            raise JournalError("injected: the disk is full")
        seq = await self.real(persistence_id, expected_seq, events, row)
        if self.delay_first_s is not None:
            delay, self.delay_first_s = self.delay_first_s, None
            await asyncio.sleep(delay)  # durable already: only the answer is late
            self.answered_late.set()
        return seq

    def _answer_late(
        self, source: concurrent.futures.Future[int], target: concurrent.futures.Future[int]
    ) -> None:
        _copy(source, target)
        self.answered_late.set()

    def restore(self) -> None:
        self.journal.append = self.real  # type: ignore[method-assign]
        self.journal.append_threadsafe = self.real_threadsafe  # type: ignore[method-assign]


def _copy(source: concurrent.futures.Future[int], target: concurrent.futures.Future[int]) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def has(kind: str) -> Callable[[Sequence[NewEvent]], bool]:
    return lambda events: any(e.type == kind for e in events)
