"""A turn, driven command by command through the pure session: the model call, tool
rounds, the end of the turn, cancel mid-stream and mid-tool, stale results, the spend
stop, and the order messages queue in."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest

from netclaw import outputs as out
from netclaw.errors import ProviderUnavailable, SessionUnavailable
from netclaw.llm import Completion, Delta, Usage
from netclaw.messages import MessageKind
from netclaw.security.redact import KNOWN, Scrubber
from netclaw.sessions._core.commands import Admission, Cancel, Reset, SendUserMessage
from netclaw.sessions._core.effects import (
    CallModel,
    CancelOp,
    PhaseChanged,
    Recall,
    Refuse,
    RunTools,
    Snapshot,
    StartTimer,
    StopTimer,
    TimerKind,
)
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.events import (
    ContextAttached,
    InputAdmitted,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import TurnOutcome
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import ProviderDeltas, ProviderDone, ToolsDone, TurnTimeout
from netclaw.sessions._core.timers import Timers
from tests.unit.sessions.harness import Driver, tool_call


@pytest.fixture
def d() -> Iterator[Driver]:
    driver = Driver()
    yield driver
    driver.close()


def test_a_message_is_persisted_before_it_is_acknowledged_and_starts_a_turn(d: Driver) -> None:
    ack, effects = d.send("hello")
    kinds = [type(e).__name__ for e in effects]
    assert kinds.index("Persist") < kinds.index("Answer") < kinds.index("CallModel")
    # One write admits it, then the turn's volatile tail (the time, at a session's first turn).
    assert [type(e) for e in d.events(effects)] == [InputAdmitted, TurnStarted, ContextAttached]
    (admission,) = d.answers(ack, effects)
    assert isinstance(admission, Admission) and not admission.duplicate
    assert d.phase is Phase.PROCESSING
    assert PhaseChanged(Phase.PROCESSING) in effects
    assert any(isinstance(e, StartTimer) and e.kind is TimerKind.TURN for e in effects)
    request = d.pending(CallModel).request
    assert request.messages[-2].content == "hello"
    assert request.messages[-1].kind is MessageKind.CONTEXT and "The time now" in request.messages[-1].content
    assert [t.name for t in request.tools] == ["current_time", "deploy"]


def test_an_answer_completes_the_turn_and_streams_on_the_way(d: Driver) -> None:
    d.send("hi")
    op = d.pending(CallModel).op_id
    shown = d.outputs(d.handle(ProviderDeltas(op, (Delta("text", "Hel"), Delta("text", "lo")))))
    assert shown == [out.TextDelta(session_id="cli:t", turn=1, delta="Hello")]
    effects = d.handle(ProviderDone(op, _completion("Hello")))
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "completed" and recorded.messages[-1].content == "Hello"
    names = [o.event for o in d.outputs(effects)]
    assert names[:3] == ["usage", "text", "title"] and "turn_completed" in names
    assert d.phase is Phase.READY
    assert any(isinstance(e, StopTimer) and e.kind is TimerKind.TURN for e in effects)


def test_tool_rounds_run_and_their_results_go_back_to_the_model(d: Driver) -> None:
    d.send("what time is it?")
    d.answer(calls=[tool_call("current_time", "c1")])
    run = d.pending(RunTools)
    assert [c.name for c in run.calls] == ["current_time"] and run.refusals == {}
    assert d.phase is Phase.PROCESSING
    effects = d.tools_done("noon")
    (step,) = [e for e in d.events(effects) if isinstance(e, StepRecorded)]
    assert [m.role for m in step.messages] == ["assistant", "tool"]
    second = d.pending(CallModel)
    assert not any(isinstance(e, Recall) for e in d.effects)  # no memory store here
    assert second.request.messages[-1].content == "noon"
    d.answer("It is noon.")
    assert d.state.outcomes[d.state.transcript[0].id].reply == "It is noon."


def test_past_the_tool_iteration_limit_the_model_gets_no_tools() -> None:
    d = Driver(session={"max_tool_iterations": 1})
    d.send("loop")
    d.answer(calls=[tool_call("current_time", "c1")])
    d.tools_done()
    assert d.pending(CallModel).request.tools == []
    d.close()


def test_a_result_for_an_earlier_op_is_stale_and_dropped(d: Driver) -> None:
    d.send("hi")
    first = d.pending(CallModel).op_id
    d.handle(Cancel(d.reply(), by="test"))
    d.send("again")
    effects = d.handle(ProviderDone(first, _completion("late")))
    assert effects == []  # nothing recorded, nothing shown
    effects = d.handle(ToolsDone(first, []))
    assert effects == []


def test_cancel_mid_stream_closes_the_call_and_records_the_turn_cancelled(d: Driver) -> None:
    d.send("hi")
    op = d.pending(CallModel).op_id
    reply = d.reply()
    effects = d.handle(Cancel(reply, by="api"))
    assert CancelOp(op) in effects
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "cancelled"
    assert d.answers(reply, effects) == [1]
    assert d.phase is Phase.READY
    ended = [o for o in d.outputs(effects) if isinstance(o, out.TurnCompleted)]
    assert ended[0].status == "cancelled"


def test_cancel_mid_tool_gives_every_running_call_a_result(d: Driver) -> None:
    d.send("go")
    d.answer(calls=[tool_call("current_time", "c1"), tool_call("current_time", "c2")])
    op = d.pending(RunTools).op_id
    effects = d.handle(Cancel(d.reply(), by="user"))
    assert CancelOp(op) in effects
    step, recorded = d.events(effects)
    assert isinstance(step, StepRecorded) and isinstance(recorded, TurnRecorded)
    assert [m.tool_call_id for m in step.messages if m.role == "tool"] == ["c1", "c2"]
    assert all(m.is_error for m in step.messages if m.role == "tool")


def test_cancel_with_nothing_running_answers_none(d: Driver) -> None:
    reply = d.reply()
    assert d.answers(reply, d.handle(Cancel(reply))) == [None]


def test_messages_during_a_turn_queue_and_run_in_arrival_order(d: Driver) -> None:
    d.send("first")
    d.send("second")
    d.send("third")
    assert [m.content for m in d.state.inbox] == ["second", "third"]
    d.answer("one")
    assert d.pending(CallModel).request.messages[-1].content == "second"
    d.answer("two")
    assert d.pending(CallModel).request.messages[-1].content == "third"
    d.answer("three")
    replies = [o.reply for o in d.state.outcomes.values()]
    assert replies == ["one", "two", "three"] and d.phase is Phase.READY


def test_a_repeated_identity_is_acknowledged_as_a_duplicate_and_starts_nothing(d: Driver) -> None:
    d.send("hi", identity="k1")
    ack, effects = d.send("hi", identity="k1")
    (admission,) = d.answers(ack, effects)
    assert isinstance(admission, Admission) and admission.duplicate
    assert d.events(effects) == []


def test_a_provider_failure_fails_the_turn_and_the_next_message_goes_on(d: Driver) -> None:
    d.send("one")
    d.send("two")
    effects = d.fail_call(ProviderUnavailable("down"))
    recorded = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded[0].status == "failed" and recorded[0].error == {
        "code": "provider_unavailable",
        "message": "down",
    }
    assert d.pending(CallModel).request.messages[-1].content == "two"


def test_the_turn_timeout_stops_a_turn_and_a_stale_one_does_nothing(d: Driver) -> None:
    d.send("slow")
    assert d.handle(TurnTimeout(turn=7)) == []
    effects = d.handle(TurnTimeout(turn=1))
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "timed_out"


def test_the_spend_stop_ends_a_turn_with_a_notice_instead_of_a_call() -> None:
    d = Driver(session={"max_tokens_per_day": 150})
    d.send("one")
    d.answer("ok", input_tokens=200)  # 200 in + 10 out: past the cap
    calls = len([e for e in d.effects if isinstance(e, CallModel)])
    _, effects = d.send("two")
    assert len([e for e in d.effects if isinstance(e, CallModel)]) == calls  # no second call
    notices = [o for o in d.outputs(effects) if isinstance(o, out.Notice)]
    assert notices and notices[0].kind == "spend_limit" and "max_tokens_per_day" in notices[0].text
    (recorded,) = [e for e in d.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.error is not None and recorded.error["code"] == "spend_limit"
    d.close()


def test_reset_cancels_the_running_turn_and_starts_the_context_afresh(d: Driver) -> None:
    d.send("one")
    d.answer("first")
    d.send("two")
    reply = d.reply()
    effects = d.handle(Reset(by="api", reply=reply))
    assert out.SessionReset(session_id="cli:t", by="api") in d.outputs(effects)
    assert d.answers(reply, effects) == [None]
    assert d.state.resets == 1 and d.phase is Phase.READY
    d.send("three")
    messages = d.pending(CallModel).request.messages
    assert [m.content for m in messages if m.is_real_user] == ["three"]


def test_a_waiting_caller_gets_the_outcome_when_its_turn_is_recorded(d: Driver) -> None:
    done = d.reply()
    d.handle(SendUserMessage("hi", d.now, d.reply(), done=done))
    effects = d.answer("hello")
    (outcome,) = d.answers(done, effects)
    assert isinstance(outcome, TurnOutcome) and outcome.reply == "hello"


def test_a_caller_answered_by_a_command_that_then_raised_is_refused_at_the_stop(
    d: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that raises returns nothing, so the answers it had decided are never
    carried out: the stop (the actor breaks) refuses those callers instead of leaving them
    waiting."""
    done = d.reply()
    d.handle(SendUserMessage("hi", d.now, d.reply(), done=done))

    def broken(timers: Timers) -> None:
        raise RuntimeError("a bug after the answer was decided")

    monkeypatch.setattr(Timers, "end_turn", broken)  # right after the waiters' answers
    with pytest.raises(RuntimeError):
        d.answer("hello")
    error = SessionUnavailable("the session failed")
    stopped = d.session.stopping(error)
    assert Refuse(done, error) in stopped
    assert d.session.stopping(error) == []  # once


def _completion(text: str) -> Completion:
    return Completion(text, usage=Usage(100, 10))


def test_the_daemon_s_secrets_are_the_env_s_and_a_run_replays_exactly(d: Driver) -> None:
    """What the core takes from the world comes through its env: the known secrets it
    redacts from the model's words (not whatever the process holds), the time it records,
    the ids it mints — so the same commands give the same record, byte for byte."""
    ours, theirs = "nctl-Zk3q8Rw1Yp0aBc", "nctl-Qm7v2Lx9Tb4dEf"
    holder = object()
    KNOWN.hold(holder, [theirs])  # another daemon's secret in this process: not this session's input

    def run(driver: Driver) -> list[object]:
        driver.known = Scrubber([ours])
        driver.send("what is the token?")
        driver.answer("", calls=[tool_call("current_time", arguments=json.dumps({"q": ours}))])
        driver.tools_done("noon")
        driver.answer(f"it is {ours}, not {theirs}")
        return [e for e in driver.events() if isinstance(e, StepRecorded | TurnRecorded)]

    try:
        first = run(d)
        again = Driver()
        try:
            assert run(again) == first  # ids, times and redactions the same
        finally:
            again.close()
    finally:
        KNOWN.release(holder)
    step, recorded = first
    assert isinstance(step, StepRecorded) and isinstance(recorded, TurnRecorded)
    call = step.messages[0].tool_calls[0]
    assert ours not in call.arguments and "[redacted: Daemon Secret]" in call.arguments
    [reply] = recorded.messages
    assert reply.content == f"it is [redacted: Daemon Secret], not {theirs}"
    assert reply.ts == d.now


def test_a_long_session_snapshots_in_proportion_to_its_transcript() -> None:
    """Snapshots every ``snapshot_interval`` events while the session is short; once its
    transcript holds more than SPREAD times that, every len(transcript) / SPREAD events:
    a snapshot costs more as the session grows, and is made less often."""
    interval = 4
    d = Driver(session={"snapshot_interval": interval})
    taken: list[tuple[int, int]] = []  # (seq, transcript length) of each snapshot
    for n in range(150):
        d.send(f"message {n}")
        effects = d.answer(f"answer {n}")
        taken += [(e.state.seq, len(e.state.transcript)) for e in effects if isinstance(e, Snapshot)]
    turn_events = 4  # a turn's most: input, start, step, end (the snapshot waits for its end)
    for (before, _), (seq, rows) in itertools.pairwise(taken):
        spacing = max(interval, rows // snapshots.SPREAD)
        assert spacing <= seq - before < spacing + turn_events
    assert taken[0][0] < interval + turn_events  # a short session's: as configured
    (before, _), (seq, rows) = taken[-2:]
    assert seq - before >= rows // snapshots.SPREAD > interval  # spaced by the transcript, not the interval
    rows = len(d.state.transcript)  # 300 messages and the first turn's context note
    replayed = d.state.seq - seq  # what a recovery now would replay after the last snapshot
    assert rows > 300 and replayed < rows // snapshots.SPREAD + turn_events
    d.close()
