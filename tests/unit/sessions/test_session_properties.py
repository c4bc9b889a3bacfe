"""Invariants of the pure session under any interleaving of commands (hypothesis):
the phase is always the current activity's and only changes along legal transitions;
every admitted message starts exactly one turn, in the order it was admitted; every turn
is recorded exactly once; and every caller's reply is answered."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netclaw.errors import ContextOverflow, ProviderUnavailable
from netclaw.sessions._core.activities.turning import Turn
from netclaw.sessions._core.commands import Cancel, CompactNow, Decide, PassivateNow, Reset, Unsubscribe
from netclaw.sessions._core.compaction import CompactionOutcome
from netclaw.sessions._core.effects import (
    Answer,
    CallModel,
    Refuse,
    RunCompaction,
    RunExtraction,
    RunTools,
    StartTimer,
    Stop,
    TimerKind,
)
from netclaw.sessions._core.journal.events import InputAdmitted, TurnRecorded, TurnStarted
from netclaw.sessions._core.phases import LEGAL_TRANSITIONS, Phase
from netclaw.sessions._core.results import CompactionDone, ExtractionDone, GraceElapsed, OpFailed, TurnTimeout
from tests.unit.sessions.harness import Driver, tool_call

Step = Callable[[Driver], None]


def _latest_op(d: Driver, kind: type) -> int | None:
    found = [e for e in d.effects if isinstance(e, kind)]
    return found[-1].op_id if found else None  # type: ignore[attr-defined]


def send(d: Driver) -> None:
    d.send(f"message {len(d.effects)}")


def answer(d: Driver) -> None:
    if isinstance(d.session.activity, Turn) and d.session.activity.in_flight:
        d.answer("an answer")


def answer_with_tools(d: Driver) -> None:
    if isinstance(d.session.activity, Turn) and d.session.activity.in_flight:
        d.answer(calls=[tool_call("current_time", d.call_id()), tool_call("deploy", d.call_id())])


def tools_done(d: Driver) -> None:
    if _latest_op(d, RunTools) is not None:
        d.tools_done()


def overflow(d: Driver) -> None:
    op = _latest_op(d, CallModel)
    if op is not None:
        d.handle(OpFailed(op, ContextOverflow("too long")))


def provider_down(d: Driver) -> None:
    op = _latest_op(d, CallModel)
    if op is not None:
        d.handle(OpFailed(op, ProviderUnavailable("down")))


def compaction_done(d: Driver) -> None:
    op = _latest_op(d, RunCompaction)
    if op is not None:
        d.handle(CompactionDone(op, CompactionOutcome(None, 0, True, "summary failed")))


def approve(d: Driver) -> None:
    pending = d.state.pending_round
    if pending is not None and pending.open:
        d.handle(Decide(pending.open[0].id, "approve", "ana", None, d.reply()))


def cancel(d: Driver) -> None:
    d.handle(Cancel(d.reply(), by="user"))


def reset(d: Driver) -> None:
    d.handle(Reset(by="user", reply=d.reply()))


def compact_now(d: Driver) -> None:
    d.handle(CompactNow(d.reply()))


def idle_tick(d: Driver) -> None:
    ticks = [e.message for e in d.effects if isinstance(e, StartTimer) and e.kind is TimerKind.IDLE]
    for tick in ticks[-1:]:
        d.handle(tick)  # type: ignore[arg-type]


def passivate_now(d: Driver) -> None:
    d.handle(PassivateNow())


def extraction_done(d: Driver) -> None:
    op = _latest_op(d, RunExtraction)
    if op is not None:
        d.handle(ExtractionDone(op, []))


def grace(d: Driver) -> None:
    d.handle(GraceElapsed(d.session.timers.epoch))


def timeout(d: Driver) -> None:
    d.handle(TurnTimeout(d.state.turns))


def watch(d: Driver) -> None:
    d.subscribe("w")


def unwatch(d: Driver) -> None:
    d.handle(Unsubscribe("w"))


STEPS: list[Step] = [
    send,
    send,
    answer,
    answer,
    answer_with_tools,
    tools_done,
    overflow,
    provider_down,
    compaction_done,
    approve,
    cancel,
    reset,
    compact_now,
    idle_tick,
    passivate_now,
    extraction_done,
    grace,
    timeout,
    watch,
    unwatch,
]


def _finish(d: Driver) -> None:
    """Answer whatever is in flight until the session rests."""
    for _ in range(200):
        activity = d.session.activity
        if d.phase is Phase.COMPACTING:
            compaction_done(d)
        elif isinstance(activity, Turn):
            if d.state.pending_round is not None and d.state.pending_round.open:
                approve(d)
            elif activity.in_flight and _latest_op(d, RunTools) == activity.run.op_id:
                tools_done(d)
            else:
                answer(d)
        elif d.phase is Phase.PASSIVATING or d.state.inbox:
            send(d)  # wakes it (and queues one more to answer)
        else:
            return
    raise AssertionError("the session never came to rest")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(STEPS), max_size=40))
def test_any_interleaving_keeps_the_phase_legal_and_handles_each_input_once_in_order(
    steps: list[Step],
) -> None:
    d = Driver(has_memory=True, audiences={"personal": {"approve": ["deploy"]}})
    try:
        for step in steps:
            if any(isinstance(e, Stop) for e in d.effects):
                break  # the actor would stop here
            step(d)
            assert d.phase is d.session.activity.phase
        if not any(isinstance(e, Stop) for e in d.effects):
            _finish(d)
        phases = [(o.from_, o.to) for o in d.outputs() if o.event == "phase"]  # type: ignore[union-attr]
        for old, new in phases:
            assert Phase(new) in LEGAL_TRANSITIONS[Phase(old)]
        events = d.events()
        admitted = [e.message.id for e in events if isinstance(e, InputAdmitted)]
        started = [e.message_id for e in events if isinstance(e, TurnStarted)]
        recorded = [e.turn for e in events if isinstance(e, TurnRecorded)]
        assert started == admitted[: len(started)]  # once each, in order
        if not any(isinstance(e, Stop) for e in d.effects):
            assert started == admitted  # nothing left behind
        assert recorded == sorted(set(recorded))  # each turn recorded once
        answered = [e.reply for e in d.effects if isinstance(e, Answer | Refuse)]
        assert len(answered) == len({id(r) for r in answered})  # no reply answered twice
    finally:
        d.close()
