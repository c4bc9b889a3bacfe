"""Approvals and questions: what running tools wait for people to decide —
:class:`ApprovalService`.

A tool call that needs a go-ahead waits in its session (``PendingApproval``) until it is
decided (``approve``, ``deny`` or ``always``); a running tool's question (an MCP server's
elicitation, sampling's go-ahead) waits in the daemon's ``Questions`` registry until it is
answered (``accept``, ``decline`` or ``cancel``).

Who uses it: the control API and the control room (the ``Approvals`` role: listings and
decisions); the questions routes (the ``ToolQuestions`` role); the chat role (``_chat``:
a button press, decided here once the chat policy let it through, and the session an
approval id belongs to). Runs on the I/O loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from netclaw.config import LiveSettings, Settings
from netclaw.errors import ApprovalNotFound, InvalidInput, QuestionNotFound, SessionUnavailable
from netclaw.gateway._ask import ask
from netclaw.gateway._reads import ReadService
from netclaw.identifiers import check_session_id
from netclaw.sessions import Decide, ListApprovals, PendingApproval, SessionManager
from netclaw.tools import Questions

log = logging.getLogger(__name__)


class ApprovalService:
    def __init__(
        self,
        manager: SessionManager,
        live: LiveSettings,
        reads: ReadService,
        questions: Questions | None = None,
    ) -> None:
        self._manager = manager
        self._live = live
        self._reads = reads
        self._questions = questions  # what running tools ask people (answered here)

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    # -- tool calls waiting for a decision ----------------------------------------------------

    async def approvals(self, session_id: str) -> list[PendingApproval]:
        """The session's tool calls waiting for a decision (a session with one never sleeps,
        so a session that is not resident has none)."""
        check_session_id(session_id)
        if not self._manager.is_resident(session_id):
            return []
        return await ask(self._manager, session_id, ListApprovals)

    async def all_approvals(self) -> list[PendingApproval]:
        """Pending approvals across sessions."""
        found: list[PendingApproval] = []
        for session_id in sorted(self._manager.resident()):
            with contextlib.suppress(SessionUnavailable):
                found += await self.approvals(session_id)
        return found

    async def find_approval(self, approval_id: str) -> str | None:
        """The session holding ``approval_id`` (for the CLI, which names only the id)."""
        for item in await self.all_approvals():
            if item.id == approval_id:
                return item.session_id
        return None

    async def decide(
        self, session_id: str, approval_id: str, decision: str, *, by: str, approver: str | None = None
    ) -> str:
        """Decide a pending tool call: ``approve``, ``deny`` or ``always``. ``approver`` is the
        platform user who clicked (checked against the audience's approvers); None for the
        control-token holder. Raises ApprovalNotFound / ApprovalClosed / NotAnApprover."""
        if decision not in ("approve", "deny", "always"):
            raise InvalidInput("decision", f"decision must be approve, deny or always (got {decision!r})")
        if not await self._reads.knows(session_id):
            raise ApprovalNotFound(f"no pending approval {approval_id!r} in session {session_id}")
        return await ask(
            self._manager, session_id, lambda reply: Decide(approval_id, decision, by, approver, reply)
        )

    # -- questions from running tools (MCP elicitation, sampling's go-ahead) ------------------

    def questions(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The open questions (of one session, or all on this node), oldest first."""
        if session_id is not None:
            check_session_id(session_id)
        found = self._questions.of(session_id) if self._questions is not None else []
        return [q.to_json() for q in sorted(found, key=lambda q: q.asked_at)]

    def answer_question(
        self,
        session_id: str,
        question_id: str,
        action: str,
        content: Mapping[str, Any] | None = None,
        *,
        by: str,
        approver: str | None = None,
    ) -> dict[str, Any]:
        """Answer a question a running tool asked: ``accept`` (with the form's ``content``),
        ``decline`` or ``cancel``. ``approver`` (a platform user id) must be one of the
        audience's approvers when it names any; the control-token holder passes None."""
        check_session_id(session_id)
        if self._questions is None:
            raise QuestionNotFound(f"no open question {question_id!r} in session {session_id}")
        pending = self._questions.answer(
            session_id,
            question_id,
            action,
            content,
            by=by,
            approver=approver,
            approvers=lambda audience: self.settings.audience(audience).approvers,
        )
        log.info("%s: question %s (%s) answered %s by %s", session_id, question_id, pending.tool, action, by)
        return {"question_id": question_id, "action": action, "by": by}
