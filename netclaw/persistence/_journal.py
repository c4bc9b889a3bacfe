"""The journal and snapshot interfaces, and the records they carry.

SQLite is the embedded implementation (:mod:`._sqlite`), PostgreSQL the one several
nodes share (:mod:`netclaw.persistence.postgres`). Payloads cross this boundary as JSON text so
the journal never needs to know what an event means.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol


@dataclass(frozen=True, slots=True)
class NewEvent:
    type: str
    payload: str  # JSON


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    type: str
    payload: str  # JSON
    ts: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    state: str  # JSON
    ts: float
    messages: Sequence[str] = ()  # the transcript's rows (JSON each), in order


@dataclass(frozen=True, slots=True)
class SessionRow:
    """The listing row kept beside a session's events (same transaction)."""

    id: str
    channel: str
    title: str | None
    turns: int
    last_activity: float
    pending: int
    last_seq: int = 0
    undelivered: int = 0  # chat replies recorded but not yet shown in their conversation

    # The listing's columns, in this order, in every database.
    COLUMNS: ClassVar[str] = "id, channel, title, turns, last_activity, pending, last_seq, undelivered"

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> SessionRow:
        """From a database row of :attr:`COLUMNS`."""
        return cls(str(r[0]), str(r[1]), r[2], int(r[3]), float(r[4]), int(r[5]), int(r[6]), int(r[7]))


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """One page of the session listing, the most recently active first (ties by id)."""

    text: str = ""  # in the id or the title, case-insensitive
    channel: str = ""
    only: Sequence[str] | None = None  # these ids only (e.g. the resident ones in a phase)
    excluding: Sequence[str] = ()  # not these ids (e.g. the resident ones)
    offset: int = 0
    limit: int = 50


@dataclass(frozen=True, slots=True)
class SessionPage:
    rows: list[SessionRow]
    total: int  # the sessions matching the query, on every page
    channels: list[str]  # every channel that has a session (a filter's choices)


def like_pattern(text: str) -> str:
    """``text`` as a LIKE pattern matching it anywhere (``\\`` escapes ``%`` and ``_``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True, slots=True)
class Owner:
    """Another node that holds a session's lease (several daemons on one database)."""

    node_id: str
    url: str | None  # where that node takes forwarded input (its cluster.advertise_url)
    expires_in: float  # seconds until its lease expires unless renewed
    protocol: int = 1  # the newest forwarding protocol that node speaks


@dataclass(frozen=True, slots=True)
class Peer:
    """A live node of the cluster, as the node registry has it."""

    node_id: str
    url: str | None
    version: str | None  # the netclaw it runs (None: a release before versions were kept)
    protocol: int  # the newest forwarding protocol it speaks
    draining: bool  # it takes no new sessions (it is stopping, or drained by hand)
    seen_s: float  # seconds since it last renewed
    sessions: int  # live session leases it holds

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "url": self.url,
            "version": self.version,
            "protocol": self.protocol,
            "state": "draining" if self.draining else "active",
            "seen_s": round(self.seen_s, 2),
            "sessions": self.sessions,
        }


@dataclass(frozen=True, slots=True)
class Lease:
    """A session's lease row: who holds it, at which epoch, and for how long still."""

    node_id: str
    url: str | None
    epoch: int
    live: bool
    expires_in: float  # negative once expired
    protocol: int = 1  # the holder's newest forwarding protocol


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the cluster as the shared database knows it (several daemons on one database)."""

    node_id: str
    url: str | None  # its cluster.advertise_url
    started_at: float  # unix time
    seen_ago_s: float  # since it last renewed its leases (database clock)
    sessions: int  # sessions it holds a live lease on

    def alive(self, lease_s: float) -> bool:
        return self.seen_ago_s <= lease_s


UsageKey = Literal["session", "day", "model"]


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Provider tokens of recorded turns and what they cost, summed per session, UTC day or
    model. ``input_tokens`` are whole prompts, cached parts included; ``speech_seconds``
    the audio transcribed (voice notes), whose cost is in ``cost``."""

    key: str
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int = 0
    cost: float = 0.0  # at the models' prices when the turns were recorded (spend.currency)
    speech_seconds: float = 0.0

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> UsageRow:
        """From the columns every store's usage query selects, in this order."""
        speech = round(float(r[7]) / 1000, 3) if len(r) > 7 and r[7] else 0.0
        return cls(
            str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), round(float(r[6]), 9), speech
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "turns": self.turns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost": self.cost,
            "speech_seconds": self.speech_seconds,
        }


class Journal(Protocol):
    async def append(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> int:
        """Append after ``expected_seq`` (the last seq the writer saw); durable on return.

        Returns the new last seq. Raises SequenceConflict if the journal moved.
        """
        ...

    def append_threadsafe(
        self,
        persistence_id: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        row: SessionRow | None = None,
    ) -> concurrent.futures.Future[int]:
        """:meth:`append`, started from a thread that is not the I/O loop's (a session
        actor, which then waits for it): returns at once, and the future settles when the
        events are durable (or with the error). A store that writes on the loop can submit
        ``append`` there; one with its own writer thread skips the loop hop."""
        ...

    async def replay(self, persistence_id: str, after_seq: int = 0) -> list[StoredEvent]: ...

    async def last_seq(self, persistence_id: str) -> int: ...

    async def save_snapshot(
        self, persistence_id: str, seq: int, state: str, messages: Sequence[str] = (), first: int = 0
    ) -> None:
        """Save the state at ``seq`` and the transcript rows ``first, first + 1, …`` (the rows
        before ``first`` were saved by earlier snapshots and are never written again).
        JournalError when rows before ``first`` are missing (an earlier save failed): save
        again from 0."""
        ...

    async def load_snapshot(self, persistence_id: str) -> Snapshot | None:
        """The latest state and every transcript row saved for it."""
        ...

    async def list_sessions(self) -> list[SessionRow]: ...

    async def find_sessions(self, query: SessionQuery) -> SessionPage:
        """A page of the listing (the control room's sessions page: 10,000 sessions are one
        small read, not a transfer of every row)."""
        ...

    async def get_session(self, persistence_id: str) -> SessionRow | None: ...

    async def sessions_with_pending_input(self) -> list[str]: ...

    async def sessions_owing_replies(self, channel: str) -> list[str]: ...

    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]:
        """Tokens of the turns recorded at or after ``since`` (unix time), grouped ``by``;
        of ``sessions`` only when given."""
        ...

    async def erase(self, persistence_id: str) -> None:
        """Delete a session for good: its events, snapshot, listing row and webhook
        deliveries, in one transaction, ordered after every write queued before it."""
        ...

    def problem(self) -> str | None:
        """Why the journal cannot take writes now (``/healthz``), or None."""
        ...

    async def claim(self, persistence_id: str) -> int:
        """Own the session on this node before recovering it; the epoch that fences its
        writes. Where several nodes share the database this is a lease, and
        SessionOwnedElsewhere says another node holds it; an embedded journal has one
        writer and answers 0."""
        ...

    def release(self, persistence_id: str, epoch: int) -> None:
        """The session stopped here: its lease (of ``epoch``) goes, after its queued writes."""
        ...

    async def nodes(self) -> list[Node]:
        """The nodes sharing this database and how many sessions each holds (an embedded
        journal has no cluster: empty)."""
        ...

    async def owner(self, persistence_id: str) -> Owner | None:
        """Another node holding the session now (input for it belongs there), or None."""
        ...

    async def orphans(self, mine: str | None = None) -> list[str]:
        """Sessions with unanswered input that no node holds (a node died with them), and
        those node ``mine`` still holds (this node's own, restarted before its leases ran out)."""
        ...

    async def close(self) -> None: ...
