"""The session actor: one pykka thread per resident session.

It owns the session's state and phase, processes one turn at a time, and does no I/O
itself: provider and tool work runs on the I/O loop and comes back as messages carrying
an op id (anything else is stale and dropped). The one blocking call it makes is persist
(:mod:`._recorder`) — wait for the journal's durable ack before applying events — so
what it acknowledges is never lost.

This module is the pykka shell: start-up and recovery, dispatch, admission, control
(reset) and failure. The turn is :mod:`._turn_flow`'s, tool calls waiting for people
:mod:`._approval_flow`'s, compaction :mod:`._compaction_flow`'s, passivation
:mod:`._passivation`'s; what they share is
:mod:`._core`'s. What to do about the prompt's size is the pure context ladder's
(:mod:`._ladder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pykka

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import (
    ApprovalError,
    ContextOverflow,
    IdempotencyKeyReused,
    JournalError,
    LeaseLost,
    OutcomeUnknown,
    ProviderError,
    SessionMoved,
    SessionOwnedElsewhere,
    SessionUnavailable,
)
from netclaw.policy import allowed_tools, audience_of
from netclaw.sessions import _commands as cmd
from netclaw.sessions import _ladder as ladder
from netclaw.sessions import _turn as turn
from netclaw.sessions._approval_flow import ApprovalFlow, request_outputs
from netclaw.sessions._clock import SessionClock
from netclaw.sessions._compaction import CompactionRun
from netclaw.sessions._compaction_flow import CompactionFlow
from netclaw.sessions._deps import SessionDeps
from netclaw.sessions._events import ReplyDelivered, SessionReset
from netclaw.sessions._extraction import Extraction
from netclaw.sessions._passivation import PassivationFlow
from netclaw.sessions._phases import Phase, PhaseMachine
from netclaw.sessions._prompt import PromptBuilder
from netclaw.sessions._recorder import Recorder
from netclaw.sessions._recovery import recover_state
from netclaw.sessions._state import SessionState
from netclaw.sessions._status import status_report
from netclaw.sessions._subscribers import Subscriber, SubscriberSet, Waiters
from netclaw.sessions._turn import TurnRun
from netclaw.sessions._turn_flow import TurnFlow

log = logging.getLogger(__name__)

RECOVERY_TIMEOUT_S = 60.0


class SessionActor(TurnFlow, ApprovalFlow, CompactionFlow, PassivationFlow, pykka.ThreadingActor):
    def __init__(
        self, session_id: str, deps: SessionDeps, resumed_at: float | None = None, *, held: bool = False
    ) -> None:
        super().__init__()
        self.resumed_at = resumed_at  # warmed after a graceful restart: tell the model once
        self.held = held  # warmed at start-up: recovered, but going on only when released
        self.leaving = False  # handed off (HandOff): no new turn; stops once nothing runs
        self.session_id = session_id
        self.deps = deps
        self.settings: Settings = deps.live.current
        self.state = SessionState(session_id)
        self.phases = PhaseMachine()
        self.subscribers = SubscriberSet()
        self.recorder = Recorder(deps.io, deps.journal)
        self.clock = SessionClock(deps.io, self.actor_ref)
        self.ladder = ladder.Ladder()
        self.prompts: PromptBuilder | None = None  # built on the actor's thread (on_start)
        self.audience = audience_of(session_id, self.settings)
        self.allowed_tools = allowed_tools(self.audience, self.settings)  # None: every tool
        self.run: TurnRun | None = None
        self.compacting: CompactionRun | None = None
        self.extraction: Extraction | None = None  # memories being extracted at passivation
        self.grace_over = False
        self.waiters = Waiters()
        self.received = 0  # routed commands received (compared with the manager's count)
        self.broken: str | None = None
        self.lease: int | None = None  # the epoch of this node's claim, once recovered
        self.moved = False  # broken because another node owns the session: it answers
        self._op_counter = 0

    def on_start(self) -> None:
        with self.deps.io.batched():
            self._starting()

    def _starting(self) -> None:
        # on_start failures call neither on_failure nor on_stop in pykka: catch them here and
        # stay alive in a "broken" mode that fails whatever was routed to us, until retired.
        try:
            self.prompts = PromptBuilder(self.settings.agent.system_prompt, self.settings.trim_budget_tokens)
            self._recover()
        except Exception as exc:  # noqa: BLE001 - any failure leaves us broken, visibly
            self._break(f"recovery failed: {exc}", exc)

    def on_receive(self, message: object) -> None:
        with self.deps.io.batched():  # one loop wake-up for what this message hands the loop
            self._receiving(message)

    def _receiving(self, message: object) -> None:
        if isinstance(message, cmd.Routed):
            self.received += 1
        if self.broken is not None:
            self._refuse(message)
            return
        try:
            self._dispatch(message)
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a BaseException stops ALL actors
            # Keep pykka out of it (it would stop us with commands still queued, leaving their
            # callers hanging). Fail what waits on us; the manager retires us and recovers a
            # fresh actor from the journal.
            self._break(f"{type(exc).__name__}: {exc}", exc)

    def on_stop(self) -> None:
        with self.deps.io.batched():
            self._stopping()

    def _stopping(self) -> None:
        self.subscribers.close_all()
        self.clock.cancel()
        self._abandon_compaction()
        if self.extraction is not None:
            self.extraction.future.cancel()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        # Handed off: a reply waited for comes from the session's next node (SessionMoved).
        stopped = (
            SessionMoved(self.session_id)
            if self.leaving
            else SessionUnavailable(f"session {self.session_id} stopped")
        )
        self.waiters.fail_all(stopped)
        with contextlib.suppress(RuntimeError):  # the loop is gone: so is the manager
            if self.lease is not None:  # after what we queued: another node may take it then
                self.deps.io.call(self.deps.journal.release, self.session_id, self.lease)
            self.deps.io.call(self.deps.manager.actor_stopped, self.session_id, self.actor_ref)

    def _dispatch(self, message: object) -> None:  # noqa: C901 - one case per message type
        passivating = self.phases.phase is Phase.PASSIVATING
        if passivating and isinstance(message, cmd.Routed) and not isinstance(message, cmd.PassivateNow):
            self._set_phase(Phase.READY)  # anything routed to us aborts passivation
        match message:
            case cmd.SendUserMessage():
                self._admit(message)
            case cmd.Subscribe(sub_id=sub_id, filter=mask, sink=sink):
                self.subscribers.add(Subscriber(sub_id, mask, sink))
                joined = out.Joined(
                    session_id=self.session_id,
                    title=self.state.title,
                    turns=self.state.turns,
                    phase=self.phases.phase.value,
                )
                self.subscribers.send_to(sub_id, joined)
                if self.state.pending_round is not None:  # a newcomer sees what waits for a decision
                    for request in request_outputs(self.session_id, self.state.pending_round):
                        self.subscribers.send_to(sub_id, request)
            case cmd.Unsubscribe(sub_id=sub_id):
                self.subscribers.remove(sub_id)
                self._arm_idle()
            case cmd.Cancel(reply=reply, by=by):
                reply.resolve(self._cancel(by))
            case cmd.Reset(by=by, reply=reply):
                self._reset(by)
                reply.resolve(None)
            case cmd.CompactNow(reply=reply):
                self._compact_now(reply)
            case cmd.ReportStatus(reply=reply):
                assert self.prompts is not None
                reply.resolve(
                    status_report(self.state, self.phases.phase, self.prompts, self._tools(), self.settings)
                )
            case cmd.Announce(text=text, kind=kind):
                self._publish(out.Notice(session_id=self.session_id, text=text, kind=kind))
            case cmd.Decide(approval_id=aid, decision=decision, by=by, approver=approver, reply=reply):
                try:
                    reply.resolve(self._decide(aid, decision, by, approver))
                except (ApprovalError, ValueError) as exc:
                    reply.fail(exc)
            case cmd.ListApprovals(reply=reply):
                reply.resolve(self._open_approvals())
            case cmd.MarkDelivered(turn=delivered, message_ids=ids, reply=reply):
                owed = delivered in self.state.undelivered
                if owed:
                    self._persist(ReplyDelivered(delivered, ids))
                reply.resolve(owed)
            case cmd.ListUndelivered(reply=reply):
                reply.resolve(self._undelivered())
            case cmd.ApprovalsDue(turn=due_turn):
                self._on_approvals_due(due_turn)
            case cmd.Release():
                if self.held:
                    self._go_on()
            case cmd.HandOff():
                self._leave()
            case cmd.PassivateNow():
                if self._idle():
                    self._begin_passivation(grace=0.0)
                elif self.phases.phase is Phase.PASSIVATING:
                    # Already on our way out (our own idle timer): the manager saw this very
                    # message in flight and declined our stop; ask again, now that it arrived.
                    self._passivation_step()
            case cmd.ProviderDeltas(op_id=op_id, deltas=deltas):
                if self._current(op_id):
                    self._show_deltas(deltas)
            case cmd.ProviderDone(op_id=op_id, completion=completion, deltas=deltas):
                if self._current(op_id):
                    self._show_deltas(deltas)
                    self._on_completion(completion)
            case cmd.ToolsDone(op_id=op_id, results=results):
                if self._current(op_id):
                    self._on_tool_results(results)
            case cmd.CompactionDone(op_id=op_id, outcome=outcome):
                if self.compacting is not None and self.compacting.op_id == op_id:
                    self._finish_compaction(self.compacting, outcome)
            case cmd.ExtractionDone(op_id=op_id, observations=observations):
                if self.extraction is not None and self.extraction.op_id == op_id:
                    self._record_extraction(self.extraction.plan, observations)
            case cmd.OpFailed(op_id=op_id, error=error):
                self._on_op_failed(op_id, error)
            case cmd.TurnTimeout(turn=timed_out):
                if self.run is not None and self.run.turn == timed_out:
                    limit = self.settings.session.turn_timeout_s
                    self._fail_turn(
                        "turn_timeout", f"the turn took longer than {limit:g}s and was stopped", "timed_out"
                    )
            case cmd.IdleTick(epoch=epoch):
                if self.clock.current(epoch) and self._idle():
                    self._begin_passivation(grace=self.settings.session.passivation_grace_s)
            case cmd.GraceElapsed(epoch=epoch):
                if self.clock.current(epoch) and self.phases.phase is Phase.PASSIVATING:
                    self.grace_over = True
                    self._passivation_step()
            case cmd.ConfirmStop(epoch=epoch):
                if self.clock.current(epoch) and self.phases.phase is Phase.PASSIVATING:
                    self.stop()
            case cmd.Shutdown():
                self.stop()
            case _:
                log.warning("%s: ignoring unknown message %r", self.session_id, message)

    def _recover(self) -> None:
        started = time.perf_counter()
        # I/O on the loop; decoding and the fold here, on our own thread.
        state, saved_rows, self.lease = recover_state(
            self.deps.io, self.deps.journal, self.session_id, RECOVERY_TIMEOUT_S
        )
        self.state = state
        self.recorder.snapshot_rows = min(saved_rows, len(state.transcript))
        self._place_changed()
        self.recorder.snapshot_seq = state.seq
        self.ladder = ladder.Ladder(last_input_tokens=state.last_input_tokens)
        self._set_phase(Phase.READY)
        elapsed_ms = (time.perf_counter() - started) * 1000
        log.debug("%s: recovered at seq %d in %.1f ms", self.session_id, state.seq, elapsed_ms)
        if not self.held:
            self._go_on()

    def _go_on(self) -> None:
        """After recovery: resume an interrupted turn, finish a compaction, or take the next
        queued message."""
        self.held = False
        state = self.state
        if state.active is not None:
            log.info("%s: resuming turn %d interrupted by a restart", self.session_id, state.active.turn)
            self._begin_turn()
        elif not self._compact_if_due(resume_turn=False):  # e.g. a crash mid-compaction
            self._start_next_turn()

    def _admit(self, send: cmd.SendUserMessage) -> None:
        now = time.time()
        known = self.state.seen(send.identity, now) if send.identity else None
        if known is not None:
            first = self.state.find_message(known)
            if first is not None and first.content != send.text:
                send.ack.fail(IdempotencyKeyReused(f"{send.identity} was first used for a different message"))
                return
            send.ack.resolve(cmd.Admission(self.session_id, known, duplicate=True))
            if send.done is not None:
                self.waiters.add(self.state, known, send.done)
            return
        start = (
            self.phases.phase is Phase.READY
            and self.state.active is None
            and not self.state.inbox
            and not self.held
        )
        message, events = turn.admitted(self.state, send, start=start)
        try:
            self._persist(*events)
        except OutcomeUnknown as exc:
            send.ack.fail(OutcomeUnknown(str(exc), identity=send.identity))
            raise
        except Exception as exc:
            send.ack.fail(exc)  # not durable, so not acknowledged
            raise
        if send.place is not None:  # a DM's sender may decide the audience
            self._place_changed()
        send.ack.resolve(cmd.Admission(self.session_id, message.id, duplicate=False))
        if send.done is not None:
            self.waiters.add(self.state, message.id, send.done)
        if start:
            self._begin_turn()

    def _on_op_failed(self, op_id: int, error: BaseException) -> None:
        if self.extraction is not None and self.extraction.op_id == op_id:
            # Logged and let go: passivation goes on without the observations.
            log.warning("%s: memory extraction at passivation failed: %r", self.session_id, error)
            self.extraction = None
            self._passivation_step()
        elif self.compacting is not None and self.compacting.op_id == op_id:
            log.error("%s: compaction failed: %r", self.session_id, error)
            self._finish_compaction(self.compacting, None, note=f"compaction failed: {error}")
        elif not self._current(op_id):
            return
        elif isinstance(error, ContextOverflow):
            self._on_overflow(error)
        elif isinstance(error, ProviderError):
            self._fail_turn(error.code, str(error), "failed")
        else:
            log.error("%s: turn work failed: %r", self.session_id, error)
            self._fail_turn("internal", f"the turn failed unexpectedly: {type(error).__name__}", "failed")

    def _undelivered(self) -> list[tuple[int, str, float]]:
        owed = []
        for turn_no, message_id in sorted(self.state.undelivered.items()):
            message = self.state.find_message(message_id)
            if message is not None:
                owed.append((turn_no, message.content, message.ts))
        return owed

    def _reset(self, by: str) -> None:
        """The model-visible context starts empty (a running turn is cancelled first, and its
        leftovers stay out of the new context); queued messages go on afterwards."""
        self._cancel(by, go_on=False)
        if self.compacting is not None:  # a compaction between turns: its result is moot
            self._abandon_compaction()
            self._set_phase(Phase.READY)
        self._persist(SessionReset(by))
        self.ladder = ladder.Ladder()
        self._publish(out.SessionReset(session_id=self.session_id, by=by))
        self._start_next_turn()

    def _break(self, reason: str, exc: BaseException) -> None:
        # Owned by another node now: input goes there, nothing here to restart.
        moved = isinstance(exc, LeaseLost | SessionOwnedElsewhere)
        # A journal failure was already reported by the journal, plainly: no traceback here.
        quiet = isinstance(exc, JournalError | SessionOwnedElsewhere)
        log.log(
            logging.INFO if moved else logging.ERROR,
            "%s: session actor failed: %s",
            self.session_id,
            reason,
            exc_info=None if quiet else exc,
        )
        self.broken = reason
        self.moved = moved
        self.clock.cancel()
        if self.run is not None and self.run.future is not None:
            self.run.future.cancel()
        self.run = None
        # Moved: the session's new node runs what was admitted; a reply waited for comes from there.
        failed = (
            SessionMoved(self.session_id, reason)
            if moved
            else SessionUnavailable(f"session {self.session_id} failed: {reason}")
        )
        self.waiters.fail_all(failed)
        if not moved:  # moved: the owner answers (a chat's reply comes from its outbox there)
            self.subscribers.publish(
                out.Error(session_id=self.session_id, code="session_failed", message=reason)
            )
        self.subscribers.close_all()
        self.deps.io.call(self.deps.manager.actor_failed, self.session_id, self.actor_ref, reason, moved)

    def _refuse(self, message: object) -> None:
        """Broken: whatever reaches us before we are retired gets an answer, never silence."""
        if isinstance(message, cmd.Shutdown | cmd.ConfirmStop):
            self.stop()
            return
        reason = f"session {self.session_id} is unavailable: {self.broken}"
        notice = (
            None
            if self.moved
            else out.Error(session_id=self.session_id, code="session_failed", message=reason)
        )
        # Moved: another node owns the session, nothing was done here: it may go there.
        error = SessionMoved(self.session_id, str(self.broken)) if self.moved else SessionUnavailable(reason)
        cmd.refuse(message, error, notice)
