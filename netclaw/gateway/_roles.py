"""The gateway by role: what each kind of caller may do with sessions.

Each caller is typed by the protocol(s) of the role(s) it plays and sees only that (mypy
holds it to it); the services of this package play them (:class:`~._gateway.Gateway`
holds one of each, and the daemon hands each caller what it uses):

- :class:`ChatInput` — a channel (``adapters/``: Slack, Discord, webhooks, the chat
  renderer): admit messages under the chat policy, watch a session's outputs, decide from
  a button, post owed replies, open delivery threads. Played by ``ChatService``.
- :class:`SubagentSessions` — :mod:`netclaw.workers.subagents`: spawn a child, wait for it, carry
  its answers to its parent. Played by ``SubagentService``.
- :class:`Input` — anyone sending a session a message or a notice: the control API, the
  control room, the scheduler. Played by ``IntakeService``.
- :class:`Threads` — the scheduler (a reminder delivered to a new thread). Played by
  ``OutboxService``.
- :class:`Control` — an operator acting on sessions: cancel, reset, compact, model,
  delete, forget. Played by ``ControlService``; its :class:`Auditing` part alone by the
  API's access routes, the questions routes and the daemon.
- :class:`Reads` — an operator looking: status, listings, transcripts, memories, usage,
  the cluster, a session's outputs. Played by ``ReadService``.
- :class:`Approvals` — an operator deciding tool calls; :class:`ToolQuestions` — answering
  running tools' questions (the questions routes). Played by ``ApprovalService``.
- :class:`Commands` — chat commands and their answers, for the control API (a message
  that is a command). Played by ``CommandService``.

:class:`Operator` bundles the four roles the control API and the control room share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from netclaw.commands import ChatCommand, PromptCommand
from netclaw.config import Settings
from netclaw.gateway._inbound import ChatPermit, Inbound
from netclaw.gateway._views import (
    CommandDone,
    Recorded,
    SessionsFound,
    SessionSummary,
    SessionView,
    ThreadOpener,
)
from netclaw.lineage import ChildRecord, ChildReport, SpawnRequest
from netclaw.outputs import OutputFilter
from netclaw.persistence import Memory, Node, Owner, UsageKey, UsageRow
from netclaw.security.policy import ChatEvent
from netclaw.sessions import (
    Admission,
    ModelChoice,
    PendingApproval,
    SpawnAnswer,
    StatusReport,
    Subscription,
    TurnOutcome,
)


class ChatInput(Protocol):
    """What a channel does with sessions."""

    @property
    def settings(self) -> Settings: ...
    @property
    def cluster_poll_s(self) -> float | None: ...

    def permit(self, event: ChatEvent) -> ChatPermit | None: ...
    async def submit_chat(self, permit: ChatPermit, inbound: Inbound) -> Admission | CommandDone: ...
    async def submit(
        self,
        inbound: Inbound,
        *,
        wait: bool = False,
        turn_timeout: float | None = None,
        forwarded: bool = False,
    ) -> tuple[Admission, TurnOutcome | None]: ...
    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription: ...
    async def knows(self, session_id: str) -> bool: ...
    async def owner_of(self, session_id: str) -> Owner | None: ...
    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str: ...
    async def find_approval(self, approval_id: str) -> str | None: ...
    def offer_threads(self, platform: str, opener: ThreadOpener | None) -> None: ...
    async def open_thread(self, platform: str, channel: str, text: str, *, key: str, since: float) -> str: ...
    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...
    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...
    async def sessions_owing_replies(self, platform: str) -> list[str]: ...
    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]: ...
    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool: ...
    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]: ...


class SubagentSessions(Protocol):
    """What the sub-agents' driver and courier do with sessions."""

    @property
    def cluster_poll_s(self) -> float | None: ...

    async def record_spawn(
        self, parent: str, turn: int, call_id: str, request: SpawnRequest
    ) -> SpawnAnswer: ...
    async def detach_child(self, parent: str, n: int) -> bool: ...
    async def owed_reports(self, child: str) -> list[ChildReport]: ...
    async def submit(
        self, inbound: Inbound, *, wait: bool = False, turn_timeout: float | None = None
    ) -> tuple[Admission, TurnOutcome | None]: ...
    async def children(self, session_id: str) -> list[ChildRecord]: ...
    def resident_phases(self) -> dict[str, str]: ...
    async def owner_of(self, session_id: str) -> Owner | None: ...
    async def cancel(self, session_id: str, *, by: str) -> int | None: ...
    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...
    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None: ...
    async def sessions_owing_replies(self, platform: str) -> list[str]: ...
    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool: ...


class Input(Protocol):
    """Sending a session a message (it starts a turn) or a notice (it does not)."""

    async def submit(
        self,
        inbound: Inbound,
        *,
        wait: bool = False,
        turn_timeout: float | None = None,
        forwarded: bool = False,
    ) -> tuple[Admission, TurnOutcome | None]: ...
    def announce(self, session_id: str, text: str, kind: str) -> None: ...


class Threads(Protocol):
    """Opening a thread in a chat channel, as a new session to deliver to."""

    async def open_thread(self, platform: str, channel: str, text: str, *, key: str, since: float) -> str: ...


class Auditing(Protocol):
    """Recording in the audit trail what happened outside sessions."""

    async def audit(self, kind: str, actor: str, session_id: str | None = None, **detail: Any) -> None: ...


class Control(Auditing, Protocol):
    """What an operator does to sessions."""

    async def cancel(self, session_id: str, *, by: str = "api") -> int | None: ...
    async def reset(self, session_id: str, *, by: str = "api") -> None: ...
    async def compact(self, session_id: str) -> str: ...
    async def pin_model(
        self, session_id: str, model: str | None, *, by: str = "api", announce: bool = True
    ) -> ModelChoice: ...
    async def delete(self, session_id: str, *, memories: bool = False, by: str = "api") -> bool: ...
    async def edit_memory(self, memory_id: int, text: str, *, by: str = "api") -> Memory | None: ...
    async def forget(self, memory_id: int, *, by: str = "api") -> bool: ...


class Reads(Protocol):
    """What an operator reads about sessions."""

    @property
    def settings(self) -> Settings: ...
    @property
    def clustered(self) -> bool: ...

    async def owner_of(self, session_id: str) -> Owner | None: ...
    async def knows(self, session_id: str) -> bool: ...
    def resident_phases(self) -> dict[str, str]: ...
    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription: ...
    async def status(self, session_id: str) -> StatusReport: ...
    async def model_of(self, session_id: str) -> ModelChoice: ...
    async def children(self, session_id: str) -> list[ChildRecord]: ...
    async def list_sessions(self) -> list[SessionSummary]: ...
    async def find_sessions(
        self, *, text: str = "", channel: str = "", phase: str = "", offset: int = 0, limit: int = 50
    ) -> SessionsFound: ...
    async def get_session(self, session_id: str, *, context: bool = False) -> SessionView | None: ...
    async def turn_records(self, session_id: str) -> list[Recorded]: ...
    async def memories(
        self, *, query: str | None = None, audience: str | None = None, session_id: str | None = None
    ) -> list[Memory]: ...
    async def usage(
        self, by: UsageKey, since: float | None = None, sessions: Sequence[str] | None = None
    ) -> list[UsageRow]: ...
    async def cluster_nodes(self) -> list[Node]: ...


class Approvals(Protocol):
    """Tool calls waiting for a person's decision."""

    async def approvals(self, session_id: str) -> list[PendingApproval]: ...
    async def all_approvals(self) -> list[PendingApproval]: ...
    async def find_approval(self, approval_id: str) -> str | None: ...
    async def decide(
        self, session_id: str, approval_id: str, decision: str, *, by: str, approver: str | None = None
    ) -> str: ...


class ToolQuestions(Protocol):
    """Questions running tools ask people (MCP elicitation, sampling's go-ahead)."""

    def questions(self, session_id: str | None = None) -> list[dict[str, Any]]: ...
    def answer_question(
        self,
        session_id: str,
        question_id: str,
        action: str,
        content: Mapping[str, Any] | None = None,
        *,
        by: str,
        approver: str | None = None,
    ) -> dict[str, Any]: ...


class Commands(Protocol):
    """Chat commands run for a session, and ``/prompt``."""

    async def command(self, session_id: str, command: ChatCommand, *, by: str) -> CommandDone: ...
    async def submit_prompt(
        self, inbound: Inbound, command: PromptCommand, *, wait: bool = False
    ) -> tuple[Admission, TurnOutcome | None] | CommandDone: ...
    async def status_text(self, session_id: str) -> str: ...
    async def skills_text(self, session_id: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Operator:
    """The roles a person operating netclaw plays, in the control API and the control room:
    send messages, steer sessions, read them, decide their tool calls."""

    intake: Input
    control: Control
    reads: Reads
    approvals: Approvals
