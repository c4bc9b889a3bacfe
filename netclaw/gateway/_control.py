"""Control: what an operator does to sessions — :class:`ControlService`.

Cancel the running turn, reset the model's context, compact now, pin a model, delete a
session (its sub-agents first, deepest first; a deleted sub-agent's parent is told), forget
a memory, and append to the audit trail what happened outside sessions.

Who uses it (as the ``Control`` role): the control API and the control room; chat
commands (``_commands``: ``/stop``, ``/reset``, ``/compact``, ``/model``); the sub-agents'
port (a parent cancels its child). Its ``audit`` alone (the ``Auditing`` role): the API's
access routes (tokens), the questions routes and the daemon (a reload). Runs on the I/O
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from netclaw import attachments
from netclaw.config import LiveSettings, Settings
from netclaw.errors import NetclawError
from netclaw.gateway._ask import ask
from netclaw.gateway._inbound import Inbound
from netclaw.gateway._intake import IntakeService
from netclaw.gateway._reads import ReadService
from netclaw.identifiers import check_session_id
from netclaw.lineage import depth_of, gone_report, is_descendant, report_text
from netclaw.persistence import AccessLogic, Journal, Memory, MemoryStore
from netclaw.security.audit import AuditEntry
from netclaw.security.trust import label
from netclaw.sessions import (
    Cancel,
    CompactNow,
    ModelChoice,
    PinModel,
    Reset,
    SessionManager,
    SetVoice,
    VoiceChoice,
)

log = logging.getLogger(__name__)


class ControlService:
    def __init__(
        self,
        manager: SessionManager,
        journal: Journal,
        live: LiveSettings,
        intake: IntakeService,
        reads: ReadService,
        *,
        memory: MemoryStore | None = None,
        access: AccessLogic | None = None,
    ) -> None:
        self._manager = manager
        self._journal = journal
        self._live = live
        self._intake = intake  # a deleted sub-agent's parent is told
        self._reads = reads
        self._memory = memory
        self._access = access  # the audit table (netclaw/persistence/_access.py)

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    async def cancel(self, session_id: str, *, by: str = "api") -> int | None:
        """Stop the running turn (recorded as cancelled; queued messages go on). The turn's
        number, or None when nothing was running."""
        return await ask(self._manager, session_id, lambda reply: Cancel(reply, by))

    async def reset(self, session_id: str, *, by: str = "api") -> None:
        """The model-visible context starts empty; the transcript and memories stay."""
        await ask(self._manager, session_id, lambda reply: Reset(by, reply))

    async def compact(self, session_id: str) -> str:
        """Compact now, whatever the threshold; a sentence saying what happened."""
        return await ask(self._manager, session_id, CompactNow)

    async def pin_model(
        self, session_id: str, model: str | None, *, by: str = "api", announce: bool = True
    ) -> ModelChoice:
        """Choose the session's model from its next turn on (None: back to models.main);
        InvalidInput naming the models when there is no such model. ``announce``: the
        session tells its subscribers in a notice (a chat command's answer is its own)."""
        return await ask(self._manager, session_id, lambda reply: PinModel(model, by, reply, announce))

    async def set_voice(self, session_id: str, on: bool | None, *, by: str = "api") -> VoiceChoice:
        """Speak the session's replies too (``on``), or not; None: only say which is in force."""
        return await ask(self._manager, session_id, lambda reply: SetVoice(on, by, reply))

    async def audit(self, kind: str, actor: str, session_id: str | None = None, **detail: Any) -> None:
        """Append to the audit trail what happened outside sessions (see netclaw/security/audit.py)."""
        if self._access is not None:
            await self._access.record(AuditEntry(time.time(), kind, actor, session_id, detail))

    async def delete(self, session_id: str, *, memories: bool = False, by: str = "api") -> bool:
        """Erase a session: its journal, snapshot, listing row and webhook deliveries (and,
        with ``memories``, what was learnt in it), and its sub-agents with it; a deleted
        sub-agent's parent is told it is over. False when there is no such session."""
        check_session_id(session_id)
        if not await self._reads.knows(session_id):
            return False
        family = [r.id for r in await self._journal.list_sessions() if is_descendant(r.id, session_id)]
        for doomed in [*sorted(family, key=depth_of, reverse=True), session_id]:  # the deepest first

            async def erase(doomed: str = doomed) -> None:
                if self._access is not None:  # the session's trail outlives its journal
                    await self._access.keep_trail_of(doomed)
                await self._journal.erase(doomed)
                await asyncio.to_thread(attachments.erase, self.settings.data_dir, doomed)
                if memories and self._memory is not None:
                    await self._memory.delete_session(doomed)

            await self._manager.erase(doomed, erase)
            log.info("%s: deleted%s", doomed, " with its memories" if memories else "")
            await self.audit("session_deleted", by, doomed, memories=memories)
        gone = gone_report(session_id, by)
        if gone is not None:  # its parent stays: the child no longer counts as running there
            with contextlib.suppress(NetclawError):
                await self._intake.submit(
                    Inbound(
                        gone.parent,
                        report_text(gone, label),
                        user=session_id,
                        identity=gone.identity,
                        subagent=gone,
                    )
                )
        return True

    async def edit_memory(self, memory_id: int, text: str, *, by: str = "api") -> Memory | None:
        """A person's correction of a memory (None: no such memory; MemoryEditRefused: an
        empty text, or one another memory of its audience says)."""
        if self._memory is None:
            return None
        edited = await self._memory.edit(memory_id, text)
        if edited is not None:
            await self.audit("memory_edited", by, memory_id=memory_id)
        return edited

    async def forget(self, memory_id: int, *, by: str = "api") -> bool:
        deleted = self._memory is not None and await self._memory.delete(memory_id)
        if deleted:
            await self.audit("memory_deleted", by, memory_id=memory_id)
        return deleted
