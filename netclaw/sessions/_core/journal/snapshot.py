"""Snapshots of a session's state: the JSON document and transcript rows a snapshot is
written as, and reading either version back (pure).

Since version 2 a snapshot writes only what happened since the last one: the state
document without the transcript (its rows are stored once each) and without what the
transcript already says (replay identities, completed turns' outcomes). The one event that
changes a row already written — a voice note's transcript, recorded with its message
(``SpeechTranscribed``) — has that row written again (:func:`first_changed_row`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from netclaw import jsontext
from netclaw.errors import JournalCorrupt
from netclaw.lineage import ChildRecord, ChildReport, ChildTask
from netclaw.messages import ChatMessage, MessageKind
from netclaw.security.policy import Place
from netclaw.sessions._core.journal.events import SessionEvent, SpeechTranscribed
from netclaw.sessions._core.journal.state import (
    MAX_IDENTITIES,
    ActiveTurn,
    PendingRound,
    SessionState,
    TurnOutcome,
)
from netclaw.sessions._core.journal.values import MAX_OUTCOMES

SNAPSHOT_VERSION = 1  # the whole state in one JSON document (read, no longer written)
SNAPSHOT_ROWS_VERSION = 2  # the transcript as rows written once; the rest in the document
SPREAD = 16  # a long session snapshots every len(transcript) / SPREAD events (see due())


def due(events_since: int, interval: int, transcript_len: int) -> bool:
    """Whether a turn's end writes a snapshot, ``events_since`` events after the last one:
    after ``session.snapshot_interval`` events, and in a long session only after
    ``transcript_len / SPREAD``. A snapshot's cost grows with the session (its outcomes are
    checked against up to MAX_OUTCOMES turns of transcript: about 2 ms at turn 1,000,
    encoding and writing, where a 20-event interval paid it every 7 turns); spaced in
    proportion, it costs a turn the same at any length. The events a recovery replays
    after it stay in proportion to the rows it decodes: at most a sixteenth as many."""
    return events_since >= max(interval, transcript_len // SPREAD)


def encode(state: SessionState, saved_rows: int) -> tuple[str, list[str]]:
    """The snapshot as written since version 2: the state document without the
    transcript (it names how many transcript rows it covers) and without the replay
    identities (rebuilt from the messages), plus the transcript rows from
    ``saved_rows`` on — the ones no earlier snapshot wrote. Turn outcomes the transcript
    already says (a completed turn's reply) are not written either, only those it does
    not (``outcomes``) and those it would wrongly imply (``outcomes_gone``). What a
    snapshot writes grows with what happened since the last one, not with the session's
    length."""
    data = _document(state, whole=False)
    data["v"] = SNAPSHOT_ROWS_VERSION
    data["transcript_len"] = len(state.transcript)
    told, gone = _told_outcomes(state)
    data["outcomes"] = {k: _outcome_ref(v) for k, v in state.outcomes.items() if k not in told}
    data["outcomes_gone"] = gone
    data["failures"] = {k: _outcome_ref(v) for k, v in state.failures.items()}
    rows = [jsontext.dumps(m.to_dict()) for m in state.transcript[saved_rows:]]
    return jsontext.dumps(data), rows


def first_changed_row(state: SessionState, events: Iterable[SessionEvent]) -> int | None:
    """The lowest transcript row ``events`` changed in place (a voice note's transcript
    recorded with its message), which the next snapshot must write again; None when they
    only appended. ``state`` has the events applied."""
    changed = {e.message_id for e in events if isinstance(e, SpeechTranscribed)}
    if not changed:
        return None
    return next((i for i, m in enumerate(state.transcript) if m.id in changed), None)


def decode(text: str, rows: Sequence[str]) -> SessionState:
    """A snapshot of either version (``rows``: the transcript rows saved with it)."""
    try:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError(f"snapshot is a JSON {type(d).__name__}, not an object")
        if d.get("v") == SNAPSHOT_VERSION:
            return _from_document(d)
        if d.get("v") != SNAPSHOT_ROWS_VERSION:
            raise ValueError(f"snapshot version {d.get('v')!r}")
        length = int(d["transcript_len"])
        if len(rows) < length:
            raise ValueError(f"snapshot covers {length} transcript rows, only {len(rows)} are saved")
        transcript = [ChatMessage.from_dict(m) for m in jsontext.loads_each(rows[:length])]
        inbox = [ChatMessage.from_dict(m) for m in d["inbox"]]
        by_id = {m.id: m for m in transcript if m.role == "assistant"}
        d["transcript"] = []
        d["identities"] = {}
        exceptions = d["outcomes"]
        d["outcomes"] = {}
        d["failures"] = {k: _outcome_dict(v, by_id) for k, v in d.get("failures", {}).items()}
        state = _from_document(d)
        outcomes = _implied_outcomes(transcript, state.turns, state.failures, state.active)
        for gone in d.get("outcomes_gone", ()):
            outcomes.pop(gone, None)
        for k, v in exceptions.items():
            outcomes[k] = TurnOutcome(**_outcome_dict(v, by_id))
        return replace(
            state,
            transcript=tuple(transcript),
            identities=_identities(transcript, inbox),
            outcomes=outcomes,
        )
    except JournalCorrupt:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise JournalCorrupt(f"cannot decode snapshot: {exc}") from exc


def to_json(state: SessionState) -> str:
    """The whole state as one document (snapshot version 1; tests and tools)."""
    return jsontext.dumps(_document(state, whole=True))


def _document(state: SessionState, *, whole: bool) -> dict[str, Any]:
    """The state as JSON values; without the transcript and identities unless ``whole``."""
    data = {
        "v": SNAPSHOT_VERSION,
        "session_id": state.session_id,
        "seq": state.seq,
        "title": state.title,
        "turns": state.turns,
        "inbox": [m.to_dict() for m in state.inbox],
        "active": None
        if state.active is None
        else [state.active.turn, state.active.message_id, state.active.steps, state.active.model],
        "last_activity": state.last_activity,
        "last_input_tokens": state.last_input_tokens,
        "kept_from": state.kept_from,
        "trimmed": state.trimmed,
        "summary": state.summary,
        "cleared": sorted(state.cleared),
        "compactions": state.compactions,
        "resets": state.resets,
        "memory_through_turn": state.memory_through_turn,
        "pending_round": None if state.pending_round is None else state.pending_round.to_dict(),
        "granted_tools": sorted(state.granted_tools),
        "undelivered": {str(t): m for t, m in state.undelivered.items()},
        "closed_approvals": {k: list(v) for k, v in state.closed_approvals.items()},
        "spend_day": state.spend_day,
        "spend_tokens": state.spend_tokens,
        "place": None if state.place is None else state.place.to_dict(),
        "summary_failures": state.summary_failures,
        "summary_failed_turn": state.summary_failed_turn,
        "tokens_total": state.tokens_total,
        "children": [c.to_dict() for c in state.children.values()],
        "children_spawned": state.children_spawned,
        "task": None if state.task is None else state.task.to_dict(),
        "task_input": state.task_input,
        "reports_owed": [r.to_dict() for r in state.reports_owed.values()],
        "spend_cost": state.spend_cost,
        "model_pin": state.model_pin,
        "time_told_at": state.time_told_at,
        "voice_replies": state.voice_replies,
    }
    if whole:
        data["transcript"] = [m.to_dict() for m in state.transcript]
        data["identities"] = state.identities
        data["outcomes"] = {k: v.to_dict() for k, v in state.outcomes.items()}
        data["failures"] = {k: v.to_dict() for k, v in state.failures.items()}
    return data


def from_json(text: str) -> SessionState:
    return decode(text, ())


def _from_document(d: dict[str, Any]) -> SessionState:
    try:
        active = d["active"]
        return SessionState(
            session_id=d["session_id"],
            seq=int(d["seq"]),
            title=d["title"],
            turns=int(d["turns"]),
            transcript=tuple(ChatMessage.from_dict(m) for m in d["transcript"]),
            inbox=tuple(ChatMessage.from_dict(m) for m in d["inbox"]),
            active=None if active is None else _active(active),
            identities={k: (v[0], float(v[1])) for k, v in d["identities"].items()},
            outcomes={
                k: TurnOutcome(v["turn"], v["status"], v["reply"], v["error"], v.get("reply_id"))
                for k, v in d["outcomes"].items()
            },
            last_activity=float(d["last_activity"]),
            last_input_tokens=d["last_input_tokens"],
            kept_from=int(d.get("kept_from", 0)),
            trimmed=bool(d.get("trimmed", d.get("kept_from", 0) > 0)),
            summary=d.get("summary"),
            cleared=frozenset(d.get("cleared", ())),
            compactions=int(d.get("compactions", 0)),
            failures={
                k: TurnOutcome(v["turn"], v["status"], v["reply"], v["error"], v.get("reply_id"))
                for k, v in d.get("failures", {}).items()
            },
            resets=int(d.get("resets", 0)),
            memory_through_turn=int(d.get("memory_through_turn", 0)),
            pending_round=None
            if d.get("pending_round") is None
            else PendingRound.from_dict(d["pending_round"]),
            granted_tools=frozenset(d.get("granted_tools", ())),
            undelivered={int(t): str(m) for t, m in d.get("undelivered", {}).items()},
            closed_approvals={k: (str(v[0]), str(v[1])) for k, v in d.get("closed_approvals", {}).items()},
            spend_day=str(d.get("spend_day", "")),
            spend_tokens=int(d.get("spend_tokens", 0)),
            place=Place.from_dict(d["place"]) if d.get("place") else None,
            summary_failures=int(d.get("summary_failures", 0)),
            summary_failed_turn=int(d.get("summary_failed_turn", 0)),
            tokens_total=int(d.get("tokens_total", 0)),
            children={r.task.n: r for r in map(ChildRecord.from_dict, d.get("children", ()))},
            children_spawned=int(d.get("children_spawned", 0)),
            task=ChildTask.from_dict(d["task"]) if d.get("task") else None,
            task_input=d.get("task_input"),
            reports_owed={r.turn: r for r in map(ChildReport.from_dict, d.get("reports_owed", ()))},
            spend_cost=float(d.get("spend_cost", 0.0)),
            model_pin=d.get("model_pin"),
            time_told_at=float(d.get("time_told_at", 0.0)),
            voice_replies=d.get("voice_replies"),
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise JournalCorrupt(f"cannot decode snapshot: {exc}") from exc


def _active(data: list[Any]) -> ActiveTurn:
    model = data[3] if len(data) > 3 else None  # snapshots before fallbacks have three
    return ActiveTurn(int(data[0]), data[1], int(data[2]), None if model is None else str(model))


def _outcome_ref(outcome: TurnOutcome) -> dict[str, Any] | list[Any]:
    """An outcome in a version 2 snapshot: the reply by its message's id when there is one
    (the text is in the transcript rows already); a plain completed turn as just
    ``[turn, reply id]`` (a long session keeps a thousand of these)."""
    if outcome.status == "completed" and outcome.error is None and outcome.reply_id is not None:
        return [outcome.turn, outcome.reply_id]
    data = outcome.to_dict()
    if outcome.reply_id is not None:
        data["reply_id"] = outcome.reply_id
        del data["reply"]
    return data


def _outcome_dict(data: dict[str, Any] | list[Any], assistant: Mapping[str, ChatMessage]) -> dict[str, Any]:
    if isinstance(data, list):
        data = {"turn": data[0], "status": "completed", "error": None, "reply_id": data[1]}
    reply_id = data.get("reply_id")
    if reply_id is not None and "reply" not in data:
        message = assistant.get(reply_id)
        if message is None:
            raise ValueError(f"an outcome's reply {reply_id} is not in the transcript")
        return {**data, "reply": message.content}
    return data


def _finished_turns(
    transcript: Sequence[ChatMessage], turns: int, active: ActiveTurn | None
) -> Iterator[tuple[str, int, ChatMessage | None]]:
    """The last MAX_OUTCOMES finished turns, newest first, as the transcript tells them: the
    user message that started each, its turn number and its last assistant message (None
    without one). Walks back from the end only as far as those turns reach. (A turn's user
    message is the ``turns``-th, counting back, because each turn start appended exactly
    one.)"""
    turn = turns
    answer: ChatMessage | None = None  # the last assistant message of the turn being walked
    chat = MessageKind.CHAT
    walked = 0
    for m in reversed(transcript):
        if m.role == "assistant":
            if answer is None:
                answer = m
            continue
        if m.role != "user" or m.kind is not chat:
            continue
        if active is None or active.message_id != m.id:
            yield m.id, turn, answer
            walked += 1
            if walked >= MAX_OUTCOMES:
                return
        turn -= 1
        answer = None


def _implied_outcomes(
    transcript: Sequence[ChatMessage],
    turns: int,
    failures: Mapping[str, TurnOutcome],
    active: ActiveTurn | None,
) -> dict[str, TurnOutcome]:
    """The outcomes the transcript says, as ``TurnRecorded`` made them, oldest first: for each
    finished turn (:func:`_finished_turns`), its failure if it failed, else completed with
    the turn's last assistant message as the reply."""
    found: list[tuple[str, TurnOutcome]] = []
    for message_id, turn, answer in _finished_turns(transcript, turns, active):
        failed = failures.get(message_id)
        if failed is not None:
            found.append((message_id, failed))
        elif answer is not None:
            found.append((message_id, TurnOutcome(turn, "completed", answer.content, None, answer.id)))
        else:
            found.append((message_id, TurnOutcome(turn, "completed", None, None)))
    found.reverse()
    return dict(found)


def _told_outcomes(state: SessionState) -> tuple[set[str], list[str]]:
    """What the transcript says of the outcomes, as :func:`_implied_outcomes` reads it, without
    making them: the ids whose outcome it says as recorded (a snapshot need not write them),
    and those it says but that are not recorded (``outcomes_gone``, oldest first). The same
    walk, comparing in place: every snapshot of a long session makes it."""
    outcomes, failures = state.outcomes, state.failures
    told: set[str] = set()
    gone: list[str] = []
    for message_id, turn, answer in _finished_turns(state.transcript, state.turns, state.active):
        have = outcomes.get(message_id)
        if have is None:
            gone.append(message_id)
            continue
        failed = failures.get(message_id)
        if failed is not None:
            same = have == failed
        else:  # completed, with the turn's last assistant message as the reply (if any)
            reply = answer.content if answer is not None else None
            same = (
                have.turn == turn
                and have.status == "completed"
                and have.reply == reply
                and have.error is None
            )
        if same:
            told.add(message_id)
    gone.reverse()
    return told, gone


def _identities(
    transcript: Sequence[ChatMessage], inbox: Sequence[ChatMessage]
) -> dict[str, tuple[str, float]]:
    """The replay identities, as admitting these messages in order recorded them."""
    identities: dict[str, tuple[str, float]] = {}
    for m in (*transcript, *inbox):
        if m.role == "user" and m.identity is not None and m.kind is MessageKind.CHAT:
            identities.pop(m.identity, None)  # a re-recorded identity is the newest
            identities[m.identity] = (m.id, m.ts)
    while len(identities) > MAX_IDENTITIES:
        del identities[next(iter(identities))]
    return identities
