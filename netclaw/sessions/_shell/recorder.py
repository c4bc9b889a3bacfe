"""The actor's write path: append events, wait for the durable ack, then the new state.

Persist is the one blocking call an actor makes: the journal's
group commit keeps the wait short. If the wait runs out, the write may still land —
the outcome is unknown, so the caller is told exactly that (:class:`OutcomeUnknown`)
and the actor, whose state can no longer be trusted, is replaced by one recovered
from the journal. Snapshots are written in the background when the session says
(``snapshot.due``: every ``snapshot_interval`` events, further apart in a long session),
after compaction and at passivation; each writes the
transcript messages since the last one and the small rest of the state, never the whole
transcript again (a failed one makes the next write them all).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Sequence

from netclaw.errors import JournalError, OutcomeUnknown
from netclaw.persistence import Journal, NewEvent, SessionRow
from netclaw.process.runtime import IoLoop, flush_batch
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.codec import encode
from netclaw.sessions._core.journal.events import SessionEvent
from netclaw.sessions._core.journal.state import SessionState

log = logging.getLogger(__name__)

PERSIST_TIMEOUT_S = 30.0


class Recorder:
    __slots__ = ("_io", "_journal", "_resend", "snapshot_rows", "snapshot_seq")

    def __init__(self, io: IoLoop, journal: Journal) -> None:
        self._io = io
        self._journal = journal
        self.snapshot_seq = 0  # the seq of the latest snapshot written (or recovered from)
        self.snapshot_rows = 0  # transcript messages the snapshot store holds (sent, at least)
        self._resend = False  # a snapshot failed: the next one sends every row again

    def write(self, new: SessionState, events: Sequence[SessionEvent]) -> None:
        """Append ``events`` durably; ``new`` is the state with them applied (the session
        applies them itself). Raises if the write failed (JournalError) or its outcome is
        unknown (OutcomeUnknown)."""
        now = time.time()
        base = new.seq - len(events)
        row = SessionRow(
            id=new.session_id,
            channel=new.channel,
            title=new.title,
            turns=new.turns,
            last_activity=now,
            pending=new.pending_inputs,
            undelivered=new.owed,  # chat replies not shown, sub-agent reports not admitted
        )
        encoded = [NewEvent(*encode(e)) for e in events]
        changed = snapshots.first_changed_row(new, events)
        if changed is not None:  # a row the snapshot store holds was changed: written again next time
            self.snapshot_rows = min(self.snapshot_rows, changed)
        future = self._journal.append_threadsafe(new.session_id, base, encoded, row)
        flush_batch()  # while the disk works: what this message handed the loop goes out now
        timeout = PERSIST_TIMEOUT_S  # read at each call, so tests can shorten it
        try:
            future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            raise OutcomeUnknown(
                f"the journal did not confirm a write for {new.session_id} within {timeout:g}s; "
                "it may still land"
            ) from exc
        except JournalError:
            raise
        except Exception as exc:  # anything else from the write path is a journal failure
            raise JournalError(f"journal write for {new.session_id} failed: {exc}") from exc

    def recovered(self, seq: int, rows: int) -> None:
        """Recovery found the latest snapshot at ``seq`` holding ``rows`` transcript rows."""
        self.snapshot_seq = seq
        self.snapshot_rows = rows

    def snapshot(self, state: SessionState, *, wait: bool) -> None:
        """Save ``state``; in the background unless ``wait`` (passivation)."""
        first = 0 if self._resend else self.snapshot_rows
        self._resend = False
        seq = state.seq
        data, rows = snapshots.encode(state, first)
        future = self._io.submit(self._journal.save_snapshot(state.session_id, seq, data, rows, first))
        self.snapshot_seq = seq
        self.snapshot_rows = len(state.transcript)
        session_id = state.session_id
        future.add_done_callback(lambda f: self._settled(session_id, f))
        if wait:
            try:
                future.result(PERSIST_TIMEOUT_S)
            except BaseException:
                self._resend = True  # here too: the callback may run after this thread wakes
                raise

    def _settled(self, session_id: str, future: concurrent.futures.Future[None]) -> None:
        # On the loop's thread; the flag is read by the actor at its next snapshot.
        if not future.cancelled() and future.exception() is not None:
            self._resend = True
            log.warning("%s: snapshot failed: %s", session_id, future.exception())
