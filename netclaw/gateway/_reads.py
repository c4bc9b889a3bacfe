"""Reads: what people and the other services look at — :class:`ReadService`.

Session listings and views (decoding and replay run in a worker thread, never on the I/O
loop), a session's status, model and sub-agents, which sessions are resident here and
which node serves one, memories, token usage, the cluster's nodes, and watching a
session's outputs (:meth:`ReadService.subscribe`: a
:class:`~netclaw.sessions.Subscription` whose ``close()`` never wakes a session that has
stopped).

Who uses it (as the ``Reads`` role): the control API and the control room. The services
use it too: the chat role (``subscribe``, ``knows``, ``owner_of``), chat commands
(``/status``, ``/model``, ``/agents``), the controls and approvals (``knows``) and the
sub-agents' port. Runs on the I/O loop; it reads the live settings.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace

from netclaw.cluster import Routing
from netclaw.config import LiveSettings, Settings
from netclaw.gateway._ask import ask
from netclaw.gateway._context_view import offered_tools
from netclaw.gateway._views import Recorded, SessionsFound, SessionSummary, SessionView, summary_of
from netclaw.identifiers import check_session_id
from netclaw.lineage import ChildRecord
from netclaw.messages import MessageKind
from netclaw.outputs import OutputFilter
from netclaw.persistence import Journal, Memory, MemoryStore, Node, Owner, SessionQuery, UsageKey, UsageRow
from netclaw.security.policy import audience_of
from netclaw.sessions import (
    ListChildren,
    ModelChoice,
    ReportStatus,
    SessionManager,
    StatusReport,
    Subscription,
    build_context,
    continuity_notice,
    load_state,
)
from netclaw.skills import LiveSkills, system_prompt
from netclaw.tools import ToolRegistry

# What a turn's timeline reads (netclaw/ui/_timeline.py).
TIMELINE_EVENTS = frozenset(
    {
        "InputAdmitted",
        "TurnStarted",
        "StepRecorded",
        "ApprovalRequested",
        "ApprovalDecided",
        "ModelSwitched",
        "SessionCompacted",
        "HistoryTrimmed",
        "TurnRecorded",
    }
)


class ReadService:
    def __init__(
        self,
        manager: SessionManager,
        journal: Journal,
        live: LiveSettings,
        *,
        memory: MemoryStore | None = None,
        routing: Routing | None = None,
        tools: ToolRegistry | None = None,
        skills: LiveSkills | None = None,
    ) -> None:
        self._manager = manager
        self._journal = journal
        self._live = live
        self._memory = memory
        self._routing = routing
        self._tools = tools  # read for the context view (what the model is offered)
        self._skills = skills or LiveSkills()  # the daemon's: swapped on reload

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    @property
    def clustered(self) -> bool:
        """Several nodes share the database (sessions are served where their lease is)."""
        return self._routing is not None

    # -- where sessions are -------------------------------------------------------------------

    async def owner_of(self, session_id: str) -> Owner | None:
        """The other node that serves the session now (several nodes on one database), or
        None: it is, or may become, resident here."""
        if self._routing is not None:
            return await self._routing.where(session_id)
        return None

    async def knows(self, session_id: str) -> bool:
        """Is this an existing session (a thread the bot already takes part in)?"""
        if self._manager.is_resident(session_id):
            return True
        return await self._journal.get_session(session_id) is not None

    def resident_phases(self) -> dict[str, str]:
        return {sid: phase.value for sid, phase in self._manager.resident().items()}

    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription:
        """Watch a session's outputs (it starts if it is not resident). Close the
        subscription when done; that never wakes a session that has stopped."""
        check_session_id(session_id)
        return self._manager.subscribe(session_id, mask)

    # -- one session, asked -------------------------------------------------------------------

    async def status(self, session_id: str) -> StatusReport:
        return await ask(self._manager, session_id, ReportStatus)

    async def model_of(self, session_id: str) -> ModelChoice:
        """The model a session uses (from its status: a passivated session starts for it)."""
        report = await self.status(session_id)
        available = tuple(self.settings.models.named())
        return ModelChoice(session_id, report.model_name, report.model, report.pinned, available)

    async def children(self, session_id: str) -> list[ChildRecord]:
        """The sub-agents ``session_id`` spawned, oldest first."""
        return await ask(self._manager, session_id, ListChildren)

    # -- listings and views -------------------------------------------------------------------

    async def list_sessions(self) -> list[SessionSummary]:
        resident = self._manager.resident()
        return [summary_of(r, resident) for r in await self._journal.list_sessions()]

    async def find_sessions(
        self, *, text: str = "", channel: str = "", phase: str = "", offset: int = 0, limit: int = 50
    ) -> SessionsFound:
        """A page of the listing, the most recently active first: ``text`` in the id or
        title, one ``channel``, one ``phase`` ("passivated": not resident here)."""
        resident = self._manager.resident()
        query = SessionQuery(text, channel, offset=offset, limit=limit)
        if phase == "passivated":
            query = replace(query, excluding=tuple(resident))
        elif phase:
            query = replace(query, only=[sid for sid, p in resident.items() if p.value == phase])
        found = await self._journal.find_sessions(query)
        return SessionsFound([summary_of(r, resident) for r in found.rows], found.total, found.channels)

    async def get_session(self, session_id: str, *, context: bool = False) -> SessionView | None:
        """One session: its transcript (and queued input), or with ``context`` what the
        model sees now (under the live system prompt). None when it does not exist."""
        check_session_id(session_id)
        state = await load_state(self._journal, session_id)
        if state.seq == 0:
            return None
        phase = self._manager.resident().get(session_id)
        summary = SessionSummary(
            id=state.session_id,
            channel=state.channel,
            title=state.title,
            phase=phase.value if phase is not None else "passivated",
            turns=state.turns,
            last_activity=state.last_activity,
            resident=phase is not None,
            pending=state.pending_inputs,
        )
        if context:
            settings = self.settings
            prompt = system_prompt(
                settings, audience_of(session_id, settings, state.place), self._skills.current
            )
            messages = await asyncio.to_thread(build_context, state, prompt)
            resumed_at = self._manager.continuity_of(session_id)
            if resumed_at is not None:  # the tail the next model call records, until it has
                messages.append(continuity_notice(resumed_at, time.time()))
            tools = offered_tools(session_id, state.place, settings, self._tools)
            return SessionView(summary, "context", messages, tools=tools)
        # The transcript is what was said: netclaw's notes to the model (a turn's tail) are not.
        note = MessageKind.CONTEXT
        said = [m for m in state.transcript if m.kind is not note]
        return SessionView(
            summary,
            "transcript",
            said,
            state.inbox,
            state.failures,
            kept_from=sum(1 for m in state.transcript[: state.kept_from] if m.kind is not note),
            compactions=state.compactions,
            trimmed=state.trimmed,
            summarized=state.summary is not None,
            resets=state.resets,
        )

    async def turn_records(self, session_id: str) -> list[Recorded]:
        """The events a turn's timeline is drawn from, oldest first, each with when it was
        written (decoded in a worker thread). Empty for a session that does not exist."""
        check_session_id(session_id)
        rows = await self._journal.replay(session_id)
        return await asyncio.to_thread(
            lambda: [Recorded(r.type, json.loads(r.payload), r.ts) for r in rows if r.type in TIMELINE_EVENTS]
        )

    # -- across sessions ----------------------------------------------------------------------

    async def memories(
        self, *, query: str | None = None, audience: str | None = None, session_id: str | None = None
    ) -> list[Memory]:
        """Memories for people: matching ``query``, or newest first; with their source."""
        if self._memory is None:
            return []
        return await self._memory.listing(query=query, audience=audience, session_id=session_id)

    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]:
        """Provider tokens from the journal, per session, UTC day or model (of ``sessions``
        only, when given)."""
        return await self._journal.usage(by, since, sessions)

    async def cluster_nodes(self) -> list[Node]:
        """The nodes sharing the database (empty on one node with an embedded journal)."""
        return await self._journal.nodes()
