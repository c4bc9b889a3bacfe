"""netclaw.ui._timeline: a turn's waterfall from the journal's records alone."""

from __future__ import annotations

from typing import Any

from netclaw.gateway import Recorded
from netclaw.ui._timeline import Phase, timelines

T0 = 1_800_000_000.0


def msg(role: str, at: float, **more: Any) -> dict[str, Any]:
    return {"id": f"{role}-{at}", "role": role, "content": "", "ts": T0 + at, **more}


def rec(kind: str, at: float, **data: Any) -> Recorded:
    return Recorded(kind, data, T0 + at)


def test_a_turn_with_a_queue_a_fallback_an_approval_a_tool_round_and_an_answer() -> None:
    user = msg("user", 0.0)
    asks = msg("assistant", 4.0, tool_calls=[{"id": "c1", "name": "deploy", "arguments": "{}"}])
    records = [
        rec("InputAdmitted", 0.01, message=user),
        rec("TurnStarted", 1.5, turn=3, message_id=user["id"]),  # waited 1.5 s behind another turn
        rec("ModelSwitched", 2.5, turn=3, from_model="main", to_model="spare", reason="rate_limited"),
        rec(
            "ApprovalRequested",
            4.05,
            turn=3,
            assistant=asks,
            requests=[{"id": "ap1", "call_id": "c1", "tool": "deploy", "requested_at": T0 + 4.05}],
        ),
        rec("ApprovalDecided", 10.05, approval_id="ap1", decision="approve", by="control"),
        rec("StepRecorded", 12.1, turn=3, messages=[asks, msg("tool", 12.0)]),
        rec(
            "TurnRecorded",
            13.02,
            turn=3,
            message_id=user["id"],
            status="completed",
            messages=[msg("assistant", 13.0)],
        ),
    ]
    (turn,) = timelines(records)
    assert (turn.turn, turn.status, turn.arrived) == (3, "completed", T0)
    assert round(turn.total, 2) == 13.02
    shown = [(p.kind, p.label, round(p.start, 2), round(p.end, 2)) for p in turn.phases]
    assert shown == [
        ("queue", "queue: waiting for the turn before", 0.0, 1.5),
        ("model_failed", "model main failed (rate_limited), then spare", 1.5, 2.5),
        ("model", "model: asks for tools", 2.5, 4.0),
        ("approval", "approval: deploy (approve)", 4.05, 10.05),
        ("tools", "tools: deploy", 10.05, 12.0),
        ("model", "model: the answer", 12.0, 13.0),
    ]
    slowest = turn.slowest
    assert slowest is not None and slowest.kind == "approval"  # where the time went
    svg = str(turn.svg())
    assert svg.count("<rect") == 6 and 'class="t-approval"' in svg and "6.00 s" in svg


def test_tool_rounds_without_approval_and_a_failed_turn() -> None:
    user = msg("user", 0.0)
    calls = msg("assistant", 1.0, tool_calls=[{"id": "a", "name": "lookup"}, {"id": "b", "name": "fetch"}])
    records = [
        rec("InputAdmitted", 0.0, message=user),
        rec("TurnStarted", 0.0, turn=1, message_id=user["id"]),
        rec("StepRecorded", 3.0, turn=1, messages=[calls, msg("tool", 2.5), msg("tool", 2.9)]),
        rec("SessionCompacted", 4.0),
        rec(
            "TurnRecorded", 9.0, turn=1, message_id=user["id"], status="timed_out", error={"code": "timeout"}
        ),
    ]
    (turn,) = timelines(records)
    assert [(p.kind, p.label, round(p.seconds, 2)) for p in turn.phases] == [
        ("model", "model: asks for tools", 1.0),
        ("tools", "tools: fetch, lookup", 1.9),
        ("compaction", "compaction", 1.1),
        ("ended", "timed out: timeout", 5.0),
    ]
    assert turn.status == "timed_out"


def test_the_latest_turns_come_first_and_a_running_one_is_drawn_so_far() -> None:
    records: list[Recorded] = []
    for n in range(1, 4):
        user = msg("user", n * 10.0)
        records += [
            rec("InputAdmitted", n * 10.0, message=user),
            rec("TurnStarted", n * 10.0, turn=n, message_id=user["id"]),
        ]
        if n < 3:
            records.append(
                rec(
                    "TurnRecorded",
                    n * 10 + 2.0,
                    turn=n,
                    message_id=user["id"],
                    status="completed",
                    messages=[msg("assistant", n * 10 + 2.0)],
                )
            )
    found = timelines(records, last=2)
    assert [(t.turn, t.status) for t in found] == [(3, "running"), (2, "completed")]
    assert found[0].phases == () and found[1].phases == (Phase("model", "model: the answer", 0.0, 2.0),)


def test_a_running_turn_waiting_for_a_person_is_drawn_up_to_now() -> None:
    user = msg("user", 0.0)
    asks = msg("assistant", 2.0, tool_calls=[{"id": "c1", "name": "deploy"}])
    records = [
        rec("InputAdmitted", 0.0, message=user),
        rec("TurnStarted", 0.0, turn=1, message_id=user["id"]),
        rec(
            "ApprovalRequested",
            2.0,
            turn=1,
            assistant=asks,
            requests=[{"id": "ap", "call_id": "c1", "tool": "deploy", "requested_at": T0 + 2.0}],
        ),
    ]
    (turn,) = timelines(records, now=T0 + 62.0)
    assert (turn.status, round(turn.total)) == ("running", 62)
    assert [(p.label, round(p.seconds)) for p in turn.phases] == [
        ("model: asks for tools", 2),
        ("approval: deploy (waiting)", 60),
    ]
    (without_now,) = timelines(records)  # no clock: up to its last record
    assert round(without_now.total) == 2
