"""Idle and passivation, through the pure session: the idle timeout, memory extraction in
the grace period, the snapshot, the manager's confirmation — and everything that aborts
or defers it."""

from __future__ import annotations

from netclaw.sessions._core.commands import ConfirmStop, PassivateNow, Unsubscribe
from netclaw.sessions._core.effects import (
    AskToStop,
    CallModel,
    CancelOp,
    RunExtraction,
    SaveMemories,
    Snapshot,
    StartTimer,
    Stop,
    TimerKind,
)
from netclaw.sessions._core.journal.events import MemoriesExtracted
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import ExtractionDone, GraceElapsed, IdleTick, MemoriesSaved
from tests.unit.sessions.harness import Driver


def _idle_tick(d: Driver) -> IdleTick:
    timer = [e for e in d.effects if isinstance(e, StartTimer) and e.kind is TimerKind.IDLE][-1]
    assert isinstance(timer.message, IdleTick)
    return timer.message


def _talked(d: Driver) -> None:
    d.send("I like green tea")
    d.answer("Noted.")


def test_idle_then_grace_then_extraction_then_a_snapshot_then_the_stop() -> None:
    d = Driver(has_memory=True)
    _talked(d)
    d.handle(_idle_tick(d))
    assert d.phase is Phase.PASSIVATING
    extraction = d.pending(RunExtraction)
    assert extraction.plan.through_turn == 1
    grace = [e for e in d.effects if isinstance(e, StartTimer) and e.kind is TimerKind.IDLE][-1]
    assert isinstance(grace.message, GraceElapsed)
    assert not any(isinstance(e, AskToStop) for e in d.handle(grace.message))  # extraction runs
    effects = d.handle(ExtractionDone(extraction.op_id, [("likes green tea", "preference")]))
    save = d.pending(SaveMemories)
    assert save.observations == (("likes green tea", "preference"),)
    assert not any(isinstance(e, AskToStop) for e in effects)
    effects = d.handle(MemoriesSaved(save.op_id, 1, 1))
    assert d.events(effects) == [MemoriesExtracted(1, 1)]
    kinds = [type(e) for e in effects]
    assert kinds.index(Snapshot) < kinds.index(AskToStop)
    ask = d.pending(AskToStop)
    assert d.handle(ConfirmStop(ask.epoch - 1)) == []  # an older generation's: stale
    assert Stop() in d.handle(ConfirmStop(ask.epoch))
    d.close()


def test_a_message_during_passivation_aborts_it_and_runs() -> None:
    d = Driver(has_memory=True)
    _talked(d)
    d.handle(_idle_tick(d))
    extraction = d.pending(RunExtraction)
    _, effects = d.send("one more thing")
    assert CancelOp(extraction.op_id) in effects
    assert d.phase is Phase.PROCESSING
    d.recalled(None)
    assert [m.content for m in d.pending(CallModel).request.messages if m.is_real_user][
        -1
    ] == "one more thing"
    # The stale extraction result changes nothing.
    assert d.handle(ExtractionDone(extraction.op_id, [("x", "fact")])) == []
    d.close()


def test_memories_saved_after_a_wake_up_are_still_recorded() -> None:
    d = Driver(has_memory=True)
    _talked(d)
    d.handle(_idle_tick(d))
    d.handle(ExtractionDone(d.pending(RunExtraction).op_id, [("likes tea", "preference")]))
    save = d.pending(SaveMemories)
    d.send("wake up")
    effects = d.handle(MemoriesSaved(save.op_id, 1, 1))
    assert d.events(effects) == [MemoriesExtracted(1, 1)]
    assert d.phase is Phase.PROCESSING and not any(isinstance(e, AskToStop) for e in effects)
    d.close()


def test_a_watched_session_does_not_passivate_until_the_watcher_leaves() -> None:
    d = Driver()
    d.subscribe("s1")
    tick = _idle_tick(d)
    assert d.handle(tick) == []
    assert d.phase is Phase.READY
    d.handle(Unsubscribe("s1"))
    d.handle(_idle_tick(d))
    assert d.phase is Phase.PASSIVATING
    d.close()


def test_passivate_now_skips_the_timeout_and_without_memory_stops_at_once() -> None:
    d = Driver()
    _talked(d)
    effects = d.handle(PassivateNow())
    assert d.phase is Phase.PASSIVATING
    assert any(isinstance(e, AskToStop) for e in effects)
    assert not any(isinstance(e, RunExtraction) for e in effects)
    d.close()


def test_a_busy_session_declines_to_passivate() -> None:
    d = Driver()
    d.send("working")
    assert d.handle(PassivateNow()) == []
    assert d.phase is Phase.PROCESSING
    d.close()


def test_a_stale_idle_tick_is_ignored() -> None:
    d = Driver()
    _talked(d)
    tick = _idle_tick(d)
    d.subscribe("s1")  # re-arms: a new generation
    d.handle(Unsubscribe("s1"))
    assert d.handle(tick) == []
    d.close()
