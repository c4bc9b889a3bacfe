"""What the gateway's services answer with: a chat command's answer (:class:`CommandDone`),
the session listing and a session's view, and the shape of a channel's thread opener.

Values only; shared by the services and the role protocols (``_roles``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netclaw.commands import Command
from netclaw.messages import ChatMessage
from netclaw.persistence import SessionRow
from netclaw.sessions import TurnOutcome

# (channel, text, key, since) → the session id of the thread opened under the new message
ThreadOpener = Callable[[str, str, str, float], Awaitable[str]]  # a channel opens a thread: its id


@dataclass(frozen=True, slots=True)
class CommandDone:
    """A chat command ran (no model turn); ``notice`` is its answer, also told to every
    subscriber of the session."""

    session_id: str
    command: Command
    notice: str


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    channel: str
    title: str | None
    phase: str  # a resident session's phase, or "passivated"
    turns: int
    last_activity: float
    resident: bool
    pending: int = 0  # admitted messages not yet answered


@dataclass(frozen=True, slots=True)
class SessionsFound:
    """A page of the session listing (``Reads.find_sessions``)."""

    sessions: list[SessionSummary]
    total: int  # matching, on every page
    channels: list[str]  # every channel that has a session


@dataclass(frozen=True, slots=True)
class SessionView:
    summary: SessionSummary
    view: str  # "transcript" or "context"
    messages: Sequence[ChatMessage]  # the transcript, or what the model sees now
    queued: Sequence[ChatMessage] = ()  # admitted, waiting for their turn (transcript view)
    failures: Mapping[str, TurnOutcome] = field(default_factory=dict)  # user message id → failed turn
    # Where the model's view begins in ``messages`` (transcript view) and why.
    kept_from: int = 0
    compactions: int = 0
    trimmed: bool = False
    summarized: bool = False
    resets: int = 0
    tools: Sequence[str] = ()  # context view: the tools the model is offered


@dataclass(frozen=True, slots=True)
class Recorded:
    """One journal event as recorded: its type name, its payload (JSON, decoded) and when
    it was written (a turn's timeline is drawn from these: netclaw/ui/_timeline.py)."""

    kind: str
    data: Mapping[str, Any]
    at: float


def summary_of(row: SessionRow, resident: Mapping[str, Any]) -> SessionSummary:
    """A listing row as people see it: with its phase when resident here (``resident``:
    session id → phase), "passivated" when not."""
    phase = resident.get(row.id)
    return SessionSummary(
        id=row.id,
        channel=row.channel,
        title=row.title,
        phase=phase.value if phase is not None else "passivated",
        turns=row.turns,
        last_activity=row.last_activity,
        resident=phase is not None,
        pending=row.pending,
    )
