"""Sub-agents, driven on the I/O loop: starting a child for a parent's ``spawn_agent``
call, waiting for it, and the courier that takes every child's answer to its parent.

A child is a session like any other (``agent:<parent>/<n>``: its own actor, journal and
recovery); what is particular to it lives in the sessions (the parent's records of its
children, a child's task and the reports it owes) and in :mod:`netclaw.lineage`. This
module only moves messages between them through the gateway, and every move is safe to
repeat, which is what makes the whole exactly once across crashes:

- **Spawn.** The parent records the child (``ChildSpawned``) before the child's first
  input is sent, under an identity made from that record; a spawn run again (the parent's
  round recovered in its middle) finds the record and sends the same input, which the
  child admits once.
- **Report.** A child's recorded turn is owed to its parent (the child's state says so,
  durably, and its session row counts it) until the parent admitted it under
  ``subagent:<child>:<turn>`` and the child recorded that. The courier delivers owed
  reports whenever a child records a turn, when a child owing some recovers, and at
  start-up for every child that owes any; a delivery cut short by a crash is simply made
  again, and the parent admits it once.

Implements the tools' :class:`~netclaw.tools.SubagentPort` (the tools sit below the
gateway, so they get this object at wiring time rather than importing it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from netclaw.config import Settings
from netclaw.errors import InvalidInput, NetclawError, SessionUnavailable, SubagentRefused
from netclaw.gateway import Inbound, SubagentSessions, TurnOutcome
from netclaw.lineage import (
    AGENT_CHANNEL,
    ChildRecord,
    ChildReport,
    ChildTask,
    SpawnRequest,
    is_descendant,
    report_text,
    spawn_identity,
)
from netclaw.retry import Backoff
from netclaw.security.policy import Place
from netclaw.security.trust import label
from netclaw.toolspec import ToolContext

log = logging.getLogger(__name__)

WAIT_MARGIN_S = 2.0  # `wait: true` gives up this long before the tool call or turn would
RETRY_PAUSE_S = 0.5  # a child being restarted while a parent waits: ask again after this
# A report the parent could not admit (it is restarting, the journal is down) is tried again
# after 0.5 s, 1, 2, 4... up to every 30 s.
DELIVERY_BACKOFF = Backoff(first_s=0.5, max_s=30.0, jitter=0.1)


class Subagents:
    def __init__(self, gateway: SubagentSessions, settings: Callable[[], Settings]) -> None:
        self._gateway = gateway
        self._settings = settings
        self._delivering: set[str] = set()  # children whose reports are on their way now
        self._again: set[str] = set()  # ... and which recorded another meanwhile
        self._failures: dict[str, int] = {}  # deliveries that failed in a row, by child
        self._retries: dict[str, asyncio.TimerHandle] = {}  # by child ("": listing them again)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.delivered = 0  # reports admitted by their parents (tests, status)

    # -- the tools' port ----------------------------------------------------------------------

    async def spawn(self, ctx: ToolContext, request: SpawnRequest) -> tuple[str, ChildReport | None]:
        if ctx.turn is None or not ctx.call_id:
            raise SubagentRefused("spawn_agent runs only as a tool call of a session's turn")
        answer = await self._gateway.record_spawn(ctx.session_id, ctx.turn, ctx.call_id, request)
        task = answer.task
        inbound = Inbound(
            task.child,
            answer.text,  # as recorded: a spawn run again sends exactly the same input
            user=ctx.session_id,
            identity=spawn_identity(task.parent, task.n),
            place=Place.from_dict(
                {"audience": task.audience} | ({"scope": task.scope} if task.scope else {})
            ),
            subagent=task,
        )
        if not request.wait:
            await self._gateway.submit(inbound)
            return task.child, None
        return task.child, await self._wait(inbound, task)

    async def _wait(self, inbound: Inbound, task: ChildTask) -> ChildReport | None:
        """The child's answer, if it comes before the parent's tool call would run out; else
        the parent stops waiting (its answer will arrive as input) and None."""
        settings = self._settings()
        limit = min(
            settings.session.subagent_wait_s,
            settings.tools.call_timeout_s - WAIT_MARGIN_S,
            settings.session.turn_timeout_s - WAIT_MARGIN_S,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(limit, 1.0)
        while (left := deadline - loop.time()) > 0:
            try:
                _, outcome = await self._gateway.submit(inbound, wait=True, turn_timeout=left)
            except SessionUnavailable:  # the child is restarting (its turn resumes), or time is up
                await asyncio.sleep(min(RETRY_PAUSE_S, max(deadline - loop.time(), 0.0)))
                continue
            assert outcome is not None  # submit(wait=True) returns the outcome
            return _report_of(task, outcome)
        if await self._gateway.detach_child(task.parent, task.n):
            return None
        # It reported meanwhile (to the parent, as this call's answer): take it from the child.
        _, outcome = await self._gateway.submit(inbound, wait=True, turn_timeout=WAIT_MARGIN_S)
        assert outcome is not None
        return _report_of(task, outcome)

    async def children(self, session_id: str) -> tuple[list[ChildRecord], Mapping[str, str]]:
        records = await self._gateway.children(session_id)
        return records, self._gateway.resident_phases()

    async def cancel(self, session_id: str, child: str) -> bool:
        if not is_descendant(child, session_id):
            return False
        await self._gateway.cancel(child, by=session_id)
        return True

    # -- the courier --------------------------------------------------------------------------

    def start(self) -> None:
        """On the loop: deliver what children record from now on, and what they owe already
        (recorded before a crash, or while their parent could not admit it). With several
        nodes, also what a node that died left owed, every ``cluster_poll_s``."""
        self._gateway.watch_owed_replies(AGENT_CHANNEL, self.owed)
        self._run(self._owed_already())
        poll = self._gateway.cluster_poll_s
        if poll is not None:
            self._run(self._poll(poll))

    async def _poll(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            await self._owed_already(retry=False)

    def stop(self) -> None:
        self._stopped = True
        self._gateway.unwatch_owed_replies(AGENT_CHANNEL, self.owed)
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        for task in list(self._tasks):
            task.cancel()

    async def _owed_already(self, *, retry: bool = True) -> None:
        try:
            children = await self._gateway.sessions_owing_replies(AGENT_CHANNEL)
        except NetclawError as exc:
            log.warning("cannot list the sub-agents that owe reports: %s (trying again)", exc)
            if retry:
                self._retries[""] = asyncio.get_running_loop().call_later(
                    DELIVERY_BACKOFF.delay(3), self._run_again
                )
            return
        for child in children:
            self.owed(child)

    def _run_again(self) -> None:
        self._run(self._owed_already())

    def owed(self, child: str) -> None:
        """``child`` recorded an answer its parent has not admitted: take it there (on the loop)."""
        if self._stopped:
            return
        if child in self._delivering:
            self._again.add(child)  # the delivery under way asks again when it is done
            return
        retry = self._retries.pop(child, None)
        if retry is not None:
            retry.cancel()
        self._delivering.add(child)
        self._run(self._deliver(child))

    async def _deliver(self, child: str) -> None:
        try:
            while True:
                self._again.discard(child)
                if not await self._deliver_owed(child):
                    failures = self._failures[child] = self._failures.get(child, 0) + 1
                    delay = DELIVERY_BACKOFF.delay(failures - 1)
                    self._retries[child] = asyncio.get_running_loop().call_later(delay, self.owed, child)
                    return
                self._failures.pop(child, None)
                if child not in self._again:
                    return
        finally:
            self._delivering.discard(child)

    async def _deliver_owed(self, child: str) -> bool:
        """Every report ``child`` owes, oldest first; False when one could not be delivered
        (it is tried again later)."""
        try:
            if await self._gateway.owner_of(child) is not None:
                return True  # another node holds it (several nodes): its courier delivers
            reports = await self._gateway.owed_reports(child)
        except NetclawError as exc:
            log.info("%s: cannot read the reports it owes: %s", child, exc)
            return False
        for report in reports:
            inbound = Inbound(
                report.parent,
                report_text(report, label),  # labelled once here, and recorded as admitted
                user=child,
                identity=report.identity,
                subagent=report,
            )
            try:
                admission, _ = await self._gateway.submit(inbound)
                shown = [admission.message_id] if admission.message_id else []
            except InvalidInput as exc:  # its parent does not know it (deleted): nowhere to go
                log.warning("%s: report of turn %d dropped: %s", child, report.turn, exc)
                shown = []
            except NetclawError as exc:
                log.info("%s: report of turn %d not admitted yet: %s", child, report.turn, exc)
                return False
            try:
                await self._gateway.mark_delivered(child, report.turn, shown)
            except NetclawError as exc:  # admitted; marked next time (the parent admits it once)
                log.info("%s: report of turn %d not marked delivered yet: %s", child, report.turn, exc)
                return False
            self.delivered += 1
        return True

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        if self._stopped:
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("sub-agent courier failed", exc_info=task.exception())


def _report_of(task: ChildTask, outcome: TurnOutcome) -> ChildReport:
    error = (outcome.error or {}).get("message")
    completed = outcome.status == "completed"
    return ChildReport(
        task.parent, task.n, outcome.turn, outcome.status, outcome.reply if completed else None, error
    )
