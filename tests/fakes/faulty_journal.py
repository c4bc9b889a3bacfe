"""Fault injection into the daemon's own journal: fail, or answer late, chosen appends.

The journal really writes (or really refuses); only the answer to the session is
changed, which is what a full disk, an I/O error or a stalled fsync look like from a
session's side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from netclaw.errors import JournalError
from netclaw.persistence import NewEvent, SessionRow
from tests.conftest import DaemonHandle


class JournalFaults:
    """Wraps the daemon's journal.append: fail, or delay the answer to, chosen appends."""

    def __init__(self, handle: DaemonHandle) -> None:
        assert handle.daemon.journal is not None
        self.journal = handle.daemon.journal
        self.real = self.journal.append
        self.fail_when: Callable[[Sequence[NewEvent]], bool] | None = None
        self.delay_first_s: float | None = None
        self.failed = 0
        self.journal.append = self._append  # type: ignore[method-assign]

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
        return seq

    def restore(self) -> None:
        self.journal.append = self.real  # type: ignore[method-assign]


def has(kind: str) -> Callable[[Sequence[NewEvent]], bool]:
    return lambda events: any(e.type == kind for e in events)
