"""The session: one conversation's state and what it is doing, as a pure function of the
commands it receives — no threads, no I/O, no waiting.

:meth:`Session.handle` takes a command and produces effects (:mod:`._effects`): events
to persist, outputs to publish, work to start on the I/O loop, timers, answers. The
actor (:mod:`._actor`) carries them out as they come. A session is always in one
activity — :class:`~._idle.Idle`, :class:`~._turning.Turn`,
:class:`~._compacting.Compacting` or :class:`~._passivating.Passivating` — whose
``handle`` does what the command means there and says which activity comes next; what
every activity shares (admission, subscribers, approvals' decisions, the ladder, the
timers, the callers waiting) lives here. Tests drive it directly
(``tests/unit/sessions/``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from netclaw import outputs as out
from netclaw.config import LiveSettings, Settings
from netclaw.errors import ApprovalError, IdempotencyKeyReused, NetclawError
from netclaw.history import TrimResult
from netclaw.llm import Completion, ToolSchema
from netclaw.policy import Audience, allowed_tools, audience_of, memory_scope_of, recall_scope
from netclaw.runtime import Reply
from netclaw.sessions import _ladder as ladder
from netclaw.sessions import _turn as turn
from netclaw.sessions._approvals import check_decision, pending_json, request_outputs
from netclaw.sessions._commands import (
    Admission,
    Announce,
    ApprovalsDue,
    Cancel,
    Command,
    CompactionDone,
    CompactNow,
    ConfirmStop,
    Decide,
    ExtractionDone,
    GraceElapsed,
    IdleTick,
    ListApprovals,
    ListUndelivered,
    MarkDelivered,
    MemoriesSaved,
    OpFailed,
    PassivateNow,
    ProviderDeltas,
    ProviderDone,
    Release,
    ReportStatus,
    Reset,
    Routed,
    SendUserMessage,
    Shutdown,
    Subscribe,
    SubscriberLeft,
    ToolsDone,
    TurnTimeout,
    Unsubscribe,
)
from netclaw.sessions._compacting import Compacting
from netclaw.sessions._compaction import plan_compaction
from netclaw.sessions._core import Activity, Suspended
from netclaw.sessions._effects import (
    Answer,
    Attach,
    ContinuityDelivered,
    Detach,
    Effect,
    Measure,
    Persist,
    PhaseChanged,
    Publish,
    Refuse,
    SendTo,
    Snapshot,
    Stop,
)
from netclaw.sessions._events import (
    ApprovalDecided,
    ApprovalRequest,
    Decision,
    MemoriesExtracted,
    ReplyDelivered,
    SessionEvent,
    SessionReset,
    TurnStarted,
)
from netclaw.sessions._extraction import plan_extraction
from netclaw.sessions._idle import Idle
from netclaw.sessions._passivating import Passivating
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._prompt import Prompt, PromptBuilder
from netclaw.sessions._state import SessionState
from netclaw.sessions._status import status_report
from netclaw.sessions._subscribers import Subscriber
from netclaw.sessions._timers import Timers
from netclaw.sessions._turn import Step, TurnRun
from netclaw.sessions._turning import Turn
from netclaw.sessions._waiters import Waiters
from netclaw.toolspec import ToolContext

log = logging.getLogger(__name__)


class ToolCatalog(Protocol):
    """The tools on offer (the registry: built-ins and the MCP servers' current tools)."""

    def schemas(self, allowed: Sequence[str] | None = None) -> list[ToolSchema]: ...


@dataclass(frozen=True, slots=True)
class SessionEnv:
    """What a session reads from the daemon (nothing it could block on)."""

    live: LiveSettings
    tools: ToolCatalog
    has_memory: bool  # a memory store exists: recall, extraction at passivation
    clock: Callable[[], float] = time.time


class Session:
    def __init__(
        self,
        session_id: str,
        env: SessionEnv,
        carry_out: Callable[[Effect], None],
        *,
        resumed_at: float | None = None,
        held: bool = False,
    ) -> None:
        self._id = session_id
        self._env = env
        self._carry_out = carry_out
        self._produced: list[Effect] = []
        self._settings = env.live.current
        self._state = SessionState(session_id)
        self._phases = PhaseMachine()
        self._prompts = PromptBuilder(self._settings.agent.system_prompt, self._settings.trim_budget_tokens)
        self._ladder = ladder.Ladder()
        self._audience: Audience = audience_of(session_id, self._settings)
        self._allowed: tuple[str, ...] | None = None
        self._timers = Timers(self.emit)
        self._waiters = Waiters()
        self._watchers: set[str] = set()
        self._resumed_at = resumed_at  # warmed after a graceful restart: tell the model once
        self._held = held  # warmed at start-up: recovered, but going on only when released
        self._snapshot_seq = 0
        self._ops = 0
        self.activity: Activity = Idle()

    # -- the shell's entry points -----------------------------------------------------------------

    def recovered(self, state: SessionState) -> list[Effect]:
        """Recovery is done (the shell read the journal): ready, then resume what was
        interrupted unless held."""
        self._produced = []
        self._state = state
        self._snapshot_seq = state.seq
        self._place_changed()
        self._ladder = ladder.Ladder(last_input_tokens=state.last_input_tokens)
        self.enter(Idle())
        if not self._held:
            self._go_on()
        return self._produced

    def handle(self, command: Command) -> list[Effect]:
        """Carry out ``command``; returns the effects it produced (already handed over)."""
        self._produced = []
        activity = self.activity
        routed = isinstance(command, Routed) and not isinstance(command, PassivateNow)
        if routed and isinstance(activity, Passivating):  # anything routed here aborts it
            activity.abort(self)
            self.enter(Idle())
            self._arm_idle()
        self._dispatch(command)
        return self._produced

    def stopping(self, error: NetclawError) -> list[Effect]:
        """The actor stops or broke: every caller still waiting is answered (with ``error``,
        or that a compaction it asked for was abandoned)."""
        self._produced = []
        if isinstance(self.activity, Compacting):
            self.activity.abandon(self)
        self._emit_all(self._waiters.refuse_all(error))
        return self._produced

    @property
    def phase(self) -> Phase:
        return self._phases.phase

    # -- dispatch ---------------------------------------------------------------------------------

    def _dispatch(self, command: Command) -> None:  # noqa: C901 - one case per command
        match command:
            case SendUserMessage():
                self._admit(command)
            case Subscribe(sub_id=sub_id, filter=mask, sink=sink):
                self._watchers.add(sub_id)
                self.emit(Attach(Subscriber(sub_id, mask, sink)))
                joined = out.Joined(
                    session_id=self._id,
                    title=self._state.title,
                    turns=self._state.turns,
                    phase=self.phase.value,
                )
                pending = self._state.pending_round  # a newcomer sees what waits for a decision
                shown = request_outputs(self._id, pending) if pending is not None else []
                self.emit(SendTo(sub_id, (joined, *shown)))
            case Unsubscribe(sub_id=sub_id) | SubscriberLeft(sub_id=sub_id):
                if isinstance(command, Unsubscribe):
                    self.emit(Detach(sub_id))
                self._watchers.discard(sub_id)
                self._arm_idle()
            case ReportStatus(reply=reply):
                report = status_report(self._state, self.phase, self._prompts, self.tools(), self._settings)
                self.answer(reply, report)
            case Announce(text=text, kind=kind):
                self.publish(out.Notice(session_id=self._id, text=text, kind=kind))
            case Decide():
                self._decide(command)
            case ListApprovals(reply=reply):
                pending = self._state.pending_round
                self.answer(reply, pending_json(pending) if pending is not None else [])
            case MarkDelivered(turn=delivered, message_ids=ids, reply=reply):
                owed = delivered in self._state.undelivered
                if owed:
                    self.persist(ReplyDelivered(delivered, ids))
                self.answer(reply, owed)
            case ListUndelivered(reply=reply):
                self.answer(reply, self._undelivered())
            case Release():
                if self._held:
                    self._go_on()
            case Shutdown():
                self.emit(Stop())
            case MemoriesSaved(through_turn=through, count=count):  # recorded, even if woken meanwhile
                self.persist(MemoriesExtracted(through, count))
                log.info("%s: %d memories saved at passivation", self._id, count)
                self._delegate(command)
            case (
                Cancel()
                | Reset()
                | CompactNow()
                | PassivateNow()
                | ConfirmStop()
                | ProviderDeltas()
                | ProviderDone()
                | CompactionDone()
                | ExtractionDone()
                | OpFailed()
                | ToolsDone()
                | IdleTick()
                | GraceElapsed()
                | TurnTimeout()
                | ApprovalsDue()
            ):
                self._delegate(command)
            case _:
                assert_never(command)

    def _delegate(self, command: Command) -> None:
        after = self.activity.handle(self, command)
        if after is not self.activity:
            self.enter(after)

    def _admit(self, send: SendUserMessage) -> None:
        state, now = self._state, self.now()
        known = state.seen(send.identity, now) if send.identity else None
        if known is not None:
            first = state.find_message(known)
            if first is not None and first.content != send.text:
                reused = IdempotencyKeyReused(f"{send.identity} was first used for a different message")
                self.emit(Refuse(send.ack, reused))
                return
            self.answer(send.ack, Admission(self._id, known, duplicate=True))
            if send.done is not None:
                self._emit_all(self._waiters.add(state, known, send.done))
            return
        start = (
            isinstance(self.activity, Idle) and state.active is None and not state.inbox and not self._held
        )
        message, events = turn.admitted(state, send, start=start)
        self.persist(*events)  # a failed write ends here: the shell refuses the ack
        if send.place is not None:  # a DM's sender may decide the audience
            self._place_changed()
        self.answer(send.ack, Admission(self._id, message.id, duplicate=False))
        if send.done is not None:
            self._emit_all(self._waiters.add(self._state, message.id, send.done))
        if start:
            self._begin_turn()

    def _decide(self, command: Decide) -> None:
        approvers = self._settings.audience(self._audience).approvers
        try:
            request, decision = check_decision(
                self._state,
                command.approval_id,
                command.decision,
                command.by,
                approvers=approvers,
                approver=command.approver,
            )
        except (ApprovalError, ValueError) as exc:
            self.emit(Refuse(command.reply, exc))
            return
        self.settle(request, decision, command.by)
        if isinstance(self.activity, Turn):  # a held session runs the round when it goes on
            self.enter(self.activity.decided(self))
        self.answer(command.reply, decision)

    # -- what activities see (Core) -----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._id

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def audience(self) -> Audience:
        return self._audience

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self._allowed

    @property
    def has_memory(self) -> bool:
        return self._env.has_memory

    @property
    def prompts(self) -> PromptBuilder:
        return self._prompts

    @property
    def timers(self) -> Timers:
        return self._timers

    @property
    def snapshot_seq(self) -> int:
        return self._snapshot_seq

    def now(self) -> float:
        return self._env.clock()

    def tools(self) -> list[ToolSchema]:
        return self._env.tools.schemas(self._allowed)

    def tool_context(self, turn: int | None) -> ToolContext:
        place = self._state.place
        return ToolContext(
            self._id,
            self._audience,
            turn,
            scope=memory_scope_of(self._id, place),
            recall_scope=recall_scope(self._id, self._audience, self._settings, place),
            recall=self._settings.audience(self._audience).memory_scope != "none",
        )

    def budget(self) -> ladder.Budget:
        return ladder.budget_of(self._settings, self._prompts.calibration.ratio)

    def idle(self) -> bool:
        return isinstance(self.activity, Idle) and not self._state.inbox and not self._watchers

    # -- effects ----------------------------------------------------------------------------------

    def emit(self, effect: Effect) -> None:
        self._produced.append(effect)
        self._carry_out(effect)

    def _emit_all(self, effects: Sequence[Effect]) -> None:
        for effect in effects:
            self.emit(effect)

    def persist(self, *events: SessionEvent) -> None:
        now = time.time()
        state = self._state
        for event in events:
            state = state.apply(event, state.seq + 1, now)
        self.emit(Persist(events, state))  # raises if the write failed: the state stays as it was
        self._state = state

    def record(self, step: Step) -> None:
        """Persist a step's events, then tell subscribers what happened."""
        self.persist(*step.events)
        self.publish(*step.outputs)

    def publish(self, *outputs: out.Output) -> None:
        if outputs:
            self.emit(Publish(outputs))

    def answer(self, reply: Reply[Any], value: object) -> None:
        self.emit(Answer(reply, value))

    def new_op(self) -> int:
        self._ops += 1
        return self._ops

    def snapshot(self, *, wait: bool = False) -> None:
        self.emit(Snapshot(self._state, wait))
        self._snapshot_seq = self._state.seq

    def resolve_waiters(self, message_id: str) -> None:
        self._emit_all(self._waiters.resolve(self._state, message_id))

    # -- the context ladder -------------------------------------------------------------------------

    def before_call(self, prompt: Prompt) -> ladder.Send | ladder.Compact:
        trim = prompt.trim
        decision, self._ladder = ladder.before_call(
            self._ladder,
            seq=self._state.seq,
            untrimmed_estimate=trim.tokens_before if trim is not None else prompt.estimate,
            trim=trim,
            turns=self._state.turns,
            budget=self.budget(),
        )
        return decision

    def observe_usage(self, estimate: int, completion: Completion) -> None:
        reported = completion.usage.input_tokens if completion.usage is not None else None
        if reported is not None:
            self._prompts.observe_usage(estimate, reported)
        self._ladder = ladder.observe(self._ladder, reported_input_tokens=reported)

    def on_overflow(self, error: str) -> ladder.Compact | ladder.Trim | ladder.Fail:
        decision, self._ladder = ladder.on_overflow(self._ladder, turns=self._state.turns, error=error)
        return decision

    def after_compaction(
        self, *, forced: bool, summary_failed: bool, freed_nothing: bool
    ) -> ladder.Trim | ladder.Proceed:
        decision, self._ladder = ladder.after_compaction(
            self._ladder,
            seq=self._state.seq,
            turns=self._state.turns,
            forced=forced,
            summary_failed=summary_failed,
            freed_nothing=freed_nothing,
        )
        return decision

    def record_trim(self, trim: TrimResult, reason: str) -> None:
        """Never silent: journal it, tell every subscriber, log one line."""
        event, output = turn.trim_step(self._id, trim, reason)
        self.persist(event)
        self.emit(Measure("trims", 1))
        log.info("%s: history_trimmed %s", self._id, json.dumps(event.to_payload(), sort_keys=True))
        self.publish(output)

    def take_continuity(self) -> float | None:
        """When a restart interrupted this session, once (for the model's next request)."""
        stopped_at, self._resumed_at = self._resumed_at, None
        if stopped_at is not None:
            self.emit(ContinuityDelivered())
        return stopped_at

    def settle(self, request: ApprovalRequest, decision: Decision, by: str) -> None:
        """Journal one decision (before anything runs) and tell people."""
        self.persist(ApprovalDecided(request.id, decision, by))
        self.emit(Measure("approvals_pending", -1))
        log.info("%s: %s %s (%s) by %s", self._id, decision, request.tool, request.id, by)
        self.publish(
            out.ApprovalDecided(session_id=self._id, approval_id=request.id, decision=decision, by=by)
        )

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
        self.emit(PhaseChanged(new))

    def begin_compaction(
        self, decision: ladder.Compact, *, resume: Suspended | None = None, reply: Reply[str] | None = None
    ) -> Activity:
        start = plan_compaction(
            self._state,
            self._prompts,
            self.tools(),
            self._settings,
            threshold_tokens=self.budget().threshold_tokens,
            audience=self._audience,
            forced=decision.forced,
            summarise=decision.summarise,
        )
        compacting = Compacting(self.new_op(), start, resume, decision.forced, reply)
        self.enter(compacting)
        return compacting.begin(self)

    def compact_if_due(self, resume: Suspended | None) -> Activity | None:
        """After a tool round, a turn or at recovery: compact when the provider's last count
        crossed the threshold."""
        decision = ladder.compaction_due(self._ladder, turns=self._state.turns, budget=self.budget())
        if isinstance(decision, ladder.Compact):
            return self.begin_compaction(decision, resume=resume)
        return None

    def begin_passivation(self, grace_s: float) -> Activity:
        """Idle and unwatched: extract memories during the grace period, snapshot, stop."""
        passivating = Passivating()
        self.enter(passivating)
        plan = None
        if self._env.has_memory:
            model = self._settings.compaction_model
            plan = plan_extraction(self._state, audience=self._audience, model=model, grace_s=grace_s)
        return passivating.begin(self, grace_s, plan)

    def turn_ended(self, *, go_on: bool) -> Activity:
        # Once the reply is out: serialising a long session is not free, and nobody waits for it.
        if self._state.seq - self._snapshot_seq >= self._settings.session.snapshot_interval:
            self.snapshot()
        return self.back_to_idle(go_on=go_on)

    def back_to_idle(self, *, go_on: bool) -> Activity:
        self.enter(Idle())
        if not go_on:
            return self.activity
        return self.compact_if_due(None) or self.start_next_turn()

    def start_next_turn(self) -> Activity:
        state = self._state
        if isinstance(self.activity, Idle) and state.active is None and state.inbox:
            self.persist(TurnStarted(state.turns + 1, state.inbox[0].id))
            return self._begin_turn()
        self._arm_idle()
        return self.activity

    def reset_context(self, by: str) -> Activity:
        """The model-visible context starts empty (the transcript and memories are kept);
        queued messages go on afterwards."""
        self.persist(SessionReset(by))
        self._ladder = ladder.Ladder()
        self.publish(out.SessionReset(session_id=self._id, by=by))
        return self.start_next_turn()

    def _begin_turn(self) -> Activity:
        active = self._state.active
        assert active is not None  # called after TurnStarted (or recovery) made one active
        self._refresh_settings()
        self._timers.start_turn(active.turn, self._settings.session.turn_timeout_s)
        run = TurnRun(
            turn=active.turn,
            message_id=active.message_id,
            iteration=active.steps,
            started=time.monotonic(),
            model=self._settings.models.main.model,
        )
        started = Turn(run)
        self.enter(started)
        self._ladder = self._ladder.new_turn()
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
        self._timers.arm(self.idle(), self._settings.session.idle_timeout_s)

    def _refresh_settings(self) -> None:
        """Pick up a config reload at a turn boundary (SIGHUP applies to running sessions)."""
        current = self._env.live.current
        if current is self._settings:
            return
        self._settings = current
        self._place_changed()
        self._prompts.system_prompt = current.agent.system_prompt
        self._prompts.budget = current.trim_budget_tokens

    def _place_changed(self) -> None:
        """The audience follows the settings and where the session lives (a DM's sender)."""
        self._audience = audience_of(self._id, self._settings, self._state.place)
        allowed = allowed_tools(self._audience, self._settings)
        self._allowed = None if allowed is None else tuple(allowed)

    def _undelivered(self) -> list[tuple[int, str, float]]:
        owed = []
        for turn_no, message_id in sorted(self._state.undelivered.items()):
            message = self._state.find_message(message_id)
            if message is not None:
                owed.append((turn_no, message.content, message.ts))
        return owed
