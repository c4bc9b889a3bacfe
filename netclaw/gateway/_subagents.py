"""The sub-agents' port: what :mod:`netclaw.workers.subagents` (spawning children, waiting for
them, the courier of their answers) does with sessions — :class:`SubagentService`, which
plays ``SubagentSessions``.

Its own part asks a parent session about its children: record a spawn (or find the one a
tool call made already), stop waiting for a child, and a child's answers its parent has
not admitted yet. The rest it passes to the service that holds it: a child's task and a
report go in as input (``_intake``); a parent's children, the resident phases and where a
child lives are reads (``_reads``); a parent cancels its child through the controls
(``_control``); a child's recorded answers are replies owed on the ``agent`` channel
(``_outbox``). Runs on the I/O loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from netclaw.gateway._ask import ask
from netclaw.gateway._control import ControlService
from netclaw.gateway._inbound import Inbound
from netclaw.gateway._intake import IntakeService
from netclaw.gateway._outbox import OutboxService
from netclaw.gateway._reads import ReadService
from netclaw.lineage import ChildRecord, ChildReport, SpawnRequest
from netclaw.persistence import Owner
from netclaw.sessions import (
    Admission,
    DetachChild,
    OwedReports,
    RecordSpawn,
    SessionManager,
    SpawnAnswer,
    TurnOutcome,
)


class SubagentService:
    def __init__(
        self,
        manager: SessionManager,
        intake: IntakeService,
        reads: ReadService,
        control: ControlService,
        outbox: OutboxService,
    ) -> None:
        self._manager = manager
        self._intake = intake
        self._reads = reads
        self._control = control
        self._outbox = outbox

    # -- a parent's records of its children ---------------------------------------------------

    async def record_spawn(self, parent: str, turn: int, call_id: str, request: SpawnRequest) -> SpawnAnswer:
        """Record a child in ``parent`` (or find the one ``call_id`` spawned): SubagentRefused
        when it may not."""
        return await ask(self._manager, parent, lambda reply: RecordSpawn(turn, call_id, request, reply))

    async def detach_child(self, parent: str, n: int) -> bool:
        """``parent`` stops waiting for its child ``n`` (False: the child reported already)."""
        return await ask(self._manager, parent, lambda reply: DetachChild(n, reply))

    async def owed_reports(self, child: str) -> list[ChildReport]:
        """A sub-agent's answers its parent has not admitted yet."""
        return await ask(self._manager, child, OwedReports)

    # -- passed to the service that holds it --------------------------------------------------

    async def submit(
        self, inbound: Inbound, *, wait: bool = False, turn_timeout: float | None = None
    ) -> tuple[Admission, TurnOutcome | None]:
        return await self._intake.submit(inbound, wait=wait, turn_timeout=turn_timeout)

    async def children(self, session_id: str) -> list[ChildRecord]:
        return await self._reads.children(session_id)

    def resident_phases(self) -> dict[str, str]:
        return self._reads.resident_phases()

    async def owner_of(self, session_id: str) -> Owner | None:
        return await self._reads.owner_of(session_id)

    async def cancel(self, session_id: str, *, by: str) -> int | None:
        return await self._control.cancel(session_id, by=by)

    @property
    def cluster_poll_s(self) -> float | None:
        return self._outbox.cluster_poll_s

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self._outbox.watch_owed_replies(platform, listener)

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self._outbox.unwatch_owed_replies(platform, listener)

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        return await self._outbox.sessions_owing_replies(platform)

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        return await self._outbox.mark_delivered(session_id, turn, message_ids)
