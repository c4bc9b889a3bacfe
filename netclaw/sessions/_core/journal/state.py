"""The session's durable state and the pure ``apply(event)`` that builds it.

Everything here is reconstructible from the journal: recovery is a fold of
``apply`` over the events after the latest snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from netclaw.config import is_chat_channel
from netclaw.errors import JournalCorrupt
from netclaw.lineage import ChildRecord, ChildReport, ChildTask
from netclaw.messages import ChatMessage, Transcript
from netclaw.records import builder
from netclaw.security.policy import Place, channel_of
from netclaw.sessions._core.journal import children as kin
from netclaw.sessions._core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildDetached,
    ChildReported,
    ChildSpawned,
    ContextAttached,
    HistoryTrimmed,
    InputAdmitted,
    MemoriesExtracted,
    ModelPinned,
    ModelSwitched,
    ReplyDelivered,
    ReplySpoken,
    RoundStarted,
    SessionCompacted,
    SessionEvent,
    SessionReset,
    SessionTitleSet,
    SpeechTranscribed,
    StepRecorded,
    TaskGiven,
    TurnRecorded,
    TurnStarted,
    VoiceRepliesSet,
)
from netclaw.sessions._core.journal.values import (
    ActiveTurn,
    PendingRound,
    TurnOutcome,
    closed_with,
    remember_outcome,
    spent_by,
)
from netclaw.spend import utc_day

__all__ = ["ActiveTurn", "PendingRound", "SessionState", "TurnOutcome", "utc_day"]

# Replay identities are remembered this long (and at most this many), so a
# platform redelivery or client retry inside the window is recognised.
IDENTITY_RETENTION_S = 7 * 24 * 3600.0
MAX_IDENTITIES = 10_000
MAX_UNDELIVERED = 100  # replies owed to a chat conversation (an adapter down for long)


# What each event does with the transcript, for the fold (``apply_all``): appends to it,
# reads it whole (an index, its length, a message to change), or neither. Every event is
# named (checked below): one left out would fold wrongly.
_APPENDING = (TurnStarted, StepRecorded, TurnRecorded, ContextAttached)
_READING = (SpeechTranscribed, SessionReset, HistoryTrimmed, SessionCompacted)
_NEITHER = (
    InputAdmitted,
    ApprovalRequested,
    ApprovalDecided,
    ModelSwitched,
    ModelPinned,
    VoiceRepliesSet,
    ReplySpoken,
    ReplyDelivered,
    RoundStarted,
    ChildSpawned,
    ChildReported,
    ChildDetached,
    TaskGiven,
    MemoriesExtracted,
    SessionTitleSet,
)
if set(get_args(SessionEvent)) != {*_APPENDING, *_READING, *_NEITHER}:
    raise TypeError("every session event must be named once in _APPENDING, _READING or _NEITHER")

_new_turn = builder(ActiveTurn)  # (turn, message_id, steps, model): every turn starts one


def _answer(messages: tuple[ChatMessage, ...]) -> ChatMessage | None:
    """A turn's answer: its last assistant message (a recorded turn's is its last message)."""
    if messages and messages[-1].role == "assistant":
        return messages[-1]
    return next((m for m in reversed(messages) if m.role == "assistant"), None)


# Not slotted: a new state per event copies its fields as one dict (``_evolve``).
@dataclass(frozen=True)
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
    # Provider tokens (input + output) and their cost spent on ``spend_day`` (a UTC date),
    # for the guards.
    spend_day: str = ""
    spend_tokens: int = 0
    spend_cost: float = 0.0
    model_pin: str | None = None  # the model a person chose for this session (None: main)
    time_told_at: float = 0.0  # when a volatile tail last told the model the time (0: not in view)
    place: Place | None = None  # where the channel says the session lives (memory scope, DM audience)
    # Compactions in a row whose summary failed, and the turn of the latest (its backoff).
    summary_failures: int = 0
    summary_failed_turn: int = 0
    tokens_total: int = 0  # provider tokens (input + output) of every turn (a sub-agent's budget)
    # Sub-agents this session spawned (n → record), and how many it ever spawned (the next n).
    children: Mapping[int, ChildRecord] = field(default_factory=dict)
    children_spawned: int = 0
    # A sub-agent's own: its task (None for a session people started), the message that
    # gave it, and the turns recorded but not yet admitted by the parent (turn → report).
    task: ChildTask | None = None
    task_input: str | None = None
    reports_owed: Mapping[int, ChildReport] = field(default_factory=dict)
    voice_replies: bool | None = None  # a person's /voice on|off (None: the audience's default)

    @property
    def owed(self) -> int:
        """Answers recorded but not yet where they go: chat replies not shown, reports not
        admitted by the parent (the session row counts them, so they are re-driven)."""
        return len(self.undelivered) + len(self.reports_owed)

    def tokens_spent_on(self, day: str) -> int:
        """Provider tokens (input + output) recorded on the UTC date ``day``."""
        return self.spend_tokens if day == self.spend_day else 0

    def cost_spent_on(self, day: str) -> float:
        """What the turns recorded on the UTC date ``day`` cost."""
        return self.spend_cost if day == self.spend_day else 0.0

    def _charged(self, tokens: int, cost: float, ts: float) -> dict[str, Any]:
        """The spend guards' count after ``tokens`` (costing ``cost``) more were spent at
        ``ts``: by this session's own calls (turns and compactions), or by a sub-agent of it
        (its report carries them), so a child's spend counts toward its parent's caps. The
        one place spend is added up."""
        if not tokens and not cost:
            return {}
        day = utc_day(ts)
        return {
            "spend_day": day,
            "spend_tokens": tokens + self.tokens_spent_on(day),
            "spend_cost": cost + self.cost_spent_on(day),
        }

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

    def apply(self, event: SessionEvent, seq: int, ts: float) -> SessionState:
        if seq != self.seq + 1:
            raise JournalCorrupt(
                f"{self.session_id}: event seq {seq} does not follow {self.seq}; journal has a gap"
            )
        new = object.__new__(SessionState)
        fields_ = new.__dict__
        fields_.update(self.__dict__)
        fields_.update(self._changes(event, seq, ts, owned=False))
        return new

    def _changes(  # noqa: C901 - one case per event
        self, event: SessionEvent, seq: int, ts: float, *, owned: bool
    ) -> dict[str, Any]:
        """The fields ``event`` changes, and their new values. ``owned``: the fold's own
        state (:meth:`apply_all`), whose mappings nobody else holds: changed in place, not
        copied (a replay would copy them once per event)."""
        match event:
            case InputAdmitted(message=m, place=place):
                identities = self.identities
                if m.identity is not None:
                    identities = identities if owned else dict(identities)
                    assert isinstance(identities, dict)
                    identities.pop(m.identity, None)  # a re-recorded identity is the newest
                    identities[m.identity] = (m.id, m.ts)
                    if len(identities) > MAX_IDENTITIES:
                        del identities[next(iter(identities))]
                return dict(
                    seq=seq,
                    inbox=(*self.inbox, m),
                    identities=identities,
                    last_activity=ts,
                    place=place if place is not None else self.place,
                    task_input=kin.task_input(self.task, m, self.task_input),
                )
            case TurnStarted(turn=turn, message_id=mid):
                inbox = self.inbox
                picked: ChatMessage | None
                rest: tuple[ChatMessage, ...]
                if len(inbox) == 1 and inbox[0].id == mid:  # the usual case: the only input
                    picked, rest = inbox[0], ()
                else:
                    picked = next((m for m in inbox if m.id == mid), None)
                    if picked is None:
                        raise JournalCorrupt(f"{self.session_id}: turn {turn} starts unknown input {mid}")
                    rest = tuple(m for m in inbox if m.id != mid)
                return dict(
                    seq=seq,
                    turns=turn,
                    inbox=rest,
                    transcript=(*self.transcript, picked),
                    active=_new_turn(turn, mid, 0, None),
                    last_activity=ts,
                )
            case StepRecorded(messages=ms):
                active = self.active
                if active is not None:
                    active = _new_turn(active.turn, active.message_id, active.steps + 1, active.model)
                return dict(
                    seq=seq,
                    transcript=(*self.transcript, *ms),
                    active=active,
                    pending_round=None,
                    closed_approvals=self._round_closed(),
                    last_activity=ts,
                )
            case ApprovalRequested(turn=turn, assistant=assistant, requests=requests):
                return dict(seq=seq, pending_round=PendingRound(turn, assistant, requests), last_activity=ts)
            case ApprovalDecided(approval_id=aid, decision=decision, by=by):
                pending = self.pending_round
                if pending is None or pending.find(aid) is None:
                    raise JournalCorrupt(f"{self.session_id}: decision on unknown approval {aid}")
                granted = self.granted_tools
                if decision == "always":
                    granted = granted | {pending.find(aid).tool}  # type: ignore[union-attr]
                decided = replace(pending, decisions={**pending.decisions, aid: (decision, by)})
                return dict(
                    seq=seq,
                    pending_round=decided,
                    granted_tools=granted,
                    closed_approvals=closed_with(self.closed_approvals, {aid: (decision, by)}),
                    last_activity=ts,
                )
            case TurnRecorded():
                answer = _answer(event.messages)
                reply = answer.content if answer is not None else None
                outcomes, failures = remember_outcome(
                    self.outcomes, self.failures, event, answer, owned=owned
                )
                usage = event.usage or {}
                undelivered = self.undelivered
                if event.status == "completed" and answer is not None and is_chat_channel(self.channel):
                    undelivered = {**undelivered, event.turn: answer.id}
                    if len(undelivered) > MAX_UNDELIVERED:
                        del undelivered[min(undelivered)]
                tokens, cost = spent_by(event)
                return dict(
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
                    tokens_total=self.tokens_total + tokens,
                    reports_owed=kin.owed_after(
                        self.reports_owed, self.task, self.task_input, event, reply, tokens, cost
                    ),
                    **self._charged(tokens, cost, ts),
                )
            case ContextAttached(message=m, told_time=told):
                return dict(
                    seq=seq,
                    transcript=(*self.transcript, m),
                    time_told_at=m.ts if told else self.time_told_at,
                    last_activity=ts,
                )
            case ModelSwitched(to_model=model):
                active = self.active and replace(self.active, model=model)
                return dict(seq=seq, active=active, last_activity=ts)
            case ModelPinned(model=model):
                return dict(seq=seq, model_pin=model, last_activity=ts)
            case VoiceRepliesSet(on=on):
                return dict(seq=seq, voice_replies=on, last_activity=ts)
            case ReplySpoken(cost=cost):
                return dict(seq=seq, **self._charged(0, float(cost or 0.0), ts))
            case SpeechTranscribed(message_id=mid, transcripts=heard, cost=cost):
                return dict(
                    seq=seq,
                    transcript=self._heard(mid, dict(heard)),
                    last_activity=ts,
                    **self._charged(0, float(cost or 0.0), ts),
                )
            case SessionReset():
                return dict(
                    seq=seq,
                    kept_from=len(self.transcript),
                    trimmed=False,
                    summary=None,
                    cleared=frozenset(),
                    last_input_tokens=None,
                    resets=self.resets + 1,
                    time_told_at=0.0,  # out of view: the next tail tells it again
                    last_activity=ts,
                )
            case ReplyDelivered(turn=turn):
                if turn not in self.undelivered and turn not in self.reports_owed:
                    return dict(seq=seq)
                return dict(
                    seq=seq,
                    undelivered={t: m for t, m in self.undelivered.items() if t != turn},
                    reports_owed={t: r for t, r in self.reports_owed.items() if t != turn},
                )
            case RoundStarted(turn=turn, assistant=assistant):
                return dict(seq=seq, pending_round=PendingRound(turn, assistant, ()), last_activity=ts)
            case ChildSpawned(task=task):
                return dict(
                    seq=seq,
                    children=kin.spawned(self.children, event, ts),
                    children_spawned=max(self.children_spawned, task.n),
                    last_activity=ts,
                )
            case ChildReported(report=report):
                return dict(
                    seq=seq,
                    children=kin.reported(self.children, report, ts),
                    **self._charged(report.tokens, report.cost, ts),
                )
            case ChildDetached(n=n):
                return dict(seq=seq, children=kin.detached(self.children, n))
            case TaskGiven(task=task):
                return dict(seq=seq, task=task)
            case MemoriesExtracted(through_turn=turn):
                return dict(seq=seq, memory_through_turn=max(self.memory_through_turn, turn))
            case SessionTitleSet(title=title):
                return dict(seq=seq, title=title, last_activity=ts)
            case HistoryTrimmed(first_kept_id=first):
                # The told time may be out of view now: the next tail tells it again.
                return dict(seq=seq, kept_from=self._index_of(first), trimmed=True, time_told_at=0.0)
            case SessionCompacted():
                # Summaries that failed in a row (the backoff counts them); a summary resets it.
                failed_summaries = (
                    0 if event.summary is not None else self.summary_failures + event.summary_failed
                )
                changes = dict(
                    **self._charged(*spent_by(event), ts),
                    seq=seq,
                    cleared=self.cleared | frozenset(event.cleared),
                    compactions=self.compactions + 1,
                    last_input_tokens=None,  # the provider's count no longer describes the prompt
                    last_activity=ts,
                    summary_failures=failed_summaries,
                    summary_failed_turn=self.turns if event.summary_failed else self.summary_failed_turn,
                )
                if event.summary is not None and event.first_kept_id is not None:
                    # The summary covers everything before the kept part: no breadcrumb.
                    changes.update(
                        summary=event.summary,
                        kept_from=self._index_of(event.first_kept_id),
                        trimmed=False,
                        time_told_at=0.0,  # as after a trim
                    )
                return changes
        raise TypeError(f"not a session event: {event!r}")

    def _heard(self, message_id: str, heard: Mapping[int, Transcript]) -> tuple[ChatMessage, ...]:
        """The transcript with ``message_id``'s audio files carrying what was heard in them
        (the message is recorded once; its transcripts are part of it from now on)."""
        for at in range(len(self.transcript) - 1, -1, -1):
            message = self.transcript[at]
            if message.id == message_id:
                files = tuple(
                    replace(f, transcript=heard[i]) if i in heard else f for i, f in enumerate(message.files)
                )
                return (*self.transcript[:at], replace(message, files=files), *self.transcript[at + 1 :])
        raise JournalCorrupt(f"{self.session_id}: a transcript for unknown message {message_id}")

    def _round_closed(self) -> Mapping[str, tuple[str, str]]:
        """The closed approvals once the pending round ends: its undecided requests too."""
        pending = self.pending_round
        if pending is None or not pending.open:  # the fold's common case: nothing to copy
            return self.closed_approvals
        return closed_with(self.closed_approvals, pending.ended())

    def _index_of(self, message_id: str) -> int:
        index = next((i for i, m in enumerate(self.transcript) if m.id == message_id), None)
        if index is None:
            raise JournalCorrupt(f"{self.session_id}: projection keeps from unknown message {message_id}")
        return index

    def _evolve(self, **changes: Any) -> SessionState:
        """``dataclasses.replace`` for this class at a fraction of its cost (no keyword
        assembly, no ``__init__``, the fields copied as one dict): every event of every
        session goes through it, and recovery's fold does it thousands of times."""
        new = object.__new__(SessionState)
        fields_ = new.__dict__
        fields_.update(self.__dict__)
        fields_.update(changes)
        return new

    def apply_all(self, events: Iterable[tuple[SessionEvent, int, float]]) -> SessionState:
        """``apply`` each event in turn (recovery's fold), on one state object of the fold's
        own that each event's changes update in place (its mappings copied once, at the
        start, then changed in place too). The transcript is built in a list and made a
        tuple once at the end, so replaying n messages costs O(n), not the O(n²) of a new
        tuple per event; only the few events that read the transcript get it whole."""
        collected = list(self.transcript)
        # The fold's own object, never seen outside until it is done.
        state = self._evolve(
            transcript=(),
            identities=dict(self.identities),
            outcomes=dict(self.outcomes),
            failures=dict(self.failures),
        )
        fields_ = state.__dict__
        for event, seq, ts in events:
            if seq != fields_["seq"] + 1:
                raise JournalCorrupt(
                    f"{self.session_id}: event seq {seq} does not follow {fields_['seq']}; journal has a gap"
                )
            reads = isinstance(event, _READING)
            if reads:
                fields_["transcript"] = tuple(collected)
            fields_.update(state._changes(event, seq, ts, owned=True))  # noqa: SLF001 - its own class
            appended = fields_["transcript"]
            if appended:
                if reads:
                    collected = list(appended)
                else:
                    collected.extend(appended)  # what this event appended
                fields_["transcript"] = ()
        return state._evolve(transcript=tuple(collected))  # noqa: SLF001 - its own class
