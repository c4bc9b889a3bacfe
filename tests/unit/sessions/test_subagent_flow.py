"""Sub-agents through the pure session, on both sides: the parent records a spawn before
the child hears of it (once per call, also when the round runs again after a crash), the
limits and the tool subset, a child's answer admitted once (as input, or only as a record
when the spawning turn waits for it), cancels that cascade; the child takes its task's
terms and owes its parent every recorded turn until the parent admitted it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from netclaw import outputs as out
from netclaw.errors import InvalidInput, SubagentRefused
from netclaw.lineage import ChildRecord, ChildReport, ChildTask, SpawnRequest, report_identity, spawn_identity
from netclaw.llm import ToolSchema
from netclaw.process.runtime import Reply
from netclaw.security.policy import Place
from netclaw.sessions._core.commands import (
    Admission,
    Cancel,
    Decide,
    DetachChild,
    ListChildren,
    MarkDelivered,
    OwedReports,
    RecordSpawn,
    Reset,
    SendUserMessage,
    SpawnAnswer,
)
from netclaw.sessions._core.effects import CallModel, CancelSessions, Persist, Refuse, ReplyOwed, RunTools
from netclaw.sessions._core.journal.events import (
    ChildDetached,
    ChildReported,
    ChildSpawned,
    ContextAttached,
    InputAdmitted,
    ReplyDelivered,
    RoundStarted,
    StepRecorded,
    TaskGiven,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._core.results import TurnTimeout
from tests.unit.sessions.harness import TOOLS, Driver, tool_call

PARENT = "cli:t"
SPAWN = ToolSchema("spawn_agent", "Start a sub-agent", {"type": "object", "properties": {}})
WITH_SPAWN = [*TOOLS, SPAWN]


@pytest.fixture
def d() -> Iterator[Driver]:
    driver = Driver(PARENT, tools=WITH_SPAWN)
    yield driver
    driver.close()


def _spawn_round(d: Driver, *calls: str | tuple[str, dict[str, Any]], wait: bool = False) -> list[Any]:
    """The parent's model asks for sub-agents (call ids, or (id, arguments)): the round and
    its children are recorded in one write, then the round runs."""
    d.send("split the work")
    made = []
    for call in calls:
        cid, args = call if isinstance(call, tuple) else (call, {"task": "look it up", "wait": wait})
        made.append(tool_call("spawn_agent", cid, json.dumps(args)))
    return d.answer(calls=made)


def _spawned(d: Driver, effects: list[Any]) -> list[ChildSpawned]:
    return [e for e in d.events(effects) if isinstance(e, ChildSpawned)]


def _record(d: Driver, call_id: str, request: SpawnRequest | None = None) -> tuple[Reply[Any], list[Any]]:
    reply = d.reply()
    turn = d.state.active.turn if d.state.active is not None else 1
    effects = d.handle(RecordSpawn(turn, call_id, request or SpawnRequest("look it up"), reply))
    return reply, effects


def _report(parent: str, n: int, turn: int = 1, status: Any = "completed", **kw: Any) -> ChildReport:
    text = kw.pop("text", "the answer" if status == "completed" else None)
    return ChildReport(parent, n, turn, status, text, kw.pop("error", None), kw.pop("tokens", 40), **kw)


def _deliver(d: Driver, report: ChildReport) -> tuple[Reply[Any], list[Any]]:
    ack = d.reply()
    send = SendUserMessage(
        f"report {report.turn}", d.now, ack, identity=report.identity, user=report.child, subagent=report
    )
    return ack, d.handle(send)


# -- the parent ---------------------------------------------------------------------------------


def test_a_spawn_round_is_recorded_with_its_children_before_it_runs(d: Driver) -> None:
    effects = _spawn_round(d, "c1", "c2")
    kinds = [type(e).__name__ for e in effects]
    assert kinds.index("Persist") < kinds.index("RunTools")
    (write,) = [
        e for e in effects if isinstance(e, Persist) and any(isinstance(x, RoundStarted) for x in e.events)
    ]
    assert [type(x) for x in write.events] == [RoundStarted, ChildSpawned, ChildSpawned]  # one write
    started, first, second = write.events
    assert isinstance(started, RoundStarted) and [c.id for c in started.assistant.tool_calls] == ["c1", "c2"]
    assert isinstance(first, ChildSpawned) and isinstance(second, ChildSpawned)
    assert (first.task.child, first.call_id, first.text) == ("agent:cli:t/1", "c1", "look it up")
    assert second.task.child == "agent:cli:t/2"
    # A child at the depth limit (1 by default) gets every tool of its parent but spawn_agent.
    assert first.task.tools == ("current_time", "deploy") and first.task.audience == "personal"
    assert d.state.pending_round is not None and d.state.pending_round.open == ()
    assert [o.child_id for o in d.outputs(effects) if isinstance(o, out.SubagentStarted)] == [
        "agent:cli:t/1",
        "agent:cli:t/2",
    ]


def test_a_round_without_spawns_is_not_recorded_before_it_runs(d: Driver) -> None:
    d.send("time?")
    effects = d.answer(calls=[tool_call("current_time", "c1")])
    assert not any(isinstance(e, RoundStarted) for e in d.events(effects))


def test_the_spawn_call_finds_its_record_every_time_it_runs(d: Driver) -> None:
    (spawned,) = _spawned(d, _spawn_round(d, "c1"))
    for _ in range(2):  # as it runs, and again after a crash in the round's middle
        reply, effects = _record(d, "c1")
        assert d.events(effects) == []
        assert d.answers(reply, effects) == [SpawnAnswer(spawned.task, "look it up", new=False)]
    assert d.state.children_spawned == 1


def test_a_spawn_in_a_round_that_waited_for_approval_is_recorded_when_it_runs() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN, audiences={"personal": {"approve": ["spawn_agent"]}})
    effects = _spawn_round(d, "c1")
    assert _spawned(d, effects) == [] and not any(isinstance(e, RunTools) for e in effects)
    approval = d.state.pending_round.requests[0].id  # type: ignore[union-attr]
    d.handle(Decide(approval, "approve", "ana", None, d.reply()))
    reply, effects = _record(d, "c1")
    (spawned,) = _spawned(d, effects)
    assert spawned.task.child == "agent:cli:t/1"
    kinds = [type(e).__name__ for e in effects]
    assert kinds.index("Persist") < kinds.index("Answer")  # recorded before the child hears of it
    assert d.answers(reply, effects) == [SpawnAnswer(spawned.task, "look it up", new=True)]
    assert [o.child_id for o in d.outputs(effects) if isinstance(o, out.SubagentStarted)] == ["agent:cli:t/1"]
    d.close()


def test_a_call_that_is_not_in_the_recorded_round_spawns_nothing(d: Driver) -> None:
    _spawn_round(d, "c1")
    _reply, effects = _record(d, "c-other")
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert isinstance(refused.error, SubagentRefused) and "no longer running" in str(refused.error)
    assert d.events(effects) == []


def test_the_concurrent_children_limit() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN, session={"max_subagents": 1})
    assert [e.call_id for e in _spawned(d, _spawn_round(d, "c1", "c2"))] == ["c1"]
    _reply, effects = _record(d, "c2")  # when it runs, the tool is told why
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert "session.max_subagents" in str(refused.error)
    d.close()


def test_a_public_session_cannot_spawn_and_is_not_offered_the_tool() -> None:
    d = Driver("webhook:hook:x", tools=WITH_SPAWN, audiences={"public": {"tools": None}})
    assert "spawn_agent" not in [t.name for t in d.session.context.tools()]
    assert _spawned(d, _spawn_round(d, "c1")) == []
    _reply, effects = _record(d, "c1")
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert "public sessions may not spawn sub-agents (audiences.public.subagents)" in str(refused.error)
    d.close()
    allowed = Driver(
        "webhook:hook:x", tools=WITH_SPAWN, audiences={"public": {"tools": None, "subagents": True}}
    )
    assert "spawn_agent" in [t.name for t in allowed.session.context.tools()]
    allowed.close()


def test_the_child_gets_only_the_tools_it_is_given_and_never_more_than_the_parent(d: Driver) -> None:
    effects = _spawn_round(
        d,
        ("c1", {"task": "x", "tools": ["current_*"]}),
        ("c2", {"task": "x", "tools": ["current_time", "rm_rf"]}),
    )
    (spawned,) = _spawned(d, effects)
    assert spawned.call_id == "c1" and spawned.task.tools == ("current_time",)
    _reply, effects = _record(d, "c2", SpawnRequest("x", tools=("current_time", "rm_rf")))
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert "not among your tools: rm_rf" in str(refused.error)


def test_a_child_under_the_depth_limit_may_spawn_and_one_at_it_may_not() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN, session={"max_subagent_depth": 2})
    (spawned,) = _spawned(d, _spawn_round(d, "c1"))
    assert "spawn_agent" in spawned.task.tools  # depth 1 < 2
    d.close()
    grandchild = Driver("agent:cli:t/1/1", tools=WITH_SPAWN, session={"max_subagent_depth": 2})
    assert not grandchild.session.context.may_spawn
    assert "spawn_agent" not in [t.name for t in grandchild.session.context.tools()]
    grandchild.close()


def test_a_child_budget_never_exceeds_what_the_parent_has_left_today() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN, session={"max_tokens_per_day": 1000, "max_subagents": 5})
    effects = _spawn_round(
        d,
        ("c1", {"task": "x", "budget_tokens": 600}),
        ("c2", {"task": "x", "budget_tokens": 600}),  # 400 are left
        ("c3", {"task": "x"}),
    )
    assert [e.task.budget_tokens for e in _spawned(d, effects)] == [600, 400]
    _, effects = _record(d, "c3")
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert "no tokens left today" in str(refused.error)
    d.close()


def test_a_background_childs_report_is_new_input_admitted_once(d: Driver) -> None:
    _spawn_round(d, "c1")
    _record(d, "c1")
    d.tools_done("started")
    d.answer("I asked a helper")
    assert d.session.phase is Phase.READY
    report = _report(PARENT, 1, tokens=40)
    _ack, effects = _deliver(d, report)
    assert [type(e) for e in d.events(effects)] == [ChildReported, InputAdmitted, TurnStarted]  # one write
    (admitted,) = [e for e in d.events(effects) if isinstance(e, InputAdmitted)]
    assert admitted.message.identity == report_identity("agent:cli:t/1", 1) == report.identity
    assert d.phase is Phase.PROCESSING  # the parent takes a turn on it
    (finished,) = [o for o in d.outputs(effects) if isinstance(o, out.SubagentFinished)]
    assert finished.child_id == "agent:cli:t/1" and finished.status == "completed"
    assert d.state.children[1].status == "completed" and d.state.children[1].reported_through == 1
    # Delivered again (the courier crashed before the child recorded the delivery): once.
    again, effects = _deliver(d, report)
    assert d.events(effects) == []
    (answer,) = d.answers(again, effects)
    assert isinstance(answer, Admission) and answer.duplicate


def test_a_child_spend_counts_toward_the_parent(d: Driver) -> None:
    _spawn_round(d, "c1")
    _record(d, "c1")
    before = d.state.spend_tokens
    _deliver(d, _report(PARENT, 1, tokens=1234))
    assert d.state.spend_tokens == before + 1234


def test_a_waited_childs_answer_is_only_recorded_while_the_turn_waits(d: Driver) -> None:
    _spawn_round(d, "c1", wait=True)
    _record(d, "c1", SpawnRequest("look it up", wait=True))
    ack, effects = _deliver(d, _report(PARENT, 1))
    assert [type(e) for e in d.events(effects)] == [ChildReported]  # no input: it is the tool's result
    (answer,) = d.answers(ack, effects)
    assert isinstance(answer, Admission) and not answer.duplicate
    again, effects = _deliver(d, _report(PARENT, 1))  # a record-only report is admitted once too
    assert d.events(effects) == [] and d.answers(again, effects)[0].duplicate  # type: ignore[attr-defined]


def test_a_detached_child_answers_as_input(d: Driver) -> None:
    _spawn_round(d, "c1", wait=True)
    _record(d, "c1", SpawnRequest("look it up", wait=True))
    reply = d.reply()
    effects = d.handle(DetachChild(1, reply))
    assert d.events(effects) == [ChildDetached(1)] and d.answers(reply, effects) == [True]
    _, effects = _deliver(d, _report(PARENT, 1))
    assert InputAdmitted in [type(e) for e in d.events(effects)]


def test_detaching_a_child_that_already_reported_says_so(d: Driver) -> None:
    _spawn_round(d, "c1", wait=True)
    _record(d, "c1", SpawnRequest("look it up", wait=True))
    _deliver(d, _report(PARENT, 1))
    reply = d.reply()
    effects = d.handle(DetachChild(1, reply))
    assert d.events(effects) == [] and d.answers(reply, effects) == [False]


def test_a_cancelled_childs_report_starts_no_turn(d: Driver) -> None:
    _spawn_round(d, "c1")
    _record(d, "c1")
    _, effects = _deliver(d, _report(PARENT, 1, status="cancelled", error="cancelled by cli:t"))
    assert [type(e) for e in d.events(effects)] == [ChildReported]
    assert d.state.children[1].status == "cancelled"


def test_a_report_from_a_stranger_is_refused(d: Driver) -> None:
    _ack, effects = _deliver(d, _report(PARENT, 7))
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert isinstance(refused.error, InvalidInput) and refused.error.field == "subagent"
    assert d.events(effects) == []


def test_cancel_and_reset_of_the_parent_cascade_to_running_children(d: Driver) -> None:
    _spawn_round(d, "c1", "c2")
    _record(d, "c1")
    _record(d, "c2")
    _deliver(d, _report(PARENT, 2, status="cancelled"))  # this one is over already
    effects = d.handle(Cancel(d.reply(), "ana"))
    (cascade,) = [e for e in effects if isinstance(e, CancelSessions)]
    assert cascade.session_ids == ("agent:cli:t/1",) and "ana" in cascade.by
    kinds = [type(e).__name__ for e in effects]
    assert "CancelOp" in kinds  # the parent's own round stops too
    effects = d.handle(Reset("ana", d.reply()))
    assert [e.session_ids for e in effects if isinstance(e, CancelSessions)] == [("agent:cli:t/1",)]


def test_a_turn_that_times_out_cancels_the_children_it_waited_for_only() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN, session={"max_subagents": 5})
    _spawn_round(d, "bg")
    _record(d, "bg")  # a background child, spawned in turn 1
    d.tools_done("started")
    d.answer("ok")
    d.send("now wait for one")
    d.answer(calls=[tool_call("spawn_agent", "w1", json.dumps({"task": "t", "wait": True}))])
    _record(d, "w1", SpawnRequest("t", wait=True))
    effects = d.handle(TurnTimeout(2))
    (cascade,) = [e for e in effects if isinstance(e, CancelSessions)]
    assert cascade.session_ids == ("agent:cli:t/2",)
    d.close()


def test_a_parent_recovered_in_the_middle_of_a_spawn_round_runs_it_again(d: Driver) -> None:
    _spawn_round(d, "c1")
    _record(d, "c1")
    crashed = d.state  # the round's results were never recorded
    after = Driver(PARENT, tools=WITH_SPAWN, state=crashed)
    run = after.pending(RunTools)  # the same calls, not a new question to the model
    assert [c.id for c in run.calls] == ["c1"]
    assert not any(isinstance(e, CallModel) for e in after.effects)
    reply, effects = _record(after, "c1")
    assert after.events(effects) == [] and after.answers(reply, effects)[0].new is False  # type: ignore[attr-defined]
    after.close()


def test_the_children_are_listed_oldest_first(d: Driver) -> None:
    _spawn_round(d, "c1", "c2")
    _record(d, "c1")
    _record(d, "c2")
    reply = d.reply()
    effects = d.handle(ListChildren(reply))
    (records,) = d.answers(reply, effects)
    assert [r.child for r in records] == ["agent:cli:t/1", "agent:cli:t/2"]  # type: ignore[attr-defined]
    assert all(isinstance(r, ChildRecord) and r.running for r in records)  # type: ignore[attr-defined]


# -- the child ----------------------------------------------------------------------------------

CHILD = "agent:cli:t/1"
TASK = ChildTask(PARENT, 1, ("current_time",), "main", None, "team", "slack:C1")


def _child(**sections: Any) -> Driver:
    return Driver(CHILD, tools=WITH_SPAWN, **sections)


def _give(c: Driver, task: ChildTask = TASK, text: str = "look it up") -> list[Any]:
    send = SendUserMessage(
        text,
        c.now,
        c.reply(),
        identity=spawn_identity(task.parent, task.n),
        user=task.parent,
        place=Place(task.scope, "team"),
        subagent=task,
    )
    return c.handle(send)


def test_a_child_takes_its_task_terms_with_its_first_input() -> None:
    c = _child()
    effects = _give(c)
    # The terms, the input and the turn in one write; then the turn's tail (the time).
    persists = [e for e in effects if isinstance(e, Persist)]
    assert [type(e) for e in persists[0].events] == [TaskGiven, InputAdmitted, TurnStarted]
    assert [type(e) for e in c.events(effects)][3:] == [ContextAttached]
    assert c.state.task == TASK
    assert c.session.context.audience == "team"
    request = c.pending(CallModel).request
    assert [t.name for t in request.tools] == ["current_time"]  # its task's tools only
    c.close()


def test_a_child_owes_its_parent_every_recorded_turn_until_it_was_admitted() -> None:
    c = _child()
    _give(c)
    effects = c.answer("found: 42")
    assert ReplyOwed() in effects
    owed = c.state.reports_owed[1]
    assert (owed.parent, owed.n, owed.turn, owed.status, owed.text, owed.of_task) == (
        PARENT,
        1,
        1,
        "completed",
        "found: 42",
        True,
    )
    assert c.state.owed == 1  # the session row counts it: re-driven after a crash
    reply = c.reply()
    effects = c.handle(OwedReports(reply))
    assert c.answers(reply, effects) == [[owed]]
    done = c.reply()
    effects = c.handle(MarkDelivered(1, ("u_parent",), done))
    assert c.events(effects) == [ReplyDelivered(1, ("u_parent",))] and c.answers(done, effects) == [True]
    assert c.state.reports_owed == {} and c.state.owed == 0
    c.close()


def test_a_child_that_fails_reports_its_failure() -> None:
    c = _child()
    _give(c)
    c.fail_call(RuntimeError("boom"))
    owed = c.state.reports_owed[1]
    assert owed.status == "failed" and owed.text is None and owed.error and "unexpectedly" in owed.error
    c.close()


def test_a_child_recovered_while_owing_reports_sends_them_again() -> None:
    c = _child()
    _give(c)
    c.answer("found")
    again = Driver(CHILD, tools=WITH_SPAWN, state=c.state)
    assert ReplyOwed() in again.effects
    c.close()
    again.close()


def test_a_child_stops_at_its_token_budget() -> None:
    c = _child()
    _give(c, ChildTask(PARENT, 1, ("current_time",), budget_tokens=30))
    c.answer(calls=[tool_call("current_time", "t1")], input_tokens=25)  # 25 + 10 spent
    effects = c.tools_done()
    assert not any(isinstance(e, CallModel) for e in effects[1:])
    (recorded,) = [e for e in c.events(effects) if isinstance(e, TurnRecorded)]
    assert recorded.status == "failed" and "token budget" in (recorded.error or {})["message"]
    assert c.state.reports_owed[1].status == "failed"
    c.close()


def test_a_child_on_the_compaction_model_calls_it() -> None:
    c = _child(models={"compaction": {"provider": "local", "model": "small", "context_window": 8192}})
    _give(c, ChildTask(PARENT, 1, (), "compaction"))
    call = c.pending(CallModel)
    assert call.provider == "local" and call.request.model == "small" and call.request.tools == []
    assert c.session.context.model_name == "compaction"
    c.close()


def test_a_sub_agents_session_takes_no_input_before_its_task() -> None:
    c = _child()
    _ack, effects = c.send("hello")
    (refused,) = [e for e in effects if isinstance(e, Refuse)]
    assert isinstance(refused.error, InvalidInput) and "only its parent starts it" in str(refused.error)
    assert c.events(effects) == []
    c.close()


def test_a_later_message_to_a_child_is_reported_as_not_of_the_task() -> None:
    c = _child()
    _give(c)
    c.answer("first")
    c.send("and also this")
    c.answer("second")
    assert c.state.reports_owed[2].of_task is False and c.state.reports_owed[1].of_task is True
    c.close()


def test_the_records_survive_a_snapshot() -> None:
    from netclaw.sessions._core.journal import snapshot as _snapshot

    d = Driver(PARENT, tools=WITH_SPAWN)
    _spawn_round(d, "c1")
    _record(d, "c1")
    data, rows = _snapshot.encode(d.state, 0)
    back = _snapshot.decode(data, rows)
    assert back.children == d.state.children and back.children_spawned == 1
    c = _child()
    _give(c)
    c.answer("x")
    data, rows = _snapshot.encode(c.state, 0)
    back = _snapshot.decode(data, rows)
    assert (back.task, back.task_input, back.reports_owed) == (
        c.state.task,
        c.state.task_input,
        c.state.reports_owed,
    )
    assert isinstance(back, SessionState) and back.tokens_total == c.state.tokens_total
    d.close()
    c.close()


def test_a_recorded_round_ends_with_its_step() -> None:
    d = Driver(PARENT, tools=WITH_SPAWN)
    _spawn_round(d, "c1")
    _record(d, "c1")
    effects = d.tools_done("started agent:cli:t/1")
    assert any(isinstance(e, StepRecorded) for e in d.events(effects))
    assert d.state.pending_round is None
    d.close()
