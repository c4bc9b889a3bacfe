"""What a session answers without changing course (pure): its status, the approvals it
waits for, what it still owes — chat replies not yet shown, a sub-agent's reports not yet
admitted by its parent — and its sub-agents. Marking an answer delivered records it."""

from __future__ import annotations

from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.approvals import pending_approvals
from netclaw.sessions._core.commands import (
    ListApprovals,
    ListChildren,
    ListUndelivered,
    MarkDelivered,
    OwedReports,
    ReportStatus,
)
from netclaw.sessions._core.journal.events import ReplyDelivered
from netclaw.sessions._core.status import owed_replies, status_report

Read = ReportStatus | ListApprovals | MarkDelivered | ListUndelivered | OwedReports | ListChildren


def handle(core: Core, command: Read) -> None:
    state = core.state
    match command:
        case ReportStatus(reply=reply):
            core.answer(reply, status_report(state, core.phase, core.context, core.now()))
        case ListApprovals(reply=reply):
            core.answer(reply, pending_approvals(core.session_id, state.pending_round))
        case MarkDelivered(turn=delivered, message_ids=ids, reply=reply):
            owed = delivered in state.undelivered or delivered in state.reports_owed
            if owed:
                core.persist(ReplyDelivered(delivered, ids))
            core.answer(reply, owed)
        case ListUndelivered(reply=reply):
            core.answer(reply, owed_replies(state))
        case OwedReports(reply=reply):
            core.answer(reply, [state.reports_owed[t] for t in sorted(state.reports_owed)])
        case ListChildren(reply=reply):
            core.answer(reply, [state.children[n] for n in sorted(state.children)])
