"""Sub-agents as values (netclaw/lineage.py): ids read off ids, the spawn arguments
checked, what a parent reads of a child's report, and the records' JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netclaw.errors import InvalidInput
from netclaw.identifiers import check_session_id
from netclaw.lineage import (
    GONE_TURN,
    ChildRecord,
    ChildReport,
    ChildTask,
    SpawnRequest,
    child_id,
    depth_of,
    descendants_prefix,
    describe,
    gone_report,
    is_agent,
    is_descendant,
    parent_of,
    report_text,
    root_of,
    spawn_identity,
)
from netclaw.security.policy import audience_of, default_scope
from tests.unit.sessions.harness import settings


def test_ids_say_parent_depth_and_root() -> None:
    assert child_id("cli:x", 1) == "agent:cli:x/1"
    assert child_id("agent:cli:x/1", 2) == "agent:cli:x/1/2"
    assert parent_of("agent:cli:x/1/2") == "agent:cli:x/1" and parent_of("agent:cli:x/1") == "cli:x"
    assert parent_of("cli:x") is None and parent_of("agent:plain") is None
    assert [depth_of(s) for s in ("cli:x", "agent:cli:x/1", "agent:cli:x/1/2")] == [0, 1, 2]
    assert root_of("agent:slack:C1:17.5/3/1") == "slack:C1:17.5"
    assert is_agent("agent:cli:x/1") and not is_agent("agent:cli:x") and not is_agent("cli:x")


def test_descendants_are_those_under_the_prefix_only() -> None:
    assert descendants_prefix("cli:x") == "agent:cli:x/"
    assert is_descendant("agent:cli:x/1", "cli:x") and is_descendant("agent:cli:x/1/4", "cli:x")
    assert is_descendant("agent:cli:x/1/4", "agent:cli:x/1")
    assert not is_descendant("agent:cli:xy/1", "cli:x")  # a longer id is no child
    assert not is_descendant("agent:cli:x/1", "agent:cli:x/1") and not is_descendant("cli:x", "cli:x")


@given(st.lists(st.integers(min_value=1, max_value=999), min_size=1, max_size=5))
def test_every_child_id_is_a_valid_session_id_that_leads_back(numbers: list[int]) -> None:
    session = "slack:C0123:1700000000.000100"
    for n in numbers:
        child = child_id(session, n)
        assert check_session_id(child) == child
        assert parent_of(child) == session and depth_of(child) == depth_of(session) + 1
        assert is_descendant(child, root_of(child))
        session = child


def test_a_sub_agent_serves_its_root_sessions_audience_and_scope() -> None:
    config = settings(webhooks={"routes": {"hook": {"auth": {"type": "bearer", "secret_env": "X"}}}})
    assert audience_of("agent:webhook:hook:k/1", config) == audience_of("webhook:hook:k", config) == "public"
    assert audience_of("agent:slack:C1:17.5/1/2", config) == "team"
    assert default_scope("agent:slack:C1:17.5/1") == "slack:C1"


def test_spawn_arguments_are_checked_naming_the_one_that_is_wrong() -> None:
    request = SpawnRequest.from_args(
        {"task": " do it ", "tools": ["a", "b*"], "budget_tokens": 10, "wait": True}
    )
    assert request == SpawnRequest("do it", ("a", "b*"), None, 10, True)
    for args, field in [
        ({}, "task"),
        ({"task": "  "}, "task"),
        ({"task": "x" * 50_001}, "task"),
        ({"task": "x", "tools": "a"}, "tools"),
        ({"task": "x", "tools": [1]}, "tools"),
        ({"task": "x", "model": "gpt-9"}, "model"),
        ({"task": "x", "budget_tokens": 0}, "budget_tokens"),
        ({"task": "x", "budget_tokens": True}, "budget_tokens"),
        ({"task": "x", "wait": "yes"}, "wait"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            SpawnRequest.from_args(args)
        assert caught.value.field == field


def marked(source: str, text: str) -> str:
    return f"<{source}>{text}</>"


def test_what_the_parent_reads_of_a_report() -> None:
    done = ChildReport("cli:x", 1, 1, "completed", "42")
    assert report_text(done, marked) == (
        "[netclaw: report from your sub-agent agent:cli:x/1 (its turn 1, on the task you gave it); "
        "its answer follows, not a message from the user]\n<agent:cli:x/1>42</>"
    )
    failed = ChildReport("cli:x", 1, 2, "failed", None, "the model failed", of_task=False)
    assert report_text(failed, marked).endswith(
        "(its turn 2, on a later message); it did not finish: failed: the model failed]"
    )
    long = report_text(ChildReport("cli:x", 1, 1, "completed", "y" * 200_000), marked)
    assert len(long) < 101_000 and long.endswith("y</>")
    assert "its answer follows (its first 100,000 characters), not a message from the user]" in long
    assert done.identity == "subagent:agent:cli:x/1:1" and spawn_identity("cli:x", 1) == "spawn:cli:x:1"


def test_a_deleted_childs_parent_is_told_it_is_over() -> None:
    gone = gone_report("agent:cli:x/3", "api")
    assert gone is not None and (gone.parent, gone.n, gone.turn, gone.status) == (
        "cli:x",
        3,
        GONE_TURN,
        "cancelled",
    )
    assert gone_report("cli:x", "api") is None


def test_records_round_trip_and_read_well() -> None:
    task = ChildTask("cli:x", 1, ("current_time",), "main", 500, "team", "slack:C1")
    record = ChildRecord(task, "call_1", 2, "find it", wait=True, spawned_at=5.0)
    assert ChildRecord.from_dict(record.to_dict()) == record and ChildTask.from_dict(task.to_dict()) == task
    report = ChildReport("cli:x", 1, 1, "completed", "found", tokens=12)
    assert ChildReport.from_dict(report.to_dict()) == report
    finished = record.reported(report, 9.0)
    assert (finished.status, finished.reported_through, finished.result, finished.finished_at) == (
        "completed",
        1,
        "found",
        9.0,
    )
    listed = describe(
        [record, finished.__class__(task, "call_2", 2, "other", status="failed", result="boom")]
    )
    assert listed.splitlines() == [
        "agent:cli:x/1: running (waited for) — task: find it",
        "agent:cli:x/1: failed — task: other — boom",
    ]
    assert describe([]) == "No sub-agents in this conversation."
    assert record.as_json("processing")["phase"] == "processing" and record.as_json()["phase"] == "passivated"
