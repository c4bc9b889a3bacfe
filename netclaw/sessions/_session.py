"""The session: one conversation's state and what it is doing, as a pure function of the
commands it receives — no threads, no I/O, no waiting.

:meth:`Session.handle` takes a command and produces effects (:mod:`._effects`) that the
actor carries out as they come. The current activity (:mod:`._core`) does what the
command means there and says what comes next; what outlives an activity — admission,
subscribers, the timers, the callers waiting, the changes of activity — lives here.
Tests drive it directly (``tests/unit/sessions/``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import NetclawError
from netclaw.runtime import Reply
from netclaw.sessions import _admission as admission
from netclaw.sessions import _answers as answers
from netclaw.sessions import _commands as cmd
from netclaw.sessions import _decisions as decisions
from netclaw.sessions import _effects as fx
from netclaw.sessions import _ladder as ladder
from netclaw.sessions import _models as models
from netclaw.sessions import _results as res
from netclaw.sessions import _subagents as subagents
from netclaw.sessions._compacting import Compacting
from netclaw.sessions._context import ModelContext, SessionEnv
from netclaw.sessions._core import Activity, Suspended
from netclaw.sessions._events import (
    MemoriesExtracted,
    SessionEvent,
    SessionReset,
    TurnStarted,
)
from netclaw.sessions._idle import Idle
from netclaw.sessions._passivating import Passivating
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._state import SessionState
from netclaw.sessions._status import greeting
from netclaw.sessions._subscribers import Subscriber
from netclaw.sessions._timers import Timers
from netclaw.sessions._turn import Step, TurnRun
from netclaw.sessions._turning import Turn
from netclaw.sessions._waiters import Waiters
from netclaw.spend import DailySpend

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        session_id: str,
        env: SessionEnv,
        carry_out: Callable[[fx.Effect], None],
        *,
        resumed_at: float | None = None,
        held: bool = False,
    ) -> None:
        self._id = session_id
        self._env = env
        self._carry_out = carry_out
        self._produced: list[fx.Effect] = []
        self._state = SessionState(session_id)
        self._phases = PhaseMachine()
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
        self.activity: Activity = Idle()

    # -- the shell's entry points -----------------------------------------------------------------

    def recovered(self, state: SessionState) -> list[fx.Effect]:
        """Recovery is done (the shell read the journal): ready, then resume what was
        interrupted unless held."""
        self._produced = []
        self._state = state
        self.snapshot_seq = state.seq
        self.context.recovered(state)
        if state.summary_failures:
            self.emit(fx.CompactionHealth(state.summary_failures))
        self.enter(Idle())
        if state.reports_owed:  # a sub-agent's answers its parent has not admitted: take them there
            self.emit(fx.ReplyOwed())
        if not self._held:
            self._go_on()
        return self._produced

    def handle(self, command: cmd.Command) -> list[fx.Effect]:
        """Carry out ``command``; returns the effects it produced (already handed over)."""
        self._produced = []
        routed = isinstance(command, cmd.Routed) and not isinstance(command, cmd.PassivateNow)
        if routed and isinstance(self.activity, Passivating):  # anything routed here aborts it
            self.activity.abort(self)
            self.enter(Idle())
            self._arm_idle()
        self._dispatch(command)
        return self._produced

    def stopping(self, error: NetclawError) -> list[fx.Effect]:
        """The actor stops or broke: every caller still waiting is answered."""
        self._produced = []
        if isinstance(self.activity, Compacting):
            self.activity.abandon(self)
        self._emit_all(self._waiters.refuse_all(error))
        return self._produced

    @property
    def phase(self) -> Phase:
        return self._phases.phase

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
                self._arm_idle()
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
            case cmd.Announce(text=text, kind=kind):
                self.publish(out.Notice(session_id=self._id, text=text, kind=kind))
            case cmd.Decide(reply=reply):
                decided = decisions.decide(self, command)
                if decided is not None and isinstance(self.activity, Turn):  # held: runs when it goes on
                    self.enter(self.activity.decided(self))
                if decided is not None:
                    self.answer(reply, decided)
            case cmd.RecordSpawn() | cmd.DetachChild():
                subagents.handle(self, command)
            case cmd.Release():
                if self._held:
                    self._go_on()
            case cmd.HandOff():
                self.leaving = True
                if isinstance(self.activity, Idle):
                    self.enter(self._depart())
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
        after = self.activity.handle(self, command)
        if after is not self.activity:
            self.enter(after)

    def _admit(self, send: cmd.SendUserMessage) -> None:
        free = isinstance(self.activity, Idle) and not self._held
        if admission.admit(self, send, self._waiters, may_start=free):
            self._begin_turn()

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

    def now(self) -> float:
        return self._env.clock()

    def idle(self) -> bool:
        return isinstance(self.activity, Idle) and not self._state.inbox and not self._watchers

    # -- effects ----------------------------------------------------------------------------------

    def emit(self, effect: fx.Effect) -> None:
        self._produced.append(effect)
        self._carry_out(effect)

    def _emit_all(self, effects: Sequence[fx.Effect]) -> None:
        for effect in effects:
            self.emit(effect)

    def persist(self, *events: SessionEvent) -> None:
        now = self.now()
        state = self._state
        for event in events:
            state = state.apply(event, state.seq + 1, now)
        self.emit(fx.Persist(events, state))  # raises if the write failed: the state stays as it was
        self._state = state

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
        self._emit_all(self._waiters.resolve(self._state, message_id))

    def take_continuity(self) -> float | None:
        """When a restart interrupted this session, once (for the model's next request)."""
        stopped_at, self._resumed_at = self._resumed_at, None
        if stopped_at is not None:
            self.emit(fx.ContinuityDelivered())
        return stopped_at

    # -- changes of activity ----------------------------------------------------------------------

    def enter(self, activity: Activity) -> None:
        """Make ``activity`` the current one; a change of phase is checked and announced."""
        old, new = self._phases.phase, activity.phase
        self.activity = activity
        if new is old:
            return
        try:
            self._phases.transition_to(new)
        except NetclawError:
            log.exception("%s: refused phase change", self._id)
            raise
        self.publish(out.Phase(session_id=self._id, from_=old.value, to=new.value))
        self.emit(fx.PhaseChanged(new))

    def begin_compaction(
        self, decision: ladder.Compact, *, resume: Suspended | None = None, reply: Reply[str] | None = None
    ) -> Activity:
        compacting = Compacting.planned(self, decision, resume=resume, reply=reply)
        self.enter(compacting)
        return compacting.begin(self)

    def compact_if_due(self, resume: Suspended | None) -> Activity | None:
        """After a tool round, a turn or at recovery: compact when the provider's last count
        crossed the threshold."""
        decision = self.context.compaction_due(self._state)
        if isinstance(decision, ladder.Compact):
            return self.begin_compaction(decision, resume=resume)
        return None

    def begin_passivation(self, grace_s: float) -> Activity:
        """Idle and unwatched: extract memories during the grace period, snapshot, stop."""
        passivating = Passivating()
        self.enter(passivating)
        return passivating.begin(self, grace_s)

    def turn_ended(self, *, go_on: bool) -> Activity:
        # Once the reply is out: serialising a long session is not free, and nobody waits for it.
        if self._state.seq - self.snapshot_seq >= self.settings.session.snapshot_interval:
            self.snapshot()
        return self.back_to_idle(go_on=go_on)

    def back_to_idle(self, *, go_on: bool) -> Activity:
        self.enter(Idle())
        if not go_on:
            return self.activity
        if self.leaving:  # handed off: its next node compacts and runs what is queued
            return self._depart()
        return self.compact_if_due(None) or self.start_next_turn()

    def start_next_turn(self) -> Activity:
        state = self._state
        if self.leaving and isinstance(self.activity, Idle):
            return self._depart()
        if isinstance(self.activity, Idle) and state.active is None and state.inbox:
            self.persist(TurnStarted(state.turns + 1, state.inbox[0].id))
            return self._begin_turn()
        self._arm_idle()
        return self.activity

    def _depart(self) -> Activity:
        """Handed off and nothing runs: stop now (no grace, no extraction — its next node
        has the journal); subscribers end quietly and follow the session."""
        self.emit(fx.CloseSubscribers())
        self._watchers.clear()
        passivating = Passivating()
        self.enter(passivating)
        return passivating.begin(self, 0.0, extract=False)

    def reset_context(self, by: str) -> Activity:
        """The model-visible context starts empty (the transcript and memories are kept);
        queued messages go on afterwards."""
        self.persist(SessionReset(by))
        self.context.reset()
        self.publish(out.SessionReset(session_id=self._id, by=by))
        return self.start_next_turn()

    def _begin_turn(self) -> Activity:
        active = self._state.active
        assert active is not None  # called after TurnStarted (or recovery) made one active
        context = self.context
        speaker = self._state.find_message(active.message_id)  # whose turn it is decides its tools
        context.refresh(self._state, speaker.speaker_role if speaker is not None else None)
        self.timers.start_turn(active.turn, self.settings.session.turn_timeout_s)
        chosen = context.chosen(self._state)  # a turn resumed on a fallback started on this
        run = TurnRun(
            turn=active.turn,
            message_id=active.message_id,
            iteration=active.steps,
            started=time.monotonic(),
            model=context.model.model,
            model_name=context.model_name,
            tried=list(dict.fromkeys((chosen, context.model_name))),
        )
        started = Turn(run)
        self.enter(started)
        self.context.new_turn()
        return started.start(self)

    def _go_on(self) -> Activity:
        """After recovery: resume an interrupted turn, finish a compaction, or take the next
        queued message."""
        self._held = False
        active = self._state.active
        if active is not None:
            log.info("%s: resuming turn %d interrupted by a restart", self._id, active.turn)
            return self._begin_turn()
        return self.compact_if_due(None) or self.start_next_turn()

    # -- upkeep -------------------------------------------------------------------------------------

    def _arm_idle(self) -> None:
        self.timers.arm(self.idle(), self.settings.session.idle_timeout_s)
