"""The actor's write path: append events, wait for the durable ack, then the new state.

Persist is the one blocking call an actor makes (ARCHITECTURE.md §1): the journal's
group commit keeps the wait short. If the wait runs out, the write may still land —
the outcome is unknown, so the caller is told exactly that (:class:`OutcomeUnknown`)
and the actor, whose state can no longer be trusted, is replaced by one recovered
from the journal. Snapshots are written in the background every
``snapshot_interval`` events, after compaction and at passivation.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time

from netclaw.errors import JournalError, OutcomeUnknown
from netclaw.persistence import Journal, NewEvent, SessionRow
from netclaw.runtime import IoLoop
from netclaw.sessions._events import SessionEvent, encode
from netclaw.sessions._state import SessionState

log = logging.getLogger(__name__)

PERSIST_TIMEOUT_S = 30.0


class Recorder:
    __slots__ = ("_io", "_journal", "snapshot_seq")

    def __init__(self, io: IoLoop, journal: Journal) -> None:
        self._io = io
        self._journal = journal
        self.snapshot_seq = 0  # the seq of the latest snapshot written (or recovered from)

    def persist(self, state: SessionState, *events: SessionEvent) -> SessionState:
        """Append durably; returns the state with ``events`` applied. Raises (and applies
        nothing) if the write failed (JournalError) or its outcome is unknown."""
        now = time.time()
        new = state
        for event in events:
            new = new.apply(event, new.seq + 1, now)
        row = SessionRow(
            id=new.session_id,
            channel=new.channel,
            title=new.title,
            turns=new.turns,
            last_activity=now,
            pending=new.pending_inputs,
            undelivered=len(new.undelivered),
        )
        encoded = [NewEvent(*encode(e)) for e in events]
        future = self._io.submit(self._journal.append(state.session_id, state.seq, encoded, row))
        timeout = PERSIST_TIMEOUT_S  # read at each call, so tests can shorten it
        try:
            future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            raise OutcomeUnknown(
                f"the journal did not confirm a write for {state.session_id} within {timeout:g}s; "
                "it may still land"
            ) from exc
        except JournalError:
            raise
        except Exception as exc:  # anything else from the write path is a journal failure
            raise JournalError(f"journal write for {state.session_id} failed: {exc}") from exc
        return new

    def snapshot_due(self, state: SessionState, interval: int) -> bool:
        return state.seq - self.snapshot_seq >= interval

    def snapshot(self, state: SessionState, *, wait: bool) -> None:
        """Save ``state``; in the background unless ``wait`` (passivation)."""
        seq, data = state.seq, state.to_json()
        future = self._io.submit(self._journal.save_snapshot(state.session_id, seq, data))
        self.snapshot_seq = seq
        if wait:
            future.result(PERSIST_TIMEOUT_S)
        else:
            session_id = state.session_id
            future.add_done_callback(lambda f: _log_failure(session_id, f))


def _log_failure(session_id: str, future: concurrent.futures.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("%s: snapshot failed: %s", session_id, future.exception())
