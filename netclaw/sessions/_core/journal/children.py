"""A session's sub-agent records, as the state's fold keeps them (pure): the parent's
record of each child, and a child's reports owed to its parent.

Split out of :mod:`netclaw.sessions._core.journal.state` so the fold there stays one line per event; the values
themselves (:class:`~netclaw.lineage.ChildRecord`, ``ChildReport``, ``ChildTask``) are
:mod:`netclaw.lineage`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from netclaw.lineage import ChildRecord, ChildReport, ChildTask, spawn_identity
from netclaw.messages import ChatMessage
from netclaw.sessions._core.journal.events import ChildSpawned, TurnRecorded

MAX_CHILDREN_KEPT = 500  # a parent's records of finished sub-agents (running ones are all kept)
MAX_REPORTS_OWED = 100  # a child's answers its parent has not admitted yet


def spawned(children: Mapping[int, ChildRecord], event: ChildSpawned, ts: float) -> Mapping[int, ChildRecord]:
    record = ChildRecord(event.task, event.call_id, event.turn, event.text, event.wait, spawned_at=ts)
    kept = {**children, event.task.n: record}
    for n in sorted(kept):  # the oldest finished ones go first; a running one never does
        if len(kept) <= MAX_CHILDREN_KEPT:
            break
        if not kept[n].running:
            del kept[n]
    return kept


def reported(
    children: Mapping[int, ChildRecord], report: ChildReport, ts: float
) -> Mapping[int, ChildRecord]:
    known = children.get(report.n)
    return children if known is None else {**children, report.n: known.reported(report, ts)}


def detached(children: Mapping[int, ChildRecord], n: int) -> Mapping[int, ChildRecord]:
    known = children.get(n)
    return children if known is None else {**children, n: replace(known, detached=True)}


def task_input(task: ChildTask | None, message: ChatMessage, known: str | None) -> str | None:
    """The id of the message that gave a sub-agent its task, once it is admitted."""
    if task is not None and message.identity == spawn_identity(task.parent, task.n):
        return message.id
    return known


def owed_after(
    owed: Mapping[int, ChildReport],
    task: ChildTask | None,
    given_by: str | None,
    event: TurnRecorded,
    reply: str | None,
    tokens: int,
    cost: float = 0.0,
) -> Mapping[int, ChildReport]:
    """A sub-agent owes its parent every recorded turn (the parent admits each once)."""
    if task is None:
        return owed
    completed = event.status == "completed"
    report = ChildReport(
        task.parent,
        task.n,
        event.turn,
        event.status,
        reply if completed else None,
        None if completed else (event.error or {}).get("message"),
        tokens,
        of_task=event.message_id == given_by,
        cost=cost,
    )
    after = {**owed, event.turn: report}
    while len(after) > MAX_REPORTS_OWED:
        del after[min(after)]
    return after
