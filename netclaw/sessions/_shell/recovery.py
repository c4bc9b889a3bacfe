"""Rebuild a session's state from its latest snapshot plus the events after it.

Two halves, so the CPU work stays off the I/O loop: :func:`fetch_journal` reads the
rows (I/O, on the loop), :func:`rebuild_state` decodes and folds them (CPU, on the
actor's thread, or in a worker thread for :func:`load_state`, which API reads use).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from netclaw.errors import JournalCorrupt
from netclaw.persistence import Journal, Snapshot, StoredEvent
from netclaw.process.runtime import IoLoop
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.codec import decode, decode_all
from netclaw.sessions._core.journal.state import SessionState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JournalRows:
    session_id: str
    snapshot: Snapshot | None
    events: list[StoredEvent]  # after the snapshot (all of them without one)


async def fetch_journal(journal: Journal, session_id: str, *, use_snapshot: bool = True) -> JournalRows:
    """The latest snapshot and every event after it. Runs on the I/O loop."""
    snapshot = await journal.load_snapshot(session_id) if use_snapshot else None
    events = await journal.replay(session_id, snapshot.seq if snapshot is not None else 0)
    return JournalRows(session_id, snapshot, events)


def rebuild_state(rows: JournalRows) -> SessionState | None:
    """Decode and fold; CPU only. None when the snapshot cannot be read: fetch again
    without it (a full replay). An event that cannot be read raises JournalCorrupt —
    silently skipping it would lose history."""
    state = SessionState(rows.session_id)
    if rows.snapshot is not None:
        try:
            state = snapshots.decode(rows.snapshot.state, rows.snapshot.messages)
        except JournalCorrupt as exc:
            log.warning(
                "%s: ignoring unreadable snapshot at seq %d (%s); replaying all events",
                rows.session_id,
                rows.snapshot.seq,
                exc,
            )
            return None
    events = decode_all([(e.type, e.payload) for e in rows.events])
    return state.apply_all(
        zip(events, (e.seq for e in rows.events), (e.ts for e in rows.events), strict=True)
    )


async def load_state(journal: Journal, session_id: str) -> SessionState:
    """Fetch on the loop, rebuild in a worker thread (for reads outside an actor)."""
    rows = await fetch_journal(journal, session_id)
    state = await asyncio.to_thread(rebuild_state, rows)
    if state is None:
        rows = await fetch_journal(journal, session_id, use_snapshot=False)
        state = await asyncio.to_thread(rebuild_state, rows)
    assert state is not None  # without a snapshot there is nothing to skip
    return state


def recover_state(
    io: IoLoop, journal: Journal, session_id: str, timeout_s: float
) -> tuple[SessionState, int, int]:
    """For an actor's own thread: claim the session for this node, fetch on the loop
    (blocking this thread), rebuild here. Also how many transcript rows the snapshot
    store holds for it (0 after a full replay: the next snapshot writes them all again),
    and the claim's epoch (to release it with). SessionOwnedElsewhere when another node
    holds it."""
    epoch, rows = io.run(_claim_and_fetch(journal, session_id), timeout_s)
    try:
        state = rebuild_state(rows)
        if state is not None:
            saved = len(rows.snapshot.messages) if rows.snapshot is not None else 0
            # A row saved before an event after the snapshot changed it is written again.
            changed = snapshots.first_changed_row(
                state, (decode(e.type, e.payload) for e in rows.events if e.type == "SpeechTranscribed")
            )
            return state, saved if changed is None else min(saved, changed), epoch
        state = rebuild_state(io.run(fetch_journal(journal, session_id, use_snapshot=False), timeout_s))
    except BaseException:
        journal.release(session_id, epoch)  # not recovered: the claim must not outlive us
        raise
    assert state is not None
    return state, 0, epoch


async def _claim_and_fetch(journal: Journal, session_id: str) -> tuple[int, JournalRows]:
    # Claimed first: what is read after it is everything any earlier owner wrote (their
    # writes hold the lease row until they commit).
    epoch = await journal.claim(session_id)
    return epoch, await fetch_journal(journal, session_id)
