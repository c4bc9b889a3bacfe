"""The gateway's services, built together: :class:`Gateway` holds one of each, made by
:meth:`Gateway.build` from the manager and the stores. Only the daemon holds it; it hands
each caller the services (typed by their roles, ``_roles``) that caller uses, never this
whole:

- the channels get ``chat`` (``ChatInput``); :mod:`netclaw.workers.subagents` gets ``subagents``
  (``SubagentSessions``);
- the control API and the control room get ``operator`` (``intake``, ``control``,
  ``reads``, ``approvals``), and the API ``commands`` too;
- the scheduler gets ``intake`` and ``outbox`` (``Input``, ``Threads``); the questions
  routes ``approvals`` and ``control`` (``ToolQuestions``, ``Auditing``).
"""

from __future__ import annotations

from dataclasses import dataclass

from netclaw.cluster import Routing
from netclaw.config import LiveSettings
from netclaw.gateway._approvals import ApprovalService
from netclaw.gateway._chat import ChatService
from netclaw.gateway._commands import CommandService
from netclaw.gateway._control import ControlService
from netclaw.gateway._intake import IntakeService
from netclaw.gateway._outbox import OutboxService
from netclaw.gateway._reads import ReadService
from netclaw.gateway._roles import Operator
from netclaw.gateway._subagents import SubagentService
from netclaw.mcp import McpHub
from netclaw.persistence import AccessLogic, Journal, MemoryStore, ReminderStore
from netclaw.sessions import SessionManager
from netclaw.skills import LiveSkills
from netclaw.tools import Questions, ToolRegistry


@dataclass(frozen=True, slots=True)
class Gateway:
    intake: IntakeService
    reads: ReadService
    control: ControlService
    commands: CommandService
    approvals: ApprovalService
    outbox: OutboxService
    chat: ChatService
    subagents: SubagentService

    @classmethod
    def build(
        cls,
        manager: SessionManager,
        journal: Journal,
        live: LiveSettings,
        *,
        memory: MemoryStore | None = None,
        reminders: ReminderStore | None = None,
        routing: Routing | None = None,
        access: AccessLogic | None = None,
        mcp: McpHub | None = None,
        questions: Questions | None = None,
        tools: ToolRegistry | None = None,
        skills: LiveSkills | None = None,
    ) -> Gateway:
        """The services over ``manager``: they read the live settings (a reload applies at
        once) and never reach into the manager's dependencies."""
        skills = skills or LiveSkills()
        intake = IntakeService(manager, journal, live, routing)
        reads = ReadService(
            manager, journal, live, memory=memory, routing=routing, tools=tools, skills=skills
        )
        control = ControlService(manager, journal, live, intake, reads, memory=memory, access=access)
        commands = CommandService(
            manager, live, intake, control, reads, memory=memory, reminders=reminders, mcp=mcp, skills=skills
        )
        approvals = ApprovalService(manager, live, reads, questions)
        outbox = OutboxService(manager, journal, live, routing)
        chat = ChatService(live, intake, commands, reads, approvals, outbox)
        subagents = SubagentService(manager, intake, reads, control, outbox)
        return cls(intake, reads, control, commands, approvals, outbox, chat, subagents)

    @property
    def operator(self) -> Operator:
        """What the control API and the control room use."""
        return Operator(self.intake, self.control, self.reads, self.approvals)
