"""Carrying a session's effects out: the journal (the one blocking call), the
subscribers' sinks, work on the I/O loop, timers, the manager and metrics.

This is the imperative half of the actor (:mod:`netclaw.sessions._shell.actor`): it holds what the pure
session must not — the recorder, the sinks, the loop futures of ops in flight, the
timer handles — and does exactly what each effect says, once, in the order the session
decided them (:meth:`Effector.carry_out`).

What it learns that the session must hear goes back to it as a command: a subscriber
found gone (``SubscriberLeft``), work that could not even start on the loop (``OpFailed``,
as if it had failed there; a recall that cannot start finds nothing, as one that fails
does). Any other failure raises — a journal write that fails above all: the session
already counts on what it wrote, and only the journal, the durable truth, can say what
holds now. The effects after it are then not carried out (:attr:`Effector.unfinished`
keeps them): the actor breaks, answers every caller they owed and the command's own, and
the manager recovers a fresh actor from the journal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import assert_never

from netclaw.errors import SessionUnavailable
from netclaw.messages import Transcript
from netclaw.process.runtime import Cancellable, Reply, Tellable, Timer
from netclaw.sessions._core.commands import Cancel, Command
from netclaw.sessions._core.effects import (
    Answer,
    AskToStop,
    Attach,
    CallModel,
    CancelOp,
    CancelSessions,
    Charge,
    CloseSubscribers,
    CompactionHealth,
    ContinuityDelivered,
    Detach,
    Effect,
    Measure,
    Persist,
    PhaseChanged,
    Publish,
    Recall,
    Refuse,
    ReplyOwed,
    RunCompaction,
    RunExtraction,
    RunTools,
    SaveMemories,
    SendTo,
    Snapshot,
    Speak,
    StartTimer,
    Stop,
    StopTimer,
    TimerKind,
    Transcribe,
)
from netclaw.sessions._core.journal.events import SessionEvent
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.results import (
    CompactionDone,
    ExtractionDone,
    MemoriesSaved,
    OpFailed,
    ProviderDone,
    Recalled,
    Spoken,
    SubscriberLeft,
    ToolsDone,
    Transcribed,
)
from netclaw.sessions._shell import loop_ops as ops
from netclaw.sessions._shell.deps import ManagerPort, SessionDeps, SessionRef
from netclaw.sessions._shell.recorder import Recorder
from netclaw.sessions._shell.tool_port import SessionToolPort
from netclaw.sessions._shell.tracer import TurnTracer
from netclaw.sessions._subscribers import SubscriberSet
from netclaw.spend import Spent

log = logging.getLogger(__name__)

_FINAL = (
    Recalled,
    Transcribed,
    ProviderDone,
    ToolsDone,
    CompactionDone,
    ExtractionDone,
    MemoriesSaved,
    OpFailed,
)


class Effector:
    def __init__(
        self, session_id: str, deps: SessionDeps, ref: SessionRef, stop: Callable[[], object]
    ) -> None:
        self._id = session_id
        self._deps = deps
        self._ref: Tellable = ref
        self._stop = stop
        self.actor_ref = ref
        self.recorder = Recorder(deps.io, deps.journal)
        self.tracer = TurnTracer(session_id, deps.tracing, deps.live, deps.metrics)
        self.state: SessionState | None = None  # as last written (or recovered)
        self.subscribers = SubscriberSet()
        self._timers: dict[TimerKind, Timer] = {}
        self._ops: dict[int, Cancellable] = {}
        self._left: list[str] = []  # subscribers found gone while outputs were offered
        self.received = 0  # routed commands received (compared with the manager's count)
        self.unfinished: tuple[Effect, ...] = ()  # after a failure: what was not carried out

    def carry_out(self, effects: Sequence[Effect]) -> list[Command]:
        """Carry ``effects`` out, once each, in order; what the session must hear of it, as
        commands to hand it next. Raises on any other failure, leaving the effects after
        the one that failed in :attr:`unfinished`."""
        self.unfinished = ()
        back: list[Command] = []
        for at, effect in enumerate(effects):
            try:
                self(effect)
            except Exception as exc:
                failed = _not_started(effect, exc)
                if failed is None:  # a journal write above all: the actor breaks (see above)
                    self.unfinished = tuple(effects[at + 1 :])
                    raise
                log.warning("%s: work could not start: %r", self._id, exc)
                back.append(failed)
            except BaseException:
                self.unfinished = tuple(effects[at + 1 :])
                raise
        back += [SubscriberLeft(sub_id) for sub_id in self.take_left()]
        return back

    def __call__(self, effect: Effect) -> None:  # noqa: C901 - one case per effect
        deps, io = self._deps, self._deps.io
        match effect:  # tried in order: what every turn does (some 20 effects) comes first
            case Persist(events=events, state=state):
                self._persist(events, state)
            case Measure():
                self._measure(effect)
            case Publish(outputs=outputs):
                for output in outputs:
                    self._left += self.subscribers.publish(output)
            case Answer(reply=reply, value=value):
                reply.resolve(value)
            case StartTimer(kind=kind, delay_s=delay_s, message=message):
                self._cancel_timer(kind)
                self._timers[kind] = Timer(io, delay_s, self._ref, message)
            case StopTimer(kind=kind):
                self._cancel_timer(kind)
            case PhaseChanged(phase=phase):
                io.call(deps.manager.phase_changed, self._id, self.actor_ref, phase)
            case Charge(day=day, model=charged, tokens=tokens, cost=cost):
                deps.ledger.add(day, Spent(tokens, cost))
                if deps.metrics is not None and cost:
                    deps.metrics.cost.labels(charged).inc(cost)
            case CallModel(op_id=op_id, provider=name):
                span = self.tracer.model_call(effect, self.state)
                provider = deps.provider_of(name)
                ended, metrics = self.tracer.ended_call, deps.metrics
                subscribers = self.subscribers
                self._ops[op_id] = ops.call_model(
                    io, self._ref, effect, provider, span, ended, metrics, lambda: subscribers.streams_text
                )
            case Snapshot(state=state, wait=wait):
                self.recorder.snapshot(state, wait=wait)
            case SendTo(sub_id=sub_id, outputs=outputs):
                if not all(self.subscribers.send_to(sub_id, output) for output in outputs):
                    self._left.append(sub_id)
            case Attach(subscriber=subscriber):
                self.subscribers.add(subscriber)
            case Detach(sub_id=sub_id):
                self.subscribers.remove(sub_id)
            case CloseSubscribers():
                self.subscribers.close_all()
            case Refuse(reply=reply, error=error):
                reply.fail(error)
            case Recall(op_id=op_id):
                assert deps.memory is not None  # recall runs only with a memory store
                self._ops[op_id] = ops.recall(io, self._ref, effect, deps.memory)
            case Transcribe(op_id=op_id):
                span = self.tracer.transcription(effect)
                self._ops[op_id] = ops.transcribe(io, self._ref, effect, deps.speech, deps.metrics, span)
            case Speak():  # outlives the turn that asked: no op of it to cancel
                data_dir = deps.live.current.data_dir
                ops.speak(io, self._ref, effect, deps.speech, deps.metrics, data_dir, self._id)
            case RunTools(op_id=op_id, context=context, model=name):
                # What the round's tools may ask of the session (progress, a person, sampling
                # with the model the turn is on).
                settings = deps.live.current
                model = settings.models.get(name) or settings.models.main
                port = SessionToolPort(
                    session_id=self._id,
                    audience=context.audience,
                    turn=context.turn or 0,
                    actor=self.actor_ref,
                    questions=deps.questions,
                    provider=deps.provider_of(model.provider),
                    model=model,
                    settings=settings,
                )
                bound = replace(effect, context=replace(context, session=port))
                self._ops[op_id] = ops.run_tools(io, self._ref, bound, deps.tools, self.tracer.turn)
            case RunCompaction(op_id=op_id, plan=plan):
                provider = deps.provider_of(plan.model.provider)
                span = self.tracer.compaction(effect)
                self._ops[op_id] = ops.compact(io, self._ref, effect, provider, deps.memory, span)
            case RunExtraction(op_id=op_id, plan=plan):
                provider = deps.provider_of(plan.model.provider)
                self._ops[op_id] = ops.extract(io, self._ref, effect, provider, deps.memory)
            case SaveMemories(op_id=op_id):
                assert deps.memory is not None  # extraction runs only with a memory store
                self._ops[op_id] = ops.save_memories(io, self._ref, effect, deps.memory)
            case CancelOp(op_id=op_id):
                future = self._ops.pop(op_id, None)
                if future is not None:
                    future.cancel()
            case AskToStop(epoch=epoch):
                io.call(deps.manager.stop_requested, self._id, self.actor_ref, self.received, epoch)
            case ReplyOwed():
                io.call(deps.manager.reply_owed, self._id)
            case CancelSessions(session_ids=ids, by=by):
                io.call(_cancel_all, deps.manager, ids, by)
            case ContinuityDelivered():
                io.call(deps.manager.continuity_delivered, self._id, self.actor_ref)
            case CompactionHealth(failures=failures):
                io.call(deps.manager.compaction_health, self._id, failures)
            case Stop():
                self._stop()
            case _:
                assert_never(effect)

    def settled(self, command: object) -> None:
        """An op's last word arrived: forget its future."""
        if isinstance(command, _FINAL):
            self._ops.pop(command.op_id, None)

    def take_left(self) -> list[str]:
        left, self._left = self._left, []
        return left

    def close(self) -> None:
        """The actor stops or broke: timers off, work in flight cancelled, streams ended."""
        for kind in list(self._timers):
            self._cancel_timer(kind)
        for future in self._ops.values():
            future.cancel()
        self._ops.clear()
        self.subscribers.close_all()
        self.tracer.close()

    def _persist(self, events: tuple[SessionEvent, ...], state: SessionState) -> None:
        span = self.tracer.journal(events)
        try:
            self.recorder.write(state, events)
        except BaseException as exc:
            span.fail(exc)
            raise
        finally:
            span.end()
        self.state = state
        self.tracer.persisted(events)

    def _cancel_timer(self, kind: TimerKind) -> None:
        timer = self._timers.pop(kind, None)
        if timer is not None:
            timer.cancel()

    def _measure(self, effect: Measure) -> None:
        metrics = self._deps.metrics
        if metrics is None:
            return
        value, label = effect.value, effect.label
        match effect.metric:
            case "turns":
                metrics.turns.labels(label).inc(value)
            case "turn_seconds":
                metrics.turn_seconds.observe(value)
            case "tokens":
                metrics.tokens.labels(label).inc(value)
            case "compactions":
                metrics.compactions.labels(label).inc(value)
            case "trims":
                metrics.trims.inc(value)
            case "approvals_pending":
                metrics.approvals_pending.inc(value)
            case "speech_audio_seconds":
                metrics.speech_audio_seconds.labels(label).inc(value)


def _not_started(effect: Effect, error: Exception) -> Command | None:
    """What the session is told when ``effect``'s work could not start (None: not work)."""
    match effect:
        case Recall(op_id=op_id):
            return Recalled(op_id, None)  # as a recall that fails: never a failed turn
        case Speak(turn=turn):
            return Spoken(turn, None, error=f"the speech could not start ({type(error).__name__}: {error})")
        case Transcribe(op_id=op_id, files=files):  # as a transcription that fails: people are told
            why = f"the transcription could not start ({type(error).__name__}: {error})"
            return Transcribed(op_id, tuple((i, Transcript(error=why)) for i, _ in files))
        case (
            CallModel(op_id=op_id)
            | RunTools(op_id=op_id)
            | RunCompaction(op_id=op_id)
            | RunExtraction(op_id=op_id)
            | SaveMemories(op_id=op_id)
        ):
            return OpFailed(op_id, error)
        case _:
            return None


def _cancel_all(manager: ManagerPort, session_ids: tuple[str, ...], by: str) -> None:
    """On the loop: cancel each session's running turn (nobody waits for the answers)."""
    for session_id in session_ids:
        try:
            manager.route(session_id, Cancel(Reply(), by))
        except SessionUnavailable:  # shutting down: the children stop with everything else
            return
