"""SessionState.apply (the fold), snapshots and the event encoding."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netclaw.errors import JournalCorrupt
from netclaw.lineage import ChildReport, ChildTask
from netclaw.messages import Attachment, ChatMessage, MessageKind, ToolCall, Transcript
from netclaw.sessions._core.journal import events as _events
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal import state as _state
from netclaw.sessions._core.journal import values as _values
from netclaw.sessions._core.journal.codec import decode, decode_all, encode
from netclaw.sessions._core.journal.events import (
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import (
    IDENTITY_RETENTION_S,
    ActiveTurn,
    SessionState,
    TurnOutcome,
    channel_of,
)

SID = "slack:C1:123.4"


def user(mid: str, text: str = "", *, ts: float = 100.0, identity: str | None = None) -> ChatMessage:
    return ChatMessage(
        id=mid, role="user", content=text or f"text of {mid}", ts=ts, identity=identity, user="U1"
    )


def assistant(mid: str, text: str = "", *, calls: tuple[ToolCall, ...] = (), **kw: Any) -> ChatMessage:
    return ChatMessage(id=mid, role="assistant", content=text, ts=101.0, tool_calls=calls, **kw)


def tool(mid: str, call: ToolCall, content: str, *, is_error: bool = False) -> ChatMessage:
    return ChatMessage(
        id=mid,
        role="tool",
        content=content,
        ts=102.0,
        tool_call_id=call.id,
        name=call.name,
        is_error=is_error,
    )


CALL_A = ToolCall("call_a", "current_time", '{"timezone": "UTC"}')
CALL_B = ToolCall("call_b", "lookup", '{"q": "x"}')


def fold(events: list[SessionEvent], *, session_id: str = SID, start_ts: float = 1000.0) -> SessionState:
    return SessionState(session_id).apply_all(
        (event, seq, start_ts + seq) for seq, event in enumerate(events, start=1)
    )


def realistic_events() -> list[SessionEvent]:
    """Two finished turns (one with a tool step), a title, an active turn mid-step, two queued inputs."""
    return [
        InputAdmitted(user("u1", "what time is it?", identity="slack:ev1")),
        TurnStarted(1, "u1"),
        StepRecorded(
            1,
            (
                assistant("a1", "", calls=(CALL_A, CALL_B), thinking="need the clock", extra={"k": [1]}),
                tool("t1", CALL_A, "2024-01-01T00:00:00+00:00"),
                tool("t2", CALL_B, "error: boom", is_error=True),
            ),
        ),
        TurnRecorded(
            1, "u1", "completed", (assistant("a2", "It is midnight."),), usage={"input_tokens": 321}
        ),
        SessionTitleSet("Time question"),
        InputAdmitted(user("u2", "again", identity="slack:ev2")),
        TurnStarted(2, "u2"),
        TurnRecorded(2, "u2", "failed", (), error={"code": "provider_unavailable", "message": "down"}),
        InputAdmitted(user("u3", "and now?", identity="slack:ev3")),
        TurnStarted(3, "u3"),
        StepRecorded(3, (assistant("a3", "checking", calls=(CALL_A,)), tool("t3", CALL_A, "later"))),
        InputAdmitted(user("u4", "queued one", identity="slack:ev4")),
        InputAdmitted(user("u5", "queued two")),  # no identity
    ]


# -- the fold ---------------------------------------------------------------------------------


def test_input_admitted_goes_to_inbox_and_records_identity() -> None:
    msg = user("u1", "hello", ts=50.0, identity="idem-1")
    state = SessionState(SID).apply(InputAdmitted(msg), 1, 77.0)
    assert state.seq == 1
    assert state.inbox == (msg,)
    assert state.transcript == ()
    assert state.active is None
    assert state.identities == {"idem-1": ("u1", 50.0)}
    assert state.seen("idem-1", now=60.0) == "u1"
    assert state.last_activity == 77.0
    assert state.pending_inputs == 1
    assert state.find_message("u1") == msg


def test_input_without_identity_records_none() -> None:
    state = SessionState(SID).apply(InputAdmitted(user("u1")), 1, 1.0)
    assert state.identities == {}
    assert state.inbox[0].id == "u1"


def test_apply_does_not_mutate_the_original() -> None:
    base = SessionState(SID)
    after = base.apply(InputAdmitted(user("u1", identity="i")), 1, 1.0)
    assert base.seq == 0
    assert base.inbox == ()
    assert base.identities == {}
    assert after is not base


def test_turn_started_moves_message_from_inbox_to_transcript() -> None:
    state = fold([InputAdmitted(user("u1")), InputAdmitted(user("u2")), TurnStarted(1, "u1")])
    assert [m.id for m in state.inbox] == ["u2"]
    assert [m.id for m in state.transcript] == ["u1"]
    assert state.active == ActiveTurn(1, "u1", 0)
    assert state.turns == 1
    assert state.pending_inputs == 2  # one queued + the active one


def test_turn_started_can_pick_a_later_inbox_message() -> None:
    state = fold([InputAdmitted(user("u1")), InputAdmitted(user("u2")), TurnStarted(1, "u2")])
    assert [m.id for m in state.inbox] == ["u1"]
    assert [m.id for m in state.transcript] == ["u2"]


def test_turn_started_for_unknown_message_raises() -> None:
    state = fold([InputAdmitted(user("u1"))])
    with pytest.raises(JournalCorrupt, match="ghost"):
        state.apply(TurnStarted(1, "ghost"), 2, 5.0)


def test_turn_started_twice_for_the_same_message_raises() -> None:
    state = fold([InputAdmitted(user("u1")), TurnStarted(1, "u1")])
    with pytest.raises(JournalCorrupt):
        state.apply(TurnStarted(2, "u1"), 3, 5.0)


def test_step_recorded_appends_calls_and_results_and_bumps_steps() -> None:
    call_msg = assistant("a1", calls=(CALL_A, CALL_B))
    results = (tool("t1", CALL_A, "r1"), tool("t2", CALL_B, "r2"))
    state = fold([InputAdmitted(user("u1")), TurnStarted(1, "u1"), StepRecorded(1, (call_msg, *results))])
    assert [m.id for m in state.transcript] == ["u1", "a1", "t1", "t2"]
    assert state.transcript[1].tool_calls == (CALL_A, CALL_B)
    assert state.active == ActiveTurn(1, "u1", 1)
    state = state.apply(StepRecorded(1, (assistant("a2", calls=(CALL_A,)), tool("t3", CALL_A, "r3"))), 4, 9.0)
    assert state.active is not None
    assert state.active.steps == 2
    assert [m.id for m in state.transcript][-2:] == ["a2", "t3"]


def test_turn_recorded_appends_reply_clears_active_and_records_outcome() -> None:
    state = fold(
        [
            InputAdmitted(user("u1")),
            TurnStarted(1, "u1"),
            TurnRecorded(1, "u1", "completed", (assistant("a1", "the answer"),), usage={"input_tokens": 42}),
        ]
    )
    assert state.active is None
    assert [m.id for m in state.transcript] == ["u1", "a1"]
    assert state.outcomes["u1"] == TurnOutcome(1, "completed", "the answer", None)
    assert state.last_input_tokens == 42
    assert state.pending_inputs == 0
    assert state.turns == 1


def test_failed_turn_records_error_and_keeps_last_input_tokens() -> None:
    state = fold(
        [
            InputAdmitted(user("u1")),
            TurnStarted(1, "u1"),
            TurnRecorded(1, "u1", "completed", (assistant("a1", "ok"),), usage={"input_tokens": 7}),
            InputAdmitted(user("u2")),
            TurnStarted(2, "u2"),
            TurnRecorded(2, "u2", "failed", error={"code": "x", "message": "boom"}),
        ]
    )
    outcome = state.outcomes["u2"]
    assert outcome.status == "failed"
    assert outcome.reply is None
    assert outcome.error == {"code": "x", "message": "boom"}
    assert state.last_input_tokens == 7  # a turn without usage leaves the counter alone
    assert state.turns == 2
    assert outcome.to_dict() == {
        "turn": 2,
        "status": "failed",
        "reply": None,
        "error": {"code": "x", "message": "boom"},
    }


def test_session_title_set() -> None:
    state = fold([SessionTitleSet("first"), SessionTitleSet("second")])
    assert state.title == "second"
    assert state.seq == 2
    assert state.last_activity == 1002.0


@pytest.mark.parametrize("bad_seq", [0, 1, 3, 10])
def test_seq_gap_or_repeat_raises(bad_seq: int) -> None:
    state = fold([SessionTitleSet("t")])  # at seq 1; only 2 may follow
    with pytest.raises(JournalCorrupt, match="gap"):
        state.apply(SessionTitleSet("u"), bad_seq, 1.0)
    assert state.apply(SessionTitleSet("u"), 2, 1.0).title == "u"


def test_first_event_must_be_seq_one() -> None:
    with pytest.raises(JournalCorrupt):
        SessionState(SID).apply(SessionTitleSet("t"), 2, 1.0)
    assert SessionState(SID).apply(SessionTitleSet("t"), 1, 1.0).seq == 1


def test_apply_rejects_non_events() -> None:
    with pytest.raises(TypeError):
        SessionState(SID).apply("not an event", 1, 1.0)  # type: ignore[arg-type]


def test_channel_of() -> None:
    assert channel_of("slack:C1:1.2") == "slack"
    assert channel_of("webhook:alerts:k") == "webhook"
    assert channel_of("plain-id") == "api"
    assert SessionState("discord:99").channel == "discord"


# -- replay identity ----------------------------------------------------------------------------


def test_seen_respects_identity_retention() -> None:
    state = SessionState(SID).apply(InputAdmitted(user("u1", ts=1000.0, identity="ev")), 1, 1000.0)
    assert state.seen("ev", now=1000.0) == "u1"
    assert state.seen("ev", now=1000.0 + IDENTITY_RETENTION_S) == "u1"
    assert state.seen("ev", now=1000.0 + IDENTITY_RETENTION_S + 1) is None
    assert state.seen("other", now=1000.0) is None


def test_seen_uses_a_patched_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "IDENTITY_RETENTION_S", 10.0)
    state = SessionState(SID).apply(InputAdmitted(user("u1", ts=1000.0, identity="ev")), 1, 1000.0)
    assert state.seen("ev", now=1009.0) == "u1"
    assert state.seen("ev", now=1011.0) is None


def test_identities_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "MAX_IDENTITIES", 3)
    events: list[SessionEvent] = [
        InputAdmitted(user(f"u{i}", ts=1000.0 + i, identity=f"id{i}")) for i in range(1, 6)
    ]
    state = fold(events)
    assert len(state.identities) == 3
    assert list(state.identities) == ["id3", "id4", "id5"]
    assert state.seen("id1", now=1010.0) is None
    assert state.seen("id2", now=1010.0) is None
    assert state.seen("id5", now=1010.0) == "u5"
    assert len(state.inbox) == 5  # only the identity memory is bounded, never the inputs


def test_outcomes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_values, "MAX_OUTCOMES", 2)
    events: list[SessionEvent] = []
    for i in range(1, 5):
        events += [
            InputAdmitted(user(f"u{i}")),
            TurnStarted(i, f"u{i}"),
            TurnRecorded(i, f"u{i}", "completed", (assistant(f"a{i}", f"r{i}"),)),
        ]
    state = fold(events)
    assert list(state.outcomes) == ["u3", "u4"]
    assert state.outcomes["u4"].reply == "r4"


# -- snapshots ----------------------------------------------------------------------------------


def test_realistic_state_has_everything() -> None:
    state = fold(realistic_events())
    assert state.title == "Time question"
    assert state.turns == 3
    assert state.active == ActiveTurn(3, "u3", 1)
    assert [m.id for m in state.inbox] == ["u4", "u5"]
    assert set(state.outcomes) == {"u1", "u2"}
    assert state.outcomes["u1"].reply == "It is midnight."
    assert state.last_input_tokens == 321
    assert set(state.identities) == {"slack:ev1", "slack:ev2", "slack:ev3", "slack:ev4"}
    assert [m.id for m in state.transcript] == ["u1", "a1", "t1", "t2", "a2", "u2", "u3", "a3", "t3"]


def test_snapshot_round_trip_equals_original() -> None:
    state = fold(realistic_events())
    text = snapshots.to_json(state)
    json.loads(text)  # it is JSON
    restored = snapshots.from_json(text)
    assert restored == state
    assert restored.transcript[1].tool_calls == (CALL_A, CALL_B)
    assert restored.transcript[1].thinking == "need the clock"
    assert restored.transcript[3].is_error is True
    # and restoring is stable: encode(decode(x)) == x
    assert snapshots.to_json(restored) == text


def test_a_row_snapshot_restores_the_same_state_from_rows_written_once() -> None:
    events = realistic_events()
    rows: list[str] = []
    saved = 0
    state = SessionState(SID)
    for seq, event in enumerate(events, start=1):
        state = state.apply(event, seq, 1000.0 + seq)
        document, new_rows = snapshots.encode(state, saved)
        assert len(new_rows) == len(state.transcript) - saved  # only what is new
        rows += new_rows
        saved = len(state.transcript)
        restored = snapshots.decode(document, rows)
        assert restored == state
        assert restored.identities == state.identities  # rebuilt from the messages
        assert "identities" not in json.loads(document) and "transcript" not in json.loads(document)
    # Replies are referred to by their message, not repeated in the document.
    assert "It is midnight." not in snapshots.encode(state, saved)[0]


def test_a_row_snapshot_with_missing_rows_is_unreadable() -> None:
    state = fold(realistic_events())
    document, rows = snapshots.encode(state, 0)
    with pytest.raises(JournalCorrupt, match="covers 9 transcript rows, only 8"):
        snapshots.decode(document, rows[:-1])
    assert snapshots.decode(document, [*rows, rows[0]]) == state  # rows beyond: ignored


def test_a_version_1_snapshot_is_still_read() -> None:
    state = fold(realistic_events())
    assert snapshots.decode(snapshots.to_json(state), ()) == state


def test_snapshot_round_trip_of_empty_state() -> None:
    state = SessionState("cli:x")
    assert snapshots.from_json(snapshots.to_json(state)) == state


def test_snapshot_round_trip_keeps_marker_kinds_and_unicode() -> None:
    crumb = ChatMessage(
        id="b1",
        role="user",
        content="[earlier turns dropped] — ünïcødé ✓",
        ts=1.0,
        kind=MessageKind.TRIM_BREADCRUMB,
    )
    state = fold([InputAdmitted(crumb), TurnStarted(1, "b1"), SessionTitleSet("日本語")])
    restored = snapshots.from_json(snapshots.to_json(state))
    assert restored == state
    assert restored.transcript[0].kind is MessageKind.TRIM_BREADCRUMB


def budget_trim() -> _events.HistoryTrimmed:
    """A budget trim that keeps the transcript from u2 on."""
    return _events.HistoryTrimmed(
        first_kept_id="u2",
        dropped_messages=5,
        dropped_turns=1,
        kept_turns=1,
        tokens_before=10,
        tokens_after=5,
        budget=8,
        reason="budget",
    )


def test_snapshot_round_trip_of_a_trimmed_state() -> None:
    if _HistoryTrimmed is None:
        pytest.skip("no HistoryTrimmed event yet")
    trim = budget_trim()
    state = fold([*realistic_events(), trim])
    assert state != fold(realistic_events())
    assert snapshots.from_json(snapshots.to_json(state)) == state


def test_snapshot_then_later_events_equals_full_fold() -> None:
    events = realistic_events()
    for cut in range(len(events) + 1):
        head = fold(events[:cut])
        resumed = snapshots.from_json(snapshots.to_json(head)).apply_all(
            (event, seq, 1000.0 + seq) for seq, event in enumerate(events[cut:], start=cut + 1)
        )
        assert resumed == fold(events), f"cut at {cut}"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "{",
        "{}",
        '{"v": 99}',
        json.dumps({"v": 1, "session_id": "x"}),  # missing fields
    ],
)
def test_corrupt_snapshot_raises_journal_corrupt(text: str) -> None:
    with pytest.raises(JournalCorrupt):
        snapshots.from_json(text)


def test_snapshot_with_wrong_field_types_raises_journal_corrupt() -> None:
    data = json.loads(snapshots.to_json(fold(realistic_events())))
    data["turns"] = "many"
    with pytest.raises(JournalCorrupt):
        snapshots.from_json(json.dumps(data))
    data = json.loads(snapshots.to_json(fold(realistic_events())))
    data["transcript"][0]["role"] = "robot"
    with pytest.raises(JournalCorrupt):
        snapshots.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["null", "[]", "42", '"snapshot"'])
def test_non_object_snapshot_raises_journal_corrupt(text: str) -> None:
    with pytest.raises(JournalCorrupt):
        snapshots.from_json(text)


def test_snapshot_with_list_identities_raises_journal_corrupt() -> None:
    data = json.loads(snapshots.to_json(fold(realistic_events())))
    data["identities"] = []
    with pytest.raises(JournalCorrupt):
        snapshots.from_json(json.dumps(data))


# -- event encoding -----------------------------------------------------------------------------


ALL_EVENTS: list[SessionEvent] = [
    InputAdmitted(user("u1", "héllo", identity="idem")),
    InputAdmitted(
        ChatMessage(
            id="c1",
            role="user",
            content="[summary]",
            ts=3.5,
            kind=MessageKind.COMPACTION_SUMMARY,
            extra={"n": 1},
        )
    ),
    TurnStarted(7, "u1"),
    StepRecorded(
        7,
        (
            assistant("a1", "", calls=(CALL_A, CALL_B)),
            tool("t1", CALL_A, "r"),
            tool("t2", CALL_B, "e", is_error=True),
        ),
    ),
    StepRecorded(8, ()),
    TurnRecorded(
        7,
        "u1",
        "completed",
        (assistant("a2", "done", thinking="hmm"),),
        usage={"input_tokens": 9, "output_tokens": 3},
    ),
    TurnRecorded(8, "u2", "timed_out", error={"code": "turn_timeout", "message": "too slow"}),
    TurnRecorded(9, "u3", "interrupted"),
    SessionTitleSet("A title ✓"),
]

# Events added to _events.py later get an example here (the coverage test below insists).
_HistoryTrimmed = getattr(_events, "HistoryTrimmed", None)
if _HistoryTrimmed is not None:
    ALL_EVENTS += [
        _HistoryTrimmed(
            first_kept_id="u1",
            dropped_messages=4,
            dropped_turns=2,
            kept_turns=1,
            tokens_before=9000,
            tokens_after=3000,
            budget=4000,
            reason="budget",
        )
    ]
ALL_EVENTS += [
    _events.SessionCompacted(
        cleared=("c1",),
        summary="## Primary request and intent\n- x",
        first_kept_id="u1",
        tiers=("clear_tool_results", "memory_flush", "summary"),
        memories_saved=2,
        messages_before=9,
        messages_after=4,
        tokens_before=9000,
        tokens_after=2500,
        note=None,
    ),
    _events.SessionCompacted(
        cleared=(),
        summary=None,
        first_kept_id=None,
        tiers=(),
        memories_saved=0,
        messages_before=3,
        messages_after=3,
        tokens_before=100,
        tokens_after=100,
        note="nothing to do",
    ),
]

ALL_EVENTS += [_events.SessionReset(by="U1"), _events.MemoriesExtracted(through_turn=3, saved=2)]

_GATED = assistant(
    "a1", calls=(ToolCall("c1", "shell", '{"command": "ls"}'), ToolCall("c2", "current_time", "{}"))
)
_REQUEST = _events.ApprovalRequest("ap-1", "c1", "shell", '{"command": "ls"}', 200.0, 1100.0)
ALL_EVENTS += [
    _events.ApprovalRequested(turn=1, assistant=_GATED, requests=(_REQUEST,)),
    _events.ApprovalDecided(approval_id="ap-1", decision="always", by="U1"),
    _events.ReplyDelivered(turn=1, message_ids=("1712.0001", "1712.0002")),
    _events.ContextAttached(
        7,
        ChatMessage(id="ctx1", role="user", content="[netclaw context]", ts=4.0, kind=MessageKind.CONTEXT),
        told_time=True,
    ),
    _events.ContextAttached(
        8, ChatMessage(id="ctx2", role="user", content="memories", ts=5.0, kind=MessageKind.CONTEXT)
    ),
    _events.ModelSwitched(turn=7, from_model="main", to_model="backup", reason="provider_unavailable"),
    _events.SessionCompacted(
        cleared=(),
        summary="## Primary request and intent\n- y",
        first_kept_id="u1",
        tiers=("memory_flush", "summary"),
        memories_saved=0,
        messages_before=5,
        messages_after=3,
        tokens_before=900,
        tokens_after=300,
        spent={"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 0, "cache_write_tokens": 0},
        model="scripted",
        cost=0.0042,
    ),
    _events.ModelPinned(model="fast", by="U1"),
    _events.ModelPinned(model=None, by="api"),
    TurnRecorded(
        10,
        "u4",
        "completed",
        (assistant("a3", "priced"),),
        spent={"input_tokens": 90, "output_tokens": 3, "cache_read_tokens": 80, "cache_write_tokens": 5},
        model="scripted",
        cost=0.000123,
    ),
    TurnRecorded(
        11,
        "u5",
        "failed",
        error={"code": "spend_limit", "message": "used", "cap": "spend.max_cost_per_day", "resets_at": "x"},
    ),
]

_TASK = ChildTask("cli:p", 2, ("current_time",), "compaction", 5000, "team", "slack:C1")
ALL_EVENTS += [
    _events.RoundStarted(turn=3, assistant=assistant("a9", calls=(ToolCall("s1", "spawn_agent", "{}"),))),
    _events.ChildSpawned(_TASK, "s1", 3, "find the answer ✓", wait=True),
    _events.ChildReported(ChildReport("cli:p", 2, 1, "completed", "found it", None, 120, of_task=True)),
    _events.ChildReported(ChildReport("cli:p", 2, 2, "failed", None, "the model failed", 0, of_task=False)),
    _events.ChildDetached(n=2),
    _events.TaskGiven(_TASK),
]

EVENT_TYPES = set(typing.get_args(SessionEvent))


ALL_EVENTS += [
    _events.SpeechTranscribed(
        "u1",
        (
            (0, Transcript(text="ship it ✓", language="en", seconds=2.5, model="whisper")),
            (1, Transcript(error="too long")),
        ),
        spent={"speech_ms": 2500},
        cost=0.0001,
        model="whisper",
    ),
    _events.VoiceRepliesSet(on=True, by="U1"),
    _events.ReplySpoken(
        turn=1,
        file=Attachment("reply.ogg", "audio/ogg", "files/reply.ogg", 1200, "audio"),
        spent={"speech_chars": 40},
        cost=0.0006,
        model="tts-1",
    ),
]


def test_all_event_types_are_covered() -> None:
    assert {InputAdmitted, TurnStarted, StepRecorded, TurnRecorded, SessionTitleSet} <= EVENT_TYPES
    assert {type(e) for e in ALL_EVENTS} == EVENT_TYPES


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_encode_decode_round_trip(event: SessionEvent) -> None:
    type_name, payload = encode(event)
    assert type_name == type(event).__name__
    assert isinstance(json.loads(payload), dict)
    assert decode(type_name, payload) == event


def test_decode_unknown_type_raises() -> None:
    with pytest.raises(JournalCorrupt, match="FutureEvent"):
        decode("FutureEvent", "{}")


@pytest.mark.parametrize(
    ("type_name", "payload"),
    [
        ("TurnStarted", "not json"),
        ("TurnStarted", '{"turn": 1}'),
        ("TurnStarted", '{"turn": "x", "message_id": "m"}'),
        ("InputAdmitted", '{"message": {"id": "m"}}'),
        ("InputAdmitted", "[]"),
        ("StepRecorded", '{"turn": 1, "messages": [{"id": "m", "role": "alien", "ts": 1}]}'),
        ("TurnRecorded", "null"),
        ("SessionTitleSet", "{}"),
    ],
)
def test_decode_broken_payload_raises_journal_corrupt(type_name: str, payload: str) -> None:
    with pytest.raises(JournalCorrupt):
        decode(type_name, payload)


def test_one_fold_equals_one_by_one_and_encoded_replay() -> None:
    events = realistic_events()
    folded = fold(events)
    state = SessionState(SID)
    for seq, event in enumerate(events, start=1):
        state = state.apply(event, seq, 1000.0 + seq)
    assert state == folded
    # the same through the journal encoding
    replayed = SessionState(SID).apply_all(
        (decode(*encode(event)), seq, 1000.0 + seq) for seq, event in enumerate(events, start=1)
    )
    assert replayed == folded
    assert folded.seq == len(events)


def test_re_recorded_identity_counts_as_newest_for_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "MAX_IDENTITIES", 2)
    far = 1000.0 + IDENTITY_RETENTION_S + 10  # "id1" has expired: a redelivery is admitted again
    state = fold(
        [
            InputAdmitted(user("u1", ts=1000.0, identity="id1")),
            InputAdmitted(user("u2", ts=far, identity="id2")),
            InputAdmitted(user("u3", ts=far + 1, identity="id1")),
            InputAdmitted(user("u4", ts=far + 2, identity="id3")),
        ]
    )
    # the oldest live entry is id2; id1 was recorded again after it
    assert state.seen("id1", now=far + 3) == "u3"
    assert state.seen("id2", now=far + 3) is None


def test_a_reset_empties_the_projection_and_keeps_the_transcript() -> None:
    from netclaw.sessions._core.context.prompt import build_context
    from netclaw.sessions._core.journal.events import SessionReset

    state = SessionState("cli:r")
    user = ChatMessage(id="u1", role="user", content="hi", ts=1.0, identity="i1")
    reply = ChatMessage(id="a1", role="assistant", content="hello", ts=2.0)
    state = state.apply_all(
        [
            (InputAdmitted(user), 1, 1.0),
            (TurnStarted(1, "u1"), 2, 1.0),
            (TurnRecorded(1, "u1", "completed", (reply,)), 3, 2.0),
            (SessionReset("U7"), 4, 3.0),
        ]
    )
    assert [m.id for m in state.transcript] == ["u1", "a1"]
    assert state.visible == ()
    assert [m.role for m in build_context(state, "sys")] == ["system"]
    assert snapshots.from_json(snapshots.to_json(state)) == state


def test_failed_turns_are_remembered_for_people() -> None:
    user = ChatMessage(id="u1", role="user", content="hi", ts=1.0, identity="i1")
    state = SessionState("cli:f").apply_all(
        [
            (InputAdmitted(user), 1, 1.0),
            (TurnStarted(1, "u1"), 2, 1.0),
            (TurnRecorded(1, "u1", "cancelled", error={"code": "cancelled", "message": "stopped"}), 3, 2.0),
        ]
    )
    assert state.failures["u1"].status == "cancelled"
    assert snapshots.from_json(snapshots.to_json(state)).failures == state.failures


def _waiting() -> SessionState:
    state = SessionState("cli:s").apply(InputAdmitted(user("u1", "ls please")), 1, 100.0)
    state = state.apply(TurnStarted(1, "u1"), 2, 100.0)
    return state.apply(_events.ApprovalRequested(1, _GATED, (_REQUEST,)), 3, 101.0)


def test_a_pending_round_is_state_until_its_step_is_recorded() -> None:
    state = _waiting()
    assert state.pending_round is not None
    assert [r.id for r in state.pending_round.open] == ["ap-1"]
    state = state.apply(_events.ApprovalDecided("ap-1", "always", "U1"), 4, 102.0)
    assert state.pending_round is not None and state.pending_round.open == ()
    assert state.pending_round.decisions == {"ap-1": ("always", "U1")}
    assert state.granted_tools == frozenset({"shell"})
    assert snapshots.from_json(snapshots.to_json(state)) == state  # snapshots keep the wait
    step = _events.StepRecorded(1, (_GATED, user("t1"), user("t2")))
    assert state.apply(step, 5, 103.0).pending_round is None


def test_a_turn_that_ends_while_waiting_drops_the_round() -> None:
    state = _waiting()
    ended = state.apply(
        TurnRecorded(1, "u1", "cancelled", error={"code": "cancelled", "message": "x"}), 4, 102.0
    )
    assert ended.pending_round is None and ended.granted_tools == frozenset()


def test_a_decision_on_an_unknown_request_is_corruption() -> None:
    with pytest.raises(JournalCorrupt, match="unknown approval"):
        _waiting().apply(_events.ApprovalDecided("ap-9", "approve", "U1"), 4, 102.0)


def test_chat_replies_are_owed_until_delivered() -> None:
    def answered(session_id: str) -> SessionState:
        state = SessionState(session_id).apply(InputAdmitted(user("u1", "hi")), 1, 100.0)
        state = state.apply(TurnStarted(1, "u1"), 2, 100.0)
        return state.apply(TurnRecorded(1, "u1", "completed", (assistant("a1", "hello"),)), 3, 101.0)

    slack = answered("slack:C1:1.2")
    assert slack.undelivered == {1: "a1"}
    assert snapshots.from_json(snapshots.to_json(slack)) == slack
    delivered = slack.apply(_events.ReplyDelivered(1, ("1712.1",)), 4, 102.0)
    assert delivered.undelivered == {}
    assert delivered.apply(_events.ReplyDelivered(1, ("x",)), 5, 103.0).undelivered == {}  # twice: harmless
    assert answered("cli:x").undelivered == {}  # only chat channels have an outbox
    failed = SessionState("discord:9").apply(InputAdmitted(user("u1", "hi")), 1, 100.0)
    failed = failed.apply(TurnStarted(1, "u1"), 2, 100.0)
    failed = failed.apply(TurnRecorded(1, "u1", "failed", error={"code": "x", "message": "y"}), 3, 101.0)
    assert failed.undelivered == {}


def test_after_a_failed_snapshot_the_next_one_sends_every_row() -> None:
    from collections.abc import Sequence

    from netclaw.process.runtime import IoLoop
    from netclaw.sessions._shell.recorder import Recorder

    class Store:
        def __init__(self) -> None:
            self.saves: list[tuple[int, int]] = []  # (first, rows)
            self.fail = 1

        async def save_snapshot(
            self, pid: str, seq: int, state: str, messages: Sequence[str] = (), first: int = 0
        ) -> None:
            self.saves.append((first, len(messages)))
            if self.fail:
                self.fail -= 1
                raise RuntimeError("disk full")

    io = IoLoop().start()
    try:
        store = Store()
        recorder = Recorder(io, store)  # type: ignore[arg-type]
        state = fold(realistic_events())
        with pytest.raises(RuntimeError):
            recorder.snapshot(state, wait=True)  # rows 0-8 never land
        recorder.snapshot(state, wait=True)
        assert store.saves == [(0, 9), (0, 9)]  # all again, not "nothing new"
        recorder.snapshot(state, wait=True)
        assert store.saves[-1] == (9, 0)
    finally:
        io.stop()


def test_a_row_snapshot_keeps_only_the_outcomes_the_transcript_does_not_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_values, "MAX_OUTCOMES", 4)
    events: list[SessionEvent] = []
    for i in range(1, 9):
        events += [InputAdmitted(user(f"u{i}", identity=f"id{i}")), TurnStarted(i, f"u{i}")]
        if i == 3:  # failed: in failures, its outcome carries the error
            events.append(TurnRecorded(i, f"u{i}", "failed", (), error={"code": "x", "message": "boom"}))
        elif i == 5:  # completed without an answer message: the transcript would imply another
            events.append(StepRecorded(i, (assistant(f"s{i}", calls=(CALL_A,)), tool(f"t{i}", CALL_A, "r"))))
            events.append(TurnRecorded(i, f"u{i}", "completed", ()))
        else:
            events.append(TurnRecorded(i, f"u{i}", "completed", (assistant(f"a{i}", f"reply {i}"),)))
    events += [InputAdmitted(user("u9", identity="id9")), TurnStarted(9, "u9")]  # running
    state = fold(events)
    assert list(state.outcomes) == ["u5", "u6", "u7", "u8"]
    document, rows = snapshots.encode(state, 0)
    stored = json.loads(document)["outcomes"]
    assert set(stored) == {"u5"}  # the one the transcript cannot say
    restored = snapshots.decode(document, rows)
    assert restored == state
    assert list(restored.outcomes) == list(state.outcomes)  # eviction order kept
    assert restored.outcomes["u6"].reply == "reply 6"


def test_the_fold_builds_the_transcript_once_and_equals_event_by_event_apply() -> None:
    trim = budget_trim()
    more = [
        InputAdmitted(user("u6", identity="id6")),
        TurnRecorded(3, "u3", "completed", (assistant("a3b", "done"),)),
        TurnStarted(4, "u4"),
        TurnRecorded(4, "u4", "completed", (assistant("a4", "four"),)),
    ]
    events = [*realistic_events(), trim, _events.SessionReset(by="U1"), *more]
    stepwise = SessionState(SID)
    for seq, event in enumerate(events, start=1):
        stepwise = stepwise.apply(event, seq, 1000.0 + seq)
    folded = fold(events)
    assert folded == stepwise
    assert folded.kept_from == stepwise.kept_from > 0  # the reset read the whole transcript
    # Folding on from a state keeps what it had.
    half = fold(events[:7])
    assert half.apply_all((e, s, 1000.0 + s) for s, e in enumerate(events[7:], start=8)) == stepwise


_TURN_SHAPES = st.lists(
    st.tuples(
        st.sampled_from(["completed", "failed", "timed_out", "interrupted", "cancelled"]),
        st.integers(0, 2),  # assistant messages recorded with the turn
        st.booleans(),  # a tool step before it
    ),
    max_size=12,
)


def shaped_turns(
    shapes: list[tuple[str, int, bool]], identities: list[str | None] | None = None
) -> list[SessionEvent]:
    """A turn per shape (its status, how many assistant messages it records, whether a tool
    step comes first), the i-th user message under ``identities[i]`` if given."""
    events: list[SessionEvent] = []
    for i, (status, answers, step) in enumerate(shapes, start=1):
        identity = identities[i - 1] if identities is not None else None
        events += [InputAdmitted(user(f"u{i}", identity=identity)), TurnStarted(i, f"u{i}")]
        if step:
            events.append(StepRecorded(i, (assistant(f"s{i}", calls=(CALL_A,)), tool(f"t{i}", CALL_A, "r"))))
        replies = tuple(assistant(f"a{i}.{k}", f"reply {i}.{k}") for k in range(answers))
        error = None if status == "completed" else {"code": status, "message": "no"}
        events.append(TurnRecorded(i, f"u{i}", status, replies, error=error))  # type: ignore[arg-type]
    return events


@given(shapes=_TURN_SHAPES, running=st.booleans(), cap=st.integers(1, 6))
def test_what_a_snapshot_leaves_to_the_transcript_is_what_it_implies(
    shapes: list[tuple[str, int, bool]], running: bool, cap: int
) -> None:
    """The snapshot's walk that compares outcomes in place (``_told_outcomes``) agrees with the
    outcomes the transcript implies, as decoding rebuilds them, for any mix of turns."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_values, "MAX_OUTCOMES", cap)
        patch.setattr(snapshots, "MAX_OUTCOMES", cap)
        events = shaped_turns(shapes)
        if running:
            n = len(shapes) + 1
            events += [InputAdmitted(user(f"u{n}")), TurnStarted(n, f"u{n}")]
        state = fold(events)
        # The two walks compared: the one decoding makes, the one encoding makes.
        implied = snapshots._implied_outcomes(  # noqa: SLF001
            state.transcript, state.turns, state.failures, state.active
        )
        told, gone = snapshots._told_outcomes(state)  # noqa: SLF001
        assert told == {k for k, v in state.outcomes.items() if implied.get(k) == v}
        assert gone == [k for k in implied if k not in state.outcomes]
        document, rows = snapshots.encode(state, 0)
        restored = snapshots.decode(document, rows)
        assert restored == state
        assert list(restored.outcomes) == list(state.outcomes)


def test_a_broken_transcript_row_is_corruption_even_parsed_with_the_others() -> None:
    state = fold(realistic_events())
    document, rows = snapshots.encode(state, 0)
    first, second = rows[0], rows[1]
    for broken in (
        [first[:-1], *rows[1:]],  # cut short
        [f"{first},{second}", *rows[2:], rows[-1]],  # two rows in one (and as many rows)
        [first, "", *rows[2:]],  # empty
    ):
        with pytest.raises(JournalCorrupt, match="cannot decode snapshot"):
            snapshots.decode(document, broken)


@given(
    shapes=_TURN_SHAPES,
    identities=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=12, max_size=12),
    cap=st.integers(1, 6),
)
def test_the_fold_in_place_equals_event_by_event_apply_down_to_the_order_of_its_mappings(
    shapes: list[tuple[str, int, bool]], identities: list[str | None], cap: int
) -> None:
    """apply_all changes its own state and mappings in place; the result is what applying
    each event to a new state gives, the mappings' order (what is forgotten first) included.
    Identities repeat (a redelivered message re-recorded), outcomes pass their cap."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_values, "MAX_OUTCOMES", cap)
        patch.setattr(_values, "MAX_FAILURES_SHOWN", cap)
        patch.setattr(_state, "MAX_IDENTITIES", cap + 1)
        events = shaped_turns(shapes, identities)
        stepwise = SessionState(SID)
        for seq, event in enumerate(events, start=1):
            stepwise = stepwise.apply(event, seq, 1000.0 + seq)
        half = len(events) // 2
        first = fold(events[:half])
        before = {name: list(getattr(first, name).items()) for name in ("identities", "outcomes", "failures")}
        on = first.apply_all((e, s, 1000.0 + s) for s, e in enumerate(events[half:], start=half + 1))
        for folded in (fold(events), on):
            assert folded == stepwise
            for name in ("identities", "outcomes", "failures"):
                assert list(getattr(folded, name).items()) == list(getattr(stepwise, name).items()), name
        for name, items in before.items():  # the state folded on from is as it was
            assert list(getattr(first, name).items()) == items, name


def test_a_replay_decodes_its_events_in_one_parse_and_still_names_a_broken_one() -> None:
    events = realistic_events()
    stored = [encode(e) for e in events]
    assert decode_all(stored) == events
    assert decode_all([]) == []
    for broken in ('{"turn": 1', '{"turn": 1}, {"turn": 2}', "", None):
        bad = [*stored[:3], ("TurnStarted", broken), *stored[3:]]
        with pytest.raises(JournalCorrupt, match="cannot decode TurnStarted event"):
            decode_all(bad)  # type: ignore[arg-type]
