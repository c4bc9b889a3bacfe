"""Tool calls that wait for a person: the pure pieces (which calls need a decision, the
requests, what people see, the results of refused calls, and checking a decision).

When a tool round holds a call whose tool matches the audience's ``approve`` patterns
(and was not granted "always" earlier in the session), the round is journaled as
``ApprovalRequested`` — every call of it, so a recovered session can finish it — and the
turn waits: the session stays Processing (so it does not passivate), its turn timeout is
off, and ``ApprovalsDue`` arrives when the earliest request expires. Each decision is
journaled (``ApprovalDecided``) before anything runs. Once every request is decided, the
round runs: approved calls for real, denied and expired ones answered with why.

A restart keeps all of it: the pending round is part of the state, the wait resumes on
recovery, and every new subscriber is shown the open requests (that is how a channel
re-announces them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netclaw import outputs as out
from netclaw.errors import ApprovalClosed, ApprovalNotFound, NotAnApprover
from netclaw.messages import ToolCall
from netclaw.security.trust import read_untrusted
from netclaw.sessions._core.journal.events import ApprovalRequest, Decision
from netclaw.sessions._core.journal.state import PendingRound, SessionState

DECISIONS: tuple[Decision, ...] = ("approve", "deny", "always")


# -- pure steps -------------------------------------------------------------------------------


def calls_to_ask(
    state: SessionState,
    message_id: str,
    calls: Sequence[ToolCall],
    offered: Mapping[str, Mapping[str, Any]],
    needs_approval: Callable[[str, bool], bool],
) -> list[ToolCall]:
    """The calls of a round that wait for a person: of a tool on offer (``offered``: each
    one's JSON schema of its arguments), with arguments that schema takes, and needing
    approval — asked with whether the turn started by ``message_id`` read untrusted content
    yet (no "always" after it). A call of a tool not on offer, or whose arguments its schema
    refuses, is never put to a person: it fails at once, saying why."""
    untrusted = read_untrusted(state.transcript, message_id)
    return [
        c
        for c in calls
        if c.name in offered
        and arguments_fit(offered[c.name], c.arguments)
        and needs_approval(c.name, untrusted)
    ]


def arguments_fit(schema: Mapping[str, Any], arguments: str | None) -> bool:
    """Do a call's JSON ``arguments`` satisfy its tool's ``schema``? A schema the validator
    cannot read (an MCP server's) says nothing against them."""
    import jsonschema  # here: only a round that needs a person pays for the import

    try:
        values = json.loads(arguments or "{}")
    except ValueError:
        return False
    try:
        return bool(jsonschema.validators.validator_for(schema)(schema).is_valid(values))
    except Exception:  # noqa: BLE001 - a schema the validator cannot use (a bad regex): ask as ever
        return True


def new_requests(
    calls: Sequence[ToolCall], now: float, timeout_s: float, random_hex: Callable[[int], str]
) -> tuple[ApprovalRequest, ...]:
    """A request per call, each with a fresh id short enough to type (``netclaw approvals
    approve ap-1f2e3d4c5b6a``), from ``random_hex`` (the session's id source)."""
    return tuple(
        ApprovalRequest(f"ap-{random_hex(12)}", c.id, c.name, c.arguments or "{}", now, now + timeout_s)
        for c in calls
    )


def request_outputs(session_id: str, pending: PendingRound) -> list[out.Output]:
    return [
        out.ApprovalRequested(
            session_id=session_id,
            turn=pending.turn,
            approval_id=r.id,
            tool=r.tool,
            arguments=r.arguments,
            expires_at=r.expires_at,
        )
        for r in pending.open
    ]


def closed_outputs(session_id: str, requests: Sequence[ApprovalRequest]) -> list[out.Output]:
    """The turn ended while these were still open: the people asked are told."""
    return [
        out.ApprovalDecided(
            session_id=session_id, approval_id=r.id, decision="cancelled", by="the turn ended"
        )
        for r in requests
    ]


def refusals(pending: PendingRound) -> dict[str, str]:
    """Call id → the result the model sees, for every call that must not run."""
    found: dict[str, str] = {}
    for request in pending.requests:
        decision, by = pending.decisions.get(request.id, ("expired", "timeout"))
        if decision == "deny":
            found[request.call_id] = f"error: the call to {request.tool} was denied by {by}"
        elif decision == "expired":
            found[request.call_id] = (
                f"error: the call to {request.tool} was not approved in time (the request expired); "
                "ask the person before trying again"
            )
        elif decision == "cancelled":
            found[request.call_id] = f"error: the call to {request.tool} was cancelled"
    return found


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call waiting for a person's decision, as the outside sees it."""

    id: str
    session_id: str
    turn: int
    tool: str
    arguments: str  # the JSON text the model wrote
    requested_at: float
    expires_at: float

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "turn": self.turn,
            "tool": self.tool,
            "arguments": self.arguments,
            "requested_at": self.requested_at,
            "expires_at": self.expires_at,
        }


def pending_approvals(session_id: str, pending: PendingRound | None) -> list[PendingApproval]:
    if pending is None:
        return []
    return [
        PendingApproval(r.id, session_id, pending.turn, r.tool, r.arguments, r.requested_at, r.expires_at)
        for r in pending.open
    ]


def check_decision(
    state: SessionState,
    approval_id: str,
    decision: str,
    by: str,
    *,
    approvers: Collection[str] | None,
    approver: str | None,
) -> tuple[ApprovalRequest, Decision]:
    """The open request a person's decision settles, or why it cannot: already decided
    (:class:`ApprovalClosed`), unknown (:class:`ApprovalNotFound`), not a decision
    (``ValueError``), or not theirs to make (:class:`NotAnApprover`; ``approver`` is None for
    the control-token holder)."""
    pending = state.pending_round
    request = pending.find(approval_id) if pending is not None else None
    closed = state.closed_approvals.get(approval_id)
    if closed is not None and (pending is None or approval_id in pending.decisions or request is None):
        raise ApprovalClosed(f"approval {approval_id} was already decided: {closed[0]} by {closed[1]}")
    if pending is None or request is None:
        raise ApprovalNotFound(f"no pending approval {approval_id!r} in session {state.session_id}")
    if approval_id in pending.decisions:
        taken, who = pending.decisions[approval_id]
        raise ApprovalClosed(f"approval {approval_id} was already decided: {taken} by {who}")
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}")
    if approver is not None and approvers and approver not in approvers:
        raise NotAnApprover(f"{by} may not decide on tool calls in this session")
    return request, decision
