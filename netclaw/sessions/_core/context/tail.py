"""The volatile tail of a turn (pure): what netclaw tells the model for this turn only —
the time when it is news, memories recalled for the message, a note that a restart
interrupted the session — as one user-role ``context`` message after the turn's newest
message.

It is recorded (``ContextAttached``) before the call that carries it, so it stays where it
is: every later request repeats it byte for byte, and everything above the newest turn —
tools, system prompt, summary, transcript — is a prefix the provider has cached already.
Put at the top of the prompt instead (where it used to be), it would change every turn and
take the whole conversation below it out of the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from netclaw.messages import CONTEXT_OPEN, ChatMessage, MessageKind, new_id
from netclaw.sessions._core.journal.state import SessionState
from netclaw.spend import utc_day

# The time is news at a session's first turn, after a pause this long, on a new (UTC) day,
# and when the last time told went out of view (a trim, a compaction, a reset).
TIME_NEWS_AFTER_S = 30 * 60


def time_is_news(state: SessionState, now: float) -> bool:
    told = state.time_told_at
    return told <= 0 or now - told >= TIME_NEWS_AFTER_S or utc_day(told) != utc_day(now)


def has_tail(state: SessionState, message_id: str) -> bool:
    """Is a tail recorded in the turn started by ``message_id`` (the newest turn)?"""
    for message in reversed(state.transcript):
        if message.kind is MessageKind.CONTEXT:
            return True
        if message.id == message_id:
            return False
    return False


def restart_note(stopped_at: float, now: float) -> str:
    stamp = datetime.fromtimestamp(stopped_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    minutes = max(0, round((now - stopped_at) / 60))
    return (
        f"You are resuming after netclaw was restarted. It stopped at {stamp} ({minutes} min ago); "
        "whatever was in progress then was interrupted. Carry on with the conversation."
    )


def volatile_tail(
    now: float,
    *,
    tell_time: bool,
    memories: str | None = None,
    stopped_at: float | None = None,
    new_id: Callable[[str], str],
) -> ChatMessage | None:
    """The tail message (its id from ``new_id``), or None when there is nothing to tell."""
    parts: list[str] = []
    if tell_time:
        parts.append(f"The time now: {datetime.fromtimestamp(now, UTC).strftime('%Y-%m-%d %H:%M UTC (%A)')}.")
    if stopped_at is not None:
        parts.append(restart_note(stopped_at, now))
    if memories:
        parts.append(memories)
    if not parts:
        return None
    return ChatMessage(
        id=new_id("ctx"),
        role="user",
        content=CONTEXT_OPEN + "\n" + "\n\n".join(parts),
        ts=now,
        kind=MessageKind.CONTEXT,
    )


def continuity_notice(stopped_at: float, now: float) -> ChatMessage:
    """The tail a session warmed after a graceful restart adds to its next call (what the
    context view shows until it has: a view outside the session, so it mints its own id)."""
    tail = volatile_tail(now, tell_time=True, stopped_at=stopped_at, new_id=new_id)
    assert tail is not None
    return tail
