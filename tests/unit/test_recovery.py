"""load_state over a real SqliteJournal: events only, snapshot + tail, bad snapshot, bad event."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from netclaw.errors import JournalCorrupt
from netclaw.messages import ChatMessage, ToolCall
from netclaw.persistence import NewEvent, SqliteJournal, prepare_database
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.codec import decode, encode
from netclaw.sessions._core.journal.events import (
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import ActiveTurn, SessionState
from netclaw.sessions._shell.recovery import load_state

SID = "cli:recovery"
CALL = ToolCall("c1", "current_time", "{}")


def msg(mid: str, role: str, content: str = "", **kw: object) -> ChatMessage:
    return ChatMessage(id=mid, role=role, content=content or mid, ts=10.0, **kw)  # type: ignore[arg-type]


EVENTS: list[SessionEvent] = [
    InputAdmitted(msg("u1", "user", identity="ev1")),
    TurnStarted(1, "u1"),
    StepRecorded(
        1,
        (
            msg("a1", "assistant", tool_calls=(CALL,)),
            msg("t1", "tool", tool_call_id="c1", name="current_time"),
        ),
    ),
    TurnRecorded(1, "u1", "completed", (msg("a2", "assistant", "it is noon"),), usage={"input_tokens": 50}),
    SessionTitleSet("Clock"),
    InputAdmitted(msg("u2", "user", identity="ev2")),
    TurnStarted(2, "u2"),
    InputAdmitted(msg("u3", "user", identity="ev3")),
]


def new_events(events: Sequence[SessionEvent]) -> list[NewEvent]:
    return [NewEvent(*encode(e)) for e in events]


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[SqliteJournal]:
    db = tmp_path / "netclaw.db"
    prepare_database(db)
    j = await SqliteJournal(db).open()
    try:
        yield j
    finally:
        await j.close()


async def test_empty_journal_gives_a_fresh_state(journal: SqliteJournal) -> None:
    assert await load_state(journal, SID) == SessionState(SID)


async def test_from_events_only(journal: SqliteJournal) -> None:
    await journal.append(SID, 0, new_events(EVENTS))
    state = await load_state(journal, SID)
    assert state.seq == len(EVENTS)
    assert state.title == "Clock"
    assert state.turns == 2
    assert state.active == ActiveTurn(2, "u2", 0)
    assert [m.id for m in state.transcript] == ["u1", "a1", "t1", "a2", "u2"]
    assert [m.id for m in state.inbox] == ["u3"]
    assert state.outcomes["u1"].reply == "it is noon"
    assert state.seen("ev3", now=11.0) == "u3"
    stored = await journal.replay(SID)
    # the fold uses the journal's own timestamps
    assert state.last_activity == stored[-1].ts


async def test_other_sessions_do_not_leak_in(journal: SqliteJournal) -> None:
    await journal.append(SID, 0, new_events(EVENTS[:2]))
    await journal.append("cli:other", 0, new_events([SessionTitleSet("other")]))
    state = await load_state(journal, SID)
    assert state.title is None
    assert state.seq == 2


@pytest.mark.parametrize("cut", [1, 3, 4, 6, len(EVENTS)])
async def test_snapshot_plus_later_events_equals_events_only(journal: SqliteJournal, cut: int) -> None:
    await journal.append(SID, 0, new_events(EVENTS))
    full = await load_state(journal, SID)
    # a snapshot taken at `cut`, built by folding the stored prefix
    stored = await journal.replay(SID)
    head = SessionState(SID).apply_all((decode(e.type, e.payload), e.seq, e.ts) for e in stored[:cut])
    await journal.save_snapshot(SID, cut, snapshots.to_json(head))
    assert await load_state(journal, SID) == full


async def test_snapshot_is_used_not_ignored(journal: SqliteJournal) -> None:
    """Only the events after the snapshot are replayed: a snapshot that differs from
    the prefix shows through (so the test above cannot pass by ignoring snapshots)."""
    await journal.append(SID, 0, new_events(EVENTS[:5]))
    marked = SessionState(SID, seq=5, title="from snapshot", turns=1)
    await journal.save_snapshot(SID, 5, snapshots.to_json(marked))
    await journal.append(SID, 5, new_events([InputAdmitted(msg("u9", "user"))]))
    state = await load_state(journal, SID)
    assert state.title == "from snapshot"
    assert state.transcript == ()
    assert [m.id for m in state.inbox] == ["u9"]
    assert state.seq == 6


async def test_unreadable_snapshot_is_skipped_with_a_warning(
    journal: SqliteJournal, caplog: pytest.LogCaptureFixture
) -> None:
    await journal.append(SID, 0, new_events(EVENTS))
    expected = await load_state(journal, SID)
    await journal.save_snapshot(SID, 4, '{"v": 1, "this is": "not a snapshot"}')
    with caplog.at_level(logging.WARNING, logger="netclaw.sessions._shell.recovery"):
        state = await load_state(journal, SID)
    assert state == expected
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert SID in warnings[0].getMessage()
    assert "snapshot" in warnings[0].getMessage()


async def test_snapshot_from_another_version_is_skipped(
    journal: SqliteJournal, caplog: pytest.LogCaptureFixture
) -> None:
    await journal.append(SID, 0, new_events(EVENTS))
    expected = await load_state(journal, SID)
    await journal.save_snapshot(SID, 8, '{"v": 999}')
    with caplog.at_level(logging.WARNING):
        assert await load_state(journal, SID) == expected
    assert any("snapshot" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_non_object_snapshot_is_skipped(journal: SqliteJournal) -> None:
    await journal.append(SID, 0, new_events(EVENTS))
    expected = await load_state(journal, SID)
    await journal.save_snapshot(SID, 4, "null")
    assert await load_state(journal, SID) == expected


async def test_unreadable_event_raises(journal: SqliteJournal) -> None:
    good = new_events(EVENTS[:3])
    await journal.append(SID, 0, [*good, NewEvent("TurnStarted", "{broken json"), *new_events(EVENTS[3:4])])
    with pytest.raises(JournalCorrupt):
        await load_state(journal, SID)


async def test_unknown_event_type_raises(journal: SqliteJournal) -> None:
    await journal.append(SID, 0, [*new_events(EVENTS[:2]), NewEvent("FromTheFuture", "{}")])
    with pytest.raises(JournalCorrupt, match="FromTheFuture"):
        await load_state(journal, SID)


async def test_unreadable_event_after_the_snapshot_still_raises(journal: SqliteJournal) -> None:
    await journal.append(SID, 0, new_events(EVENTS[:2]))
    snap = SessionState(SID).apply_all((e, i, 1.0) for i, e in enumerate(EVENTS[:2], start=1))
    await journal.save_snapshot(SID, 2, snapshots.to_json(snap))
    await journal.append(SID, 2, [NewEvent("InputAdmitted", '{"message": {}}')])
    with pytest.raises(JournalCorrupt):
        await load_state(journal, SID)
