"""Rebuild a session's state from its latest snapshot plus the events after it."""

from __future__ import annotations

import logging

from netclaw.errors import JournalCorrupt
from netclaw.persistence import Journal
from netclaw.sessions._events import decode
from netclaw.sessions._state import SessionState

log = logging.getLogger(__name__)


async def load_state(journal: Journal, session_id: str) -> SessionState:
    """Runs on the I/O loop. A snapshot that cannot be read is skipped (full replay);
    an event that cannot be read is fatal — silently skipping it would lose history."""
    state = SessionState(session_id)
    snapshot = await journal.load_snapshot(session_id)
    if snapshot is not None:
        try:
            state = SessionState.from_json(snapshot.state)
        except JournalCorrupt as exc:
            log.warning(
                "%s: ignoring unreadable snapshot at seq %d (%s); replaying all events",
                session_id,
                snapshot.seq,
                exc,
            )
    events = await journal.replay(session_id, state.seq)
    return state.apply_all((decode(e.type, e.payload), e.seq, e.ts) for e in events)
