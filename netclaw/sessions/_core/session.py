"""The session: one conversation's state and what it is doing, as a pure function of the
commands it receives — no threads, no I/O, no waiting, and no clock or id of its own.

:meth:`Session.handle` takes a command and returns the effects it decided
(:mod:`netclaw.sessions._core.effects`); it carries none out: the actor does, once each, in the order given
(:mod:`netclaw.sessions._shell.actor`). The current activity (:mod:`netclaw.sessions._core.activity`) does what the command means there
and returns the activity afterwards; the session makes that current and enters it, and so
on until one stays, announcing every change of phase on the way. What outlives an
activity — admission, subscribers, the timers, the callers waiting — lives here, and so do
the activities' constructors (``Core``'s ``compaction``, ``turn_ended``, ...). The time,
fresh ids and the daemon's secrets come from its env (:class:`~netclaw.sessions._core.context.build.SessionEnv`).
Tests drive it directly (``tests/unit/sessions/``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar, assert_never

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import NetclawError
from netclaw.process.runtime import Reply
from netclaw.security.redact import Scrubber
from netclaw.sessions._core import commands as cmd
from netclaw.sessions._core import effects as fx
from netclaw.sessions._core import results as res
from netclaw.sessions._core.activities.compacting import Compacting
from netclaw.sessions._core.activities.idle import Idle
from netclaw.sessions._core.activities.passivating import Passivating
from netclaw.sessions._core.activities.turning import Turn
from netclaw.sessions._core.activity import Activity, Core, IdleEntry, Suspended
from netclaw.sessions._core.context import ladder as ladder
from netclaw.sessions._core.context.build import ModelContext, SessionEnv
from netclaw.sessions._core.handlers import admission as admission
from netclaw.sessions._core.handlers import answers as answers
from netclaw.sessions._core.handlers import decisions as decisions
from netclaw.sessions._core.handlers import models as models
from netclaw.sessions._core.handlers import subagents as subagents
from netclaw.sessions._core.handlers import voice as voice
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.events import MemoriesExtracted, SessionEvent, SessionReset, TurnStarted
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase, check_transition
from netclaw.sessions._core.status import greeting
from netclaw.sessions._core.timers import Timers
from netclaw.sessions._core.turn import Step, TurnRun
from netclaw.sessions._core.waiters import Waiters
from netclaw.sessions._subscribers import Subscriber
from netclaw.spend import DailySpend

log = logging.getLogger(__name__)


class Recovering:
    """Before the journal is read. Nothing reaches a session then: the actor builds it
    and calls :meth:`Session.recovered` before anything else."""

    phase: ClassVar[Phase] = Phase.RECOVERING

    def entered(self, core: Core) -> Activity:
        return self

    def handle(self, core: Core, command: cmd.Command) -> Activity:
        return self

    def interrupted(self, core: Core) -> Activity:
        return self

    def stopping(self, core: Core) -> None:
        pass


class Session:
    def __init__(
        self, session_id: str, env: SessionEnv, *, resumed_at: float | None = None, held: bool = False
    ) -> None:
        self._id = session_id
        self._env = env
        self._produced: list[fx.Effect] = []
        self._state = SessionState(session_id)
        self.has_memory = env.has_memory  # a memory store exists: recall, extraction at passivation
        self.context = ModelContext(session_id, env.live, env.tools, env.skills)
        self.timers = Timers(self.emit)
        self._waiters = Waiters()
        self._watchers: set[str] = set()
        self._resumed_at = resumed_at  # warmed after a graceful restart: tell the model once
        self._held = held  # warmed at start-up: recovered, but going on only when released
        self.leaving = False  # handed off: no new turn starts; it stops once nothing runs
        self.snapshot_seq = 0
        self._ops = 0
        self.activity: Activity = Recovering()

    # -- the shell's entry points: each returns what it decided, for the shell to carry out --------

    def recovered(self, state: SessionState) -> list[fx.Effect]:
        """Recovery is done (the shell read the journal): ready, then resume what was
        interrupted unless held."""
        self._state = state
        self.snapshot_seq = state.seq
        self.context.recovered(state)
        if state.summary_failures:
            self.emit(fx.CompactionHealth(state.summary_failures))
        self._become(Idle())
        if state.reports_owed:  # a sub-agent's answers its parent has not admitted: take them there
            self.emit(fx.ReplyOwed())
        if not self._held:
            self._become(Idle("go_on"))
        return self._decided()

    def handle(self, command: cmd.Command) -> list[fx.Effect]:
        """Decide what ``command`` means; the effects, in the order they are to be carried out."""
        if isinstance(command, cmd.Routed) and not isinstance(command, cmd.PassivateNow):
            self._become(self.activity.interrupted(self))  # anything routed here aborts passivation
        self._dispatch(command)
        return self._decided()

    def stopping(self, error: NetclawError, unfinished: Sequence[fx.Effect] = ()) -> list[fx.Effect]:
        """The actor stops or broke: every caller still waiting is answered with ``error``,
        and so is every one whose answer was decided but never carried out — ``unfinished``
        (what the shell did not carry out after a write that failed), and what a command
        that raised had decided before it did."""
        undone = [*self._produced, *unfinished]
        self._produced = []
        self.activity.stopping(self)
        self._produced += self._waiters.refuse_all(error)
        for effect in undone:
            if isinstance(effect, fx.Answer):
                self.emit(fx.Refuse(effect.reply, error))
            elif isinstance(effect, fx.Refuse):
                self.emit(effect)
        return self._decided()

    @property
    def phase(self) -> Phase:
        return self.activity.phase

    def _decided(self) -> list[fx.Effect]:
        produced, self._produced = self._produced, []
        return produced

    # -- dispatch ---------------------------------------------------------------------------------

    def _dispatch(self, command: cmd.Command) -> None:  # noqa: C901 - one case per command
        match command:
            case cmd.SendUserMessage():
                self._admit(command)
            case cmd.Subscribe(sub_id=sub_id, filter=mask, sink=sink):
                self._watchers.add(sub_id)
                self.emit(fx.Attach(Subscriber(sub_id, mask, sink)))
                self.emit(fx.SendTo(sub_id, greeting(self._state, self.phase)))
            case cmd.Unsubscribe(sub_id=sub_id) | res.SubscriberLeft(sub_id=sub_id):
                if isinstance(command, cmd.Unsubscribe):
                    self.emit(fx.Detach(sub_id))
                self._watchers.discard(sub_id)
                self.arm_idle()
            case (
                cmd.ReportStatus()
                | cmd.ListApprovals()
                | cmd.MarkDelivered()
                | cmd.ListUndelivered()
                | cmd.OwedReports()
                | cmd.ListChildren()
            ):
                answers.handle(self, command)
            case cmd.PinModel():
                models.pin(self, command)
            case cmd.SetVoice():
                voice.choose(self, command)
            case res.Spoken():  # the turn that spoke is over: the session takes its audio
                voice.spoken(self, command)
            case cmd.Announce(text=text, kind=kind):
                self.publish(out.Notice(session_id=self._id, text=text, kind=kind))
            case cmd.Decide(reply=reply):
                decided = decisions.decide(self, command)
                if decided is not None:  # recorded: the activity goes on (a turn runs its round)
                    self._delegate(command)
                    self.answer(reply, decided)
            case cmd.RecordSpawn() | cmd.DetachChild():
                subagents.handle(self, command)
            case cmd.Release():
                if self._held:
                    self._held = False
                    self._delegate(command)
            case cmd.HandOff():
                self.leaving = True
                self._delegate(command)  # idle: it departs now; else once what runs is over
            case cmd.Shutdown():
                self.emit(fx.Stop())
            case res.MemoriesSaved(through_turn=through, count=count):  # recorded, even if woken meanwhile
                self.persist(MemoriesExtracted(through, count))
                log.info("%s: %d memories saved at passivation", self._id, count)
                self._delegate(command)
            case cmd.Cancel(by=by) | cmd.Reset(by=by):  # the sub-agents stop too
                subagents.cancel_children(self, by)
                self._delegate(command)
            case (
                cmd.CompactNow()
                | cmd.PassivateNow()
                | cmd.ConfirmStop()
                | res.Recalled()
                | res.Transcribed()
                | res.ProviderDeltas()
                | res.ProviderDone()
                | res.CompactionDone()
                | res.ExtractionDone()
                | res.OpFailed()
                | res.ToolsDone()
                | res.ToolEvent()
                | res.IdleTick()
                | res.GraceElapsed()
                | res.TurnTimeout()
                | res.ApprovalsDue()
            ):
                self._delegate(command)
            case _:
                assert_never(command)

    def _delegate(self, command: cmd.Command) -> None:
        self._become(self.activity.handle(self, command))

    def _admit(self, send: cmd.SendUserMessage) -> None:
        free = self.phase is Phase.READY and not self._held
        if admission.admit(self, send, self._waiters, may_start=free):
            self._become(self.active_turn())

    # -- changes of activity: the one way -----------------------------------------------------------

    def _become(self, after: Activity) -> None:
        """Make ``after`` current and enter it, then what entering it returned, until one
        stays; every change of phase on the way is checked and announced, in order."""
        while after is not self.activity:
            old, new = self.activity.phase, after.phase
            if new is not old:
                try:
                    check_transition(old, new)
                except NetclawError:
                    log.exception("%s: refused phase change", self._id)
                    raise
                self.publish(out.Phase(session_id=self._id, from_=old.value, to=new.value))
                self.emit(fx.PhaseChanged(new))
            self.activity = after
            after = after.entered(self)

    # -- what activities see (Core) -----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._id

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def spend(self) -> DailySpend:
        return self._env.spend

    def may_recall(self, audience: str) -> bool:
        return self._env.may_recall(audience)

    def idle(self) -> bool:
        return self.phase is Phase.READY and not self._state.inbox and not self._watchers

    def now(self) -> float:
        return self._env.clock()

    def monotonic(self) -> float:
        return self._env.monotonic()

    def random_hex(self, digits: int) -> str:
        return self._env.random_hex(digits)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self._env.random_hex(20)}"  # the form of every message id (messages.new_id)

    def known_secrets(self) -> Scrubber:
        return self._env.known_secrets()

    # -- effects: decided here, carried out by the shell --------------------------------------------

    def emit(self, effect: fx.Effect) -> None:
        self._produced.append(effect)

    def persist(self, *events: SessionEvent) -> None:
        """Fold ``events`` into the state, and have the shell journal them. The shell carries
        the effects out in order; a write that fails ends the command there (nothing decided
        after it is carried out) and the actor is replaced by one recovered from the journal,
        so this state, then ahead of the journal, is never used."""
        now = self.now()
        state = self._state
        for event in events:
            state = state.apply(event, state.seq + 1, now)
        self._state = state
        self.emit(fx.Persist(events, state))

    def record(self, step: Step) -> None:
        """Persist a step's events, then tell subscribers what happened."""
        self.persist(*step.events)
        self.publish(*step.outputs)

    def publish(self, *outputs: out.Output) -> None:
        if outputs:
            self.emit(fx.Publish(outputs))

    def answer(self, reply: Reply[Any], value: object) -> None:
        self.emit(fx.Answer(reply, value))

    def new_op(self) -> int:
        self._ops += 1
        return self._ops

    def snapshot(self, *, wait: bool = False) -> None:
        self.emit(fx.Snapshot(self._state, wait))
        self.snapshot_seq = self._state.seq

    def resolve_waiters(self, message_id: str) -> None:
        self._produced += self._waiters.resolve(self._state, message_id)

    def take_continuity(self) -> float | None:
        """When a restart interrupted this session, once (for the model's next request)."""
        stopped_at, self._resumed_at = self._resumed_at, None
        if stopped_at is not None:
            self.emit(fx.ContinuityDelivered())
        return stopped_at

    def reset_context(self, by: str) -> None:
        """The model-visible context starts empty (the transcript and memories are kept)."""
        self.persist(SessionReset(by))
        self.context.reset()
        self.publish(out.SessionReset(session_id=self._id, by=by))

    def arm_idle(self) -> None:
        self.timers.arm(self.idle(), self.settings.session.idle_timeout_s)

    # -- the activities it builds (an activity returns one; _become enters it) -----------------------

    def compaction(
        self, decision: ladder.Compact, *, resume: Suspended | None = None, reply: Reply[str] | None = None
    ) -> Activity:
        return Compacting.planned(self, decision, resume=resume, reply=reply)

    def compaction_due(self, resume: Suspended | None) -> Activity | None:
        """After a tool round, a turn or at recovery: compact when the provider's last count
        crossed the threshold."""
        decision = self.context.compaction_due(self._state)
        return self.compaction(decision, resume=resume) if isinstance(decision, ladder.Compact) else None

    def passivation(self, grace_s: float) -> Activity:
        """Idle and unwatched: extract memories during the grace period, snapshot, stop."""
        return Passivating(grace_s)

    def departure(self) -> Activity:
        """Handed off and nothing runs: stop now (no grace, no extraction — its next node
        has the journal); subscribers end quietly and follow the session."""
        self.emit(fx.CloseSubscribers())
        self._watchers.clear()
        return Passivating(0.0, extract=False)

    def turn_ended(self, *, then: cmd.Reset | None = None) -> Activity:
        # Once the reply is out: serialising a long session is not free, and nobody waits for it.
        state = self._state
        if snapshots.due(
            state.seq - self.snapshot_seq, self.settings.session.snapshot_interval, len(state.transcript)
        ):
            self.snapshot()
        return Idle("go_on", then)

    def back_to_idle(self, entry: IdleEntry = "next", *, then: cmd.Reset | None = None) -> Activity:
        return Idle(entry, then)

    def next_turn(self) -> Activity | None:
        """The turn to run now: one a restart interrupted (unless held), else the next queued
        message's, recorded as started; None when there is none."""
        state = self._state
        if state.active is not None:
            if self._held:
                return None
            log.info("%s: resuming turn %d interrupted by a restart", self._id, state.active.turn)
            return self.active_turn()
        if not state.inbox:
            return None
        self.persist(TurnStarted(state.turns + 1, state.inbox[0].id))
        return self.active_turn()

    def active_turn(self) -> Activity:
        """The active turn (just recorded as started, or recovered), ready to be entered:
        its settings and tools picked up, its timer started."""
        active = self._state.active
        assert active is not None  # called after TurnStarted (or recovery) made one active
        context = self.context
        speaker = self._state.find_message(active.message_id)  # whose turn it is decides its tools
        context.refresh(self._state, speaker.speaker_role if speaker is not None else None)
        self.timers.start_turn(active.turn, self.settings.session.turn_timeout_s)
        chosen = context.chosen(self._state)  # a turn resumed on a fallback started on this
        return Turn(
            TurnRun(
                turn=active.turn,
                message_id=active.message_id,
                iteration=active.steps,
                started=self.monotonic(),
                model=context.model.model,
                model_name=context.model_name,
                tried=list(dict.fromkeys((chosen, context.model_name))),
            )
        )
