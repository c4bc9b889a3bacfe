"""When a group commit waits a moment for company: the journal's commit delay.

A commit costs the disk a flush and rewrites whole the pages it shares with any other
(the events table's last page, the database header, the WAL's partly written last block),
so appends of many sessions in one commit cost little more than one append alone. The
writer commits whatever is queued when it looks, which groups appends only while a commit
runs: on a fast disk, with many sessions busy, every append got a commit of its own — two
per turn (bench/ab.py). So, as PostgreSQL's ``commit_delay`` with ``commit_siblings``, a
commit waits up to ``delay`` for more — only when more are likely in that time:

- another session is mid-turn: its latest append left input pending, so it appends again
  when its turn ends;
- and other sessions' appends came recently at a rate that makes one likely within the
  delay (a window of :data:`RATE_WINDOW` delays).

A lone session never waits, nor do sessions that take turns one after another (whoever
appends, nobody else is mid-turn). The wait ends as soon as no other session mid-turn is
left out of the batch. Durability is unchanged: an append is answered after its commit.

Pure: time is an input (``time.monotonic`` seconds); the writer thread owns an instance.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection

RATE_WINDOW = 20  # delays: how far back arrivals count towards the rate
# A session mid-turn that has not appended for this long is not waited for (its turn waits
# on something slow, or it is gone without a last append).
MID_TURN_FOR_S = 60.0


class CommitDelay:
    """Whether a commit waits for more appends, and until when."""

    __slots__ = ("_mid_turn", "_recent", "delay", "window")

    def __init__(self, delay: float) -> None:
        self.delay = max(0.0, delay)
        self.window = self.delay * RATE_WINDOW
        self._recent: deque[tuple[float, str]] = deque()  # (arrival, session) in the window
        self._mid_turn: dict[str, float] = {}  # session → its latest append that left input pending

    def arrived(self, now: float, persistence_id: str, pending: int | None) -> None:
        """An append of ``persistence_id`` reached the writer; ``pending``: the inputs it
        left without a recorded turn (None: the append does not say)."""
        if not self.delay:
            return
        self._recent.append((now, persistence_id))
        if pending is None:
            return
        if pending > 0:
            self._mid_turn[persistence_id] = now
        else:
            self._mid_turn.pop(persistence_id, None)

    def forget(self, persistence_id: str) -> None:
        """The session was erased: nothing more will come from it."""
        self._mid_turn.pop(persistence_id, None)

    def until(self, now: float, batch: Collection[str]) -> float | None:
        """When to commit a batch holding appends of the sessions in ``batch``: None for at
        once, else the moment to wait until (unless :meth:`awaited` turns false first)."""
        if not self.delay:
            return None
        recent, horizon = self._recent, now - self.window
        while recent and recent[0][0] < horizon:
            recent.popleft()
        self._drop_stale(now)
        if not self.awaited(batch):
            return None
        others = sum(1 for _, pid in recent if pid not in batch)
        if others * self.delay < self.window:  # less than one expected within the delay
            return None
        return now + self.delay

    def awaited(self, batch: Collection[str]) -> bool:
        """Whether some session mid-turn has no append in ``batch`` yet."""
        mid_turn = self._mid_turn
        return len(mid_turn) > sum(1 for pid in batch if pid in mid_turn)

    def _drop_stale(self, now: float) -> None:
        stale = now - MID_TURN_FOR_S
        mid_turn = self._mid_turn
        if mid_turn and min(mid_turn.values()) < stale:
            for pid in [pid for pid, t in mid_turn.items() if t < stale]:
                del mid_turn[pid]
