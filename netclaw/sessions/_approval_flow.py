"""Tool calls that wait for a person.

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

import logging
import secrets
import time
from collections.abc import Sequence

from netclaw import outputs as out
from netclaw.errors import ApprovalClosed, ApprovalNotFound, NotAnApprover
from netclaw.messages import ChatMessage, ToolCall
from netclaw.policy import needs_approval
from netclaw.sessions._core import SessionCore
from netclaw.sessions._events import ApprovalDecided, ApprovalRequest, ApprovalRequested, Decision
from netclaw.sessions._loop_ops import start_tool_batch
from netclaw.sessions._state import PendingRound

log = logging.getLogger(__name__)

DECISIONS: tuple[Decision, ...] = ("approve", "deny", "always")


# -- pure steps -------------------------------------------------------------------------------


def gated_calls(calls: Sequence[ToolCall], gated: frozenset[str]) -> list[ToolCall]:
    return [c for c in calls if c.name in gated]


def new_requests(calls: Sequence[ToolCall], now: float, timeout_s: float) -> tuple[ApprovalRequest, ...]:
    return tuple(
        ApprovalRequest(f"ap-{secrets.token_hex(6)}", c.id, c.name, c.arguments or "{}", now, now + timeout_s)
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


def pending_json(pending: PendingRound) -> list[dict[str, object]]:
    return [
        {
            "id": r.id,
            "tool": r.tool,
            "arguments": r.arguments,
            "requested_at": r.requested_at,
            "expires_at": r.expires_at,
            "turn": pending.turn,
        }
        for r in pending.open
    ]


# -- the flow on the actor --------------------------------------------------------------------


class ApprovalFlow(SessionCore):
    def _gate_round(self, assistant: ChatMessage) -> bool:
        """Journal and announce a round that needs approvals; False when none does."""
        run = self.run
        assert run is not None
        names = {c.name for c in assistant.tool_calls}
        gated = frozenset(
            n
            for n in names
            if n not in self.state.granted_tools
            and needs_approval(n, self.audience, self.settings, self.deps.tools.hints(n))
        )
        calls = gated_calls(assistant.tool_calls, gated)
        if not calls:
            return False
        requests = new_requests(calls, time.time(), self.settings.tools.approval_timeout_s)
        self._persist(ApprovalRequested(run.turn, assistant, requests))
        log.info(
            "%s: turn %d waits for approval of %s",
            self.session_id,
            run.turn,
            ", ".join(f"{r.tool} ({r.id})" for r in requests),
        )
        self._await_decisions()
        return True

    def _await_decisions(self) -> None:
        """Announce what is open and wait for it (or run the round when nothing is)."""
        pending, run = self.state.pending_round, self.run
        assert pending is not None and run is not None
        run.pending_calls = pending.assistant
        run.future = None
        run.op_id = self._new_op()  # nothing in flight: any late result is stale
        if not pending.open:
            self._run_decided_round()
            return
        if self.deps.metrics is not None:
            self.deps.metrics.approvals_pending.inc(len(pending.open))
        self._publish(*request_outputs(self.session_id, pending))
        due = min(r.expires_at for r in pending.open)
        self.clock.await_approvals(run.turn, due - time.time())

    def _decide(self, approval_id: str, decision: str, by: str, approver: str | None) -> str:
        pending = self.state.pending_round
        request = pending.find(approval_id) if pending is not None else None
        closed = self.state.closed_approvals.get(approval_id)
        if closed is not None and (pending is None or approval_id in pending.decisions or request is None):
            raise ApprovalClosed(f"approval {approval_id} was already decided: {closed[0]} by {closed[1]}")
        if pending is None or request is None:
            raise ApprovalNotFound(f"no pending approval {approval_id!r} in session {self.session_id}")
        if approval_id in pending.decisions:
            taken, who = pending.decisions[approval_id]
            raise ApprovalClosed(f"approval {approval_id} was already decided: {taken} by {who}")
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}")
        if approver is not None:
            approvers = self.settings.audience(self.audience).approvers
            if approvers and approver not in approvers:
                raise NotAnApprover(f"{by} may not decide on tool calls in this session")
        self._settle(request, decision, by)
        return decision

    def _settle(self, request: ApprovalRequest, decision: Decision, by: str) -> None:
        """Journal one decision (before anything runs) and go on when it was the last."""
        self._persist(ApprovalDecided(request.id, decision, by))
        if self.deps.metrics is not None:
            self.deps.metrics.approvals_pending.dec()
        log.info("%s: %s %s (%s) by %s", self.session_id, decision, request.tool, request.id, by)
        self._publish(
            out.ApprovalDecided(session_id=self.session_id, approval_id=request.id, decision=decision, by=by)
        )
        pending = self.state.pending_round
        assert pending is not None
        if not pending.open:
            self._run_decided_round()

    def _on_approvals_due(self, turn: int) -> None:
        pending, run = self.state.pending_round, self.run
        if pending is None or run is None or run.turn != turn:
            return
        now = time.time()
        for request in pending.open:
            if request.expires_at <= now + 0.001:
                self._settle(request, "expired", "timeout")
                if self.state.pending_round is None:  # the round ran (and maybe the turn ended)
                    return
        pending = self.state.pending_round
        if pending is not None and pending.open and self.run is not None:
            self.clock.await_approvals(pending.turn, min(r.expires_at for r in pending.open) - now)

    def _run_decided_round(self) -> None:
        pending, run = self.state.pending_round, self.run
        assert pending is not None and run is not None
        self.clock.start_turn(run.turn, self.settings.session.turn_timeout_s)
        run.pending_calls = pending.assistant
        run.future = start_tool_batch(
            self.deps.io,
            self.actor_ref,
            self._next_op(),
            self.deps.tools,
            pending.assistant.tool_calls,
            timeout_s=min(self.settings.tools.call_timeout_s, self.settings.session.turn_timeout_s),
            allowed=self.allowed_tools,
            context=self._tool_context(run.turn),
            refusals=refusals(pending),
        )

    def _close_open_approvals(self) -> None:
        """The turn ends while people are still asked (cancel, reset, timeout): tell them."""
        pending = self.state.pending_round
        if pending is None:
            return
        self.clock.end_approvals()
        if self.deps.metrics is not None:
            self.deps.metrics.approvals_pending.dec(len(pending.open))
        for request in pending.open:
            self._publish(
                out.ApprovalDecided(
                    session_id=self.session_id,
                    approval_id=request.id,
                    decision="cancelled",
                    by="the turn ended",
                )
            )

    def _open_approvals(self) -> list[dict[str, object]]:
        pending = self.state.pending_round
        return pending_json(pending) if pending is not None else []
