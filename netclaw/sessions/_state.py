"""The session's durable state and the pure ``apply(event)`` that builds it.

Everything here is reconstructible from the journal: recovery is a fold of
``apply`` over the events after the latest snapshot.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from netclaw.errors import JournalCorrupt
from netclaw.messages import ChatMessage, MessageKind
from netclaw.policy import Place, channel_of
from netclaw.sessions._events import (
    ApprovalDecided,
    ApprovalRequest,
    ApprovalRequested,
    Decision,
    HistoryTrimmed,
    InputAdmitted,
    MemoriesExtracted,
    ReplyDelivered,
    SessionCompacted,
    SessionEvent,
    SessionReset,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
    TurnStatus,
)

# Replay identities are remembered this long (and at most this many), so a
# platform redelivery or client retry inside the window is recognised.
IDENTITY_RETENTION_S = 7 * 24 * 3600.0
MAX_IDENTITIES = 10_000
MAX_OUTCOMES = 1_000
SNAPSHOT_VERSION = 1  # the whole state in one JSON document (read, no longer written)
SNAPSHOT_ROWS_VERSION = 2  # the transcript as rows written once; the rest in the document
MAX_FAILURES_SHOWN = 10_000  # failed turns remembered for the transcript view
MAX_UNDELIVERED = 100  # replies owed to a chat conversation (an adapter down for long)
MAX_CLOSED_APPROVALS = 200  # decided requests remembered, so a late second decision is a 409
CHAT_CHANNELS = ("slack", "discord")  # their replies go through the outbox


@dataclass(frozen=True, slots=True)
class ActiveTurn:
    turn: int
    message_id: str
    steps: int = 0  # tool iterations already recorded (a resumed turn continues from here)


@dataclass(frozen=True, slots=True)
class PendingRound:
    """A tool round waiting for decisions (see ``ApprovalRequested``)."""

    turn: int
    assistant: ChatMessage
    requests: tuple[ApprovalRequest, ...]
    decisions: Mapping[str, tuple[Decision, str]] = field(default_factory=dict)  # id → (decision, by)

    @property
    def open(self) -> tuple[ApprovalRequest, ...]:
        return tuple(r for r in self.requests if r.id not in self.decisions)

    def find(self, approval_id: str) -> ApprovalRequest | None:
        return next((r for r in self.requests if r.id == approval_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "assistant": self.assistant.to_dict(),
            "requests": [r.to_dict() for r in self.requests],
            "decisions": {k: list(v) for k, v in self.decisions.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingRound:
        return cls(
            int(d["turn"]),
            ChatMessage.from_dict(d["assistant"]),
            tuple(ApprovalRequest.from_dict(r) for r in d["requests"]),
            {k: (v[0], str(v[1])) for k, v in d.get("decisions", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    turn: int
    status: TurnStatus
    reply: str | None
    error: Mapping[str, str] | None = None
    # The assistant message the reply is (snapshots refer to it); bookkeeping, not part of
    # what an outcome is.
    reply_id: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "status": self.status, "reply": self.reply, "error": self.error}


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


# Events whose only use of the transcript is appending to it.
_APPENDING = (TurnStarted, StepRecorded, TurnRecorded)


def _implied_outcomes(
    transcript: Sequence[ChatMessage],
    turns: int,
    failures: Mapping[str, TurnOutcome],
    active: ActiveTurn | None,
) -> dict[str, TurnOutcome]:
    """The outcomes the transcript says, as ``TurnRecorded`` made them, oldest first: for each
    of the last MAX_OUTCOMES finished turns, its failure if it failed, else completed with
    the turn's last assistant message as the reply. Walks back from the end only as far as
    those turns reach. (A turn's user message is the ``turns``-th, counting back, because
    each turn start appended exactly one.)"""
    found: list[tuple[str, TurnOutcome]] = []
    turn = turns
    answer: ChatMessage | None = None  # the last assistant message of the turn being walked
    chat = MessageKind.CHAT
    for m in reversed(transcript):
        if m.role == "assistant":
            if answer is None:
                answer = m
            continue
        if m.role != "user" or m.kind is not chat:
            continue
        if active is None or active.message_id != m.id:
            failed = failures.get(m.id)
            if failed is not None:
                found.append((m.id, failed))
            elif answer is not None:
                found.append((m.id, TurnOutcome(turn, "completed", answer.content, None, answer.id)))
            else:
                found.append((m.id, TurnOutcome(turn, "completed", None, None)))
            if len(found) >= MAX_OUTCOMES:
                break
        turn -= 1
        answer = None
    found.reverse()
    return dict(found)


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


@dataclass(frozen=True, slots=True)
class SessionState:
    session_id: str
    seq: int = 0
    title: str | None = None
    turns: int = 0  # turns started so far; the active one included
    transcript: tuple[ChatMessage, ...] = ()
    inbox: tuple[ChatMessage, ...] = ()  # admitted, waiting for their turn, in arrival order
    active: ActiveTurn | None = None
    identities: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # → (message id, ts)
    outcomes: Mapping[str, TurnOutcome] = field(default_factory=dict)  # user message id → outcome
    last_activity: float = 0.0
    last_input_tokens: int | None = None
    # The model sees transcript[kept_from:] (never deleted from the record). Earlier turns
    # were either summarised (`summary`) or, if `trimmed`, dropped behind a breadcrumb.
    kept_from: int = 0
    trimmed: bool = False
    summary: str | None = None
    cleared: frozenset[str] = frozenset()  # tool_call_ids shown as placeholders
    compactions: int = 0
    # Turns that ended without an answer, by the user message that started them, so the
    # transcript can show people what happened (never part of what the model sees).
    failures: Mapping[str, TurnOutcome] = field(default_factory=dict)
    resets: int = 0
    memory_through_turn: int = 0  # observations of turns up to here are saved
    pending_round: PendingRound | None = None  # a tool round waiting for approvals
    granted_tools: frozenset[str] = frozenset()  # approved "always" for this session
    # Chat sessions: replies recorded but not yet shown in the conversation (turn → the
    # assistant message), so the channel posts them even if nobody watched the turn.
    undelivered: Mapping[int, str] = field(default_factory=dict)
    closed_approvals: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # id → (decision, by)
    # Provider tokens (input + output) spent on ``spend_day`` (a UTC date), for the guard.
    spend_day: str = ""
    spend_tokens: int = 0
    place: Place | None = None  # where the channel says the session lives (memory scope, DM audience)

    def tokens_spent_on(self, day: str) -> int:
        """Provider tokens (input + output) recorded on the UTC date ``day``."""
        return self.spend_tokens if day == self.spend_day else 0

    def _spending(self, event: TurnRecorded, ts: float) -> dict[str, Any]:
        spent = event.spent or {}
        tokens = int(spent.get("input_tokens", 0)) + int(spent.get("output_tokens", 0))
        if not tokens:
            return {}
        day = utc_day(ts)
        return {"spend_day": day, "spend_tokens": tokens + self.tokens_spent_on(day)}

    @property
    def visible(self) -> tuple[ChatMessage, ...]:
        """The transcript part the model still sees."""
        return self.transcript[self.kept_from :] if self.kept_from else self.transcript

    @property
    def channel(self) -> str:
        return channel_of(self.session_id)

    @property
    def pending_inputs(self) -> int:
        return len(self.inbox) + (1 if self.active else 0)

    def seen(self, identity: str, now: float) -> str | None:
        """The message id already admitted under ``identity``, if still within retention."""
        hit = self.identities.get(identity)
        if hit is None or now - hit[1] > IDENTITY_RETENTION_S:
            return None
        return hit[0]

    def find_message(self, message_id: str) -> ChatMessage | None:
        for m in self.inbox:
            if m.id == message_id:
                return m
        for m in reversed(self.transcript):
            if m.id == message_id:
                return m
        return None

    # -- the fold -----------------------------------------------------------------------------

    def apply(self, event: SessionEvent, seq: int, ts: float) -> SessionState:  # noqa: C901 - one case per event
        if seq != self.seq + 1:
            raise JournalCorrupt(
                f"{self.session_id}: event seq {seq} does not follow {self.seq}; journal has a gap"
            )
        match event:
            case InputAdmitted(message=m, place=place):
                identities = dict(self.identities)
                if m.identity is not None:
                    identities.pop(m.identity, None)  # a re-recorded identity is the newest
                    identities[m.identity] = (m.id, m.ts)
                    if len(identities) > MAX_IDENTITIES:
                        del identities[next(iter(identities))]
                return self._evolve(
                    seq=seq,
                    inbox=(*self.inbox, m),
                    identities=identities,
                    last_activity=ts,
                    place=place if place is not None else self.place,
                )
            case TurnStarted(turn=turn, message_id=mid):
                picked = next((m for m in self.inbox if m.id == mid), None)
                if picked is None:
                    raise JournalCorrupt(f"{self.session_id}: turn {turn} starts unknown input {mid}")
                return self._evolve(
                    seq=seq,
                    turns=turn,
                    inbox=tuple(m for m in self.inbox if m.id != mid),
                    transcript=(*self.transcript, picked),
                    active=ActiveTurn(turn, mid),
                    last_activity=ts,
                )
            case StepRecorded(messages=ms):
                active = self.active and replace(self.active, steps=self.active.steps + 1)
                return self._evolve(
                    seq=seq,
                    transcript=(*self.transcript, *ms),
                    active=active,
                    pending_round=None,
                    closed_approvals=self._round_closed(),
                    last_activity=ts,
                )
            case ApprovalRequested(turn=turn, assistant=assistant, requests=requests):
                return replace(
                    self, seq=seq, pending_round=PendingRound(turn, assistant, requests), last_activity=ts
                )
            case ApprovalDecided(approval_id=aid, decision=decision, by=by):
                pending = self.pending_round
                if pending is None or pending.find(aid) is None:
                    raise JournalCorrupt(f"{self.session_id}: decision on unknown approval {aid}")
                granted = self.granted_tools
                if decision == "always":
                    granted = granted | {pending.find(aid).tool}  # type: ignore[union-attr]
                decided = replace(pending, decisions={**pending.decisions, aid: (decision, by)})
                return self._evolve(
                    seq=seq,
                    pending_round=decided,
                    granted_tools=granted,
                    closed_approvals=_closed(self.closed_approvals, {aid: (decision, by)}),
                    last_activity=ts,
                )
            case TurnRecorded():
                outcomes = dict(self.outcomes)
                answer = next((m for m in reversed(event.messages) if m.role == "assistant"), None)
                reply = answer.content if answer is not None else None
                outcome = TurnOutcome(
                    event.turn, event.status, reply, event.error, answer.id if answer is not None else None
                )
                outcomes[event.message_id] = outcome
                if len(outcomes) > MAX_OUTCOMES:
                    del outcomes[next(iter(outcomes))]
                failures = self.failures
                if event.status != "completed":
                    failures = {**failures, event.message_id: outcome}
                    if len(failures) > MAX_FAILURES_SHOWN:
                        del failures[next(iter(failures))]
                usage = event.usage or {}
                undelivered = self.undelivered
                if event.status == "completed" and answer is not None and self.channel in CHAT_CHANNELS:
                    undelivered = {**undelivered, event.turn: answer.id}
                    if len(undelivered) > MAX_UNDELIVERED:
                        del undelivered[min(undelivered)]
                return self._evolve(
                    seq=seq,
                    transcript=(*self.transcript, *event.messages),
                    active=None,
                    pending_round=None,
                    closed_approvals=self._round_closed(),
                    undelivered=undelivered,
                    outcomes=outcomes,
                    failures=failures,
                    last_activity=ts,
                    last_input_tokens=usage.get("input_tokens", self.last_input_tokens),
                    **self._spending(event, ts),
                )
            case SessionReset():
                return self._evolve(
                    seq=seq,
                    kept_from=len(self.transcript),
                    trimmed=False,
                    summary=None,
                    cleared=frozenset(),
                    last_input_tokens=None,
                    resets=self.resets + 1,
                    last_activity=ts,
                )
            case ReplyDelivered(turn=turn):
                if turn not in self.undelivered:
                    return self._evolve(seq=seq)
                return replace(
                    self, seq=seq, undelivered={t: m for t, m in self.undelivered.items() if t != turn}
                )
            case MemoriesExtracted(through_turn=turn):
                return self._evolve(seq=seq, memory_through_turn=max(self.memory_through_turn, turn))
            case SessionTitleSet(title=title):
                return self._evolve(seq=seq, title=title, last_activity=ts)
            case HistoryTrimmed(first_kept_id=first):
                return self._evolve(seq=seq, kept_from=self._index_of(first), trimmed=True)
            case SessionCompacted():
                state = self._evolve(
                    seq=seq,
                    cleared=self.cleared | frozenset(event.cleared),
                    compactions=self.compactions + 1,
                    last_input_tokens=None,  # the provider's count no longer describes the prompt
                    last_activity=ts,
                )
                if event.summary is not None and event.first_kept_id is not None:
                    # The summary covers everything before the kept part: no breadcrumb.
                    state = replace(
                        state,
                        summary=event.summary,
                        kept_from=self._index_of(event.first_kept_id),
                        trimmed=False,
                    )
                return state
        raise TypeError(f"not a session event: {event!r}")

    def _round_closed(self) -> Mapping[str, tuple[str, str]]:
        """The closed approvals once the pending round ends: its undecided requests closed
        with the turn."""
        pending = self.pending_round
        if pending is None or not pending.open:
            return self.closed_approvals
        return _closed(self.closed_approvals, {r.id: ("cancelled", "the turn ended") for r in pending.open})

    def _index_of(self, message_id: str) -> int:
        index = next((i for i, m in enumerate(self.transcript) if m.id == message_id), None)
        if index is None:
            raise JournalCorrupt(f"{self.session_id}: projection keeps from unknown message {message_id}")
        return index

    def _evolve(self, **changes: Any) -> SessionState:
        """``dataclasses.replace`` for this class, at half its cost (no keyword assembly, no
        ``__init__``): every event of every session goes through it, and recovery's fold
        does it thousands of times."""
        new = object.__new__(SessionState)
        setattr_ = object.__setattr__
        for name in _FIELDS:
            setattr_(new, name, getattr(self, name))
        for name, value in changes.items():
            setattr_(new, name, value)
        return new

    def apply_all(self, events: Iterable[tuple[SessionEvent, int, float]]) -> SessionState:
        """``apply`` each event in turn (recovery's fold). The transcript is built in a list
        and made a tuple once at the end, so replaying n messages costs O(n), not the O(n²)
        of a new tuple per event; the events that read the transcript get it whole."""
        collected = list(self.transcript)
        state = replace(self, transcript=())  # the fold's own object: never seen outside
        for event, seq, ts in events:
            if not isinstance(event, _APPENDING):
                state = replace(state, transcript=tuple(collected))
            state = state.apply(event, seq, ts)
            if state.transcript:
                if isinstance(event, _APPENDING):
                    collected.extend(state.transcript)  # what this event appended
                else:
                    collected = list(state.transcript)
                # A fresh object from apply (or the fold's own copy): resetting it in place is
                # safe, and saves a second copy of every field per event.
                object.__setattr__(state, "transcript", ())
        return replace(state, transcript=tuple(collected))

    # -- snapshots ----------------------------------------------------------------------------

    def to_snapshot(self, saved_rows: int) -> tuple[str, list[str]]:
        """The snapshot as written since version 2: the state document without the
        transcript (it names how many transcript rows it covers) and without the replay
        identities (rebuilt from the messages), plus the transcript rows from
        ``saved_rows`` on — the ones no earlier snapshot wrote. Turn outcomes the transcript
        already says (a completed turn's reply) are not written either, only those it does
        not (``outcomes``) and those it would wrongly imply (``outcomes_gone``). What a
        snapshot writes grows with what happened since the last one, not with the session's
        length."""
        data = self._document(whole=False)
        data["v"] = SNAPSHOT_ROWS_VERSION
        data["transcript_len"] = len(self.transcript)
        implied = _implied_outcomes(self.transcript, self.turns, self.failures, self.active)
        data["outcomes"] = {k: _outcome_ref(v) for k, v in self.outcomes.items() if implied.get(k) != v}
        data["outcomes_gone"] = [k for k in implied if k not in self.outcomes]
        data["failures"] = {k: _outcome_ref(v) for k, v in self.failures.items()}
        rows = [
            json.dumps(m.to_dict(), ensure_ascii=False, separators=(",", ":"))
            for m in self.transcript[saved_rows:]
        ]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")), rows

    @classmethod
    def from_snapshot(cls, text: str, rows: Sequence[str]) -> SessionState:
        """A snapshot of either version (``rows``: the transcript rows saved with it)."""
        try:
            d = json.loads(text)
            if not isinstance(d, dict):
                raise ValueError(f"snapshot is a JSON {type(d).__name__}, not an object")
            if d.get("v") == SNAPSHOT_VERSION:
                return cls._from_document(d)
            if d.get("v") != SNAPSHOT_ROWS_VERSION:
                raise ValueError(f"snapshot version {d.get('v')!r}")
            length = int(d["transcript_len"])
            if len(rows) < length:
                raise ValueError(f"snapshot covers {length} transcript rows, only {len(rows)} are saved")
            transcript = [ChatMessage.from_dict(json.loads(r)) for r in rows[:length]]
            inbox = [ChatMessage.from_dict(m) for m in d["inbox"]]
            by_id = {m.id: m for m in transcript if m.role == "assistant"}
            d["transcript"] = []
            d["identities"] = {}
            exceptions = d["outcomes"]
            d["outcomes"] = {}
            d["failures"] = {k: _outcome_dict(v, by_id) for k, v in d.get("failures", {}).items()}
            state = cls._from_document(d)
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

    def to_json(self) -> str:
        """The whole state as one document (snapshot version 1; tests and tools)."""
        return json.dumps(self._document(whole=True), ensure_ascii=False, separators=(",", ":"))

    def _document(self, *, whole: bool) -> dict[str, Any]:
        """The state as JSON values; without the transcript and identities unless ``whole``."""
        data = {
            "v": SNAPSHOT_VERSION,
            "session_id": self.session_id,
            "seq": self.seq,
            "title": self.title,
            "turns": self.turns,
            "inbox": [m.to_dict() for m in self.inbox],
            "active": None
            if self.active is None
            else [self.active.turn, self.active.message_id, self.active.steps],
            "outcomes": {k: v.to_dict() for k, v in self.outcomes.items()},
            "last_activity": self.last_activity,
            "last_input_tokens": self.last_input_tokens,
            "kept_from": self.kept_from,
            "trimmed": self.trimmed,
            "summary": self.summary,
            "cleared": sorted(self.cleared),
            "compactions": self.compactions,
            "failures": {k: v.to_dict() for k, v in self.failures.items()},
            "resets": self.resets,
            "memory_through_turn": self.memory_through_turn,
            "pending_round": None if self.pending_round is None else self.pending_round.to_dict(),
            "granted_tools": sorted(self.granted_tools),
            "undelivered": {str(t): m for t, m in self.undelivered.items()},
            "closed_approvals": {k: list(v) for k, v in self.closed_approvals.items()},
            "spend_day": self.spend_day,
            "spend_tokens": self.spend_tokens,
            "place": None if self.place is None else self.place.to_dict(),
        }
        if whole:
            data["transcript"] = [m.to_dict() for m in self.transcript]
            data["identities"] = self.identities
        return data

    @classmethod
    def from_json(cls, text: str) -> SessionState:
        return cls.from_snapshot(text, ())

    @classmethod
    def _from_document(cls, d: dict[str, Any]) -> SessionState:
        try:
            active = d["active"]
            return cls(
                session_id=d["session_id"],
                seq=int(d["seq"]),
                title=d["title"],
                turns=int(d["turns"]),
                transcript=tuple(ChatMessage.from_dict(m) for m in d["transcript"]),
                inbox=tuple(ChatMessage.from_dict(m) for m in d["inbox"]),
                active=None if active is None else ActiveTurn(int(active[0]), active[1], int(active[2])),
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
                closed_approvals={
                    k: (str(v[0]), str(v[1])) for k, v in d.get("closed_approvals", {}).items()
                },
                spend_day=str(d.get("spend_day", "")),
                spend_tokens=int(d.get("spend_tokens", 0)),
                place=Place.from_dict(d["place"]) if d.get("place") else None,
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise JournalCorrupt(f"cannot decode snapshot: {exc}") from exc


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SessionState))


def utc_day(ts: float) -> str:
    """The UTC date of a unix time, as the spend guard counts days."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).date().isoformat()


def _closed(
    known: Mapping[str, tuple[str, str]], new: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[str, str]]:
    merged = {**known, **new}
    while len(merged) > MAX_CLOSED_APPROVALS:
        del merged[next(iter(merged))]
    return merged
