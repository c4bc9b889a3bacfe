"""A person's decision on a pending tool call, as the session takes it whatever it is
doing: checked (:func:`netclaw.sessions._core.approvals.check_decision`), journaled before anything runs, and
shown. Running the round once nothing is open is the turn's (:mod:`netclaw.sessions._core.activities.turning`)."""

from __future__ import annotations

import logging

from netclaw import outputs as out
from netclaw.errors import ApprovalError
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.approvals import check_decision
from netclaw.sessions._core.commands import Decide
from netclaw.sessions._core.effects import Measure, Refuse
from netclaw.sessions._core.journal.events import ApprovalDecided, ApprovalRequest, Decision

log = logging.getLogger(__name__)


def decide(core: Core, command: Decide) -> Decision | None:
    """A person's decision: checked, then journaled (before anything runs) and shown. The
    decision taken, or None when it was refused (the caller is told why)."""
    approvers = core.settings.audience(core.context.audience).approvers
    try:
        request, decision = check_decision(
            core.state,
            command.approval_id,
            command.decision,
            command.by,
            approvers=approvers,
            approver=command.approver,
        )
    except (ApprovalError, ValueError) as exc:
        core.emit(Refuse(command.reply, exc))
        return None
    settle(core, request, decision, command.by)
    return decision


def settle(core: Core, request: ApprovalRequest, decision: Decision, by: str) -> None:
    """Journal one decision and tell people; the turn runs the round once none is open."""
    core.persist(ApprovalDecided(request.id, decision, by))
    core.emit(Measure("approvals_pending", -1))
    log.info("%s: %s %s (%s) by %s", core.session_id, decision, request.tool, request.id, by)
    core.publish(
        out.ApprovalDecided(session_id=core.session_id, approval_id=request.id, decision=decision, by=by)
    )
