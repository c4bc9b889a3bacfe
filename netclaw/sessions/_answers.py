"""What a session answers whatever it is doing (pure): its status, the approvals it waits
for, the replies its conversation is still owed — and the outbox's word that one was
shown (recorded). Nothing here changes the activity."""

from __future__ import annotations

from netclaw.sessions._approvals import pending_json
from netclaw.sessions._commands import ListApprovals, ListUndelivered, MarkDelivered, ReportStatus
from netclaw.sessions._core import Core
from netclaw.sessions._events import ReplyDelivered
from netclaw.sessions._phases import Phase
from netclaw.sessions._status import owed_replies, status_report

Question = ReportStatus | ListApprovals | MarkDelivered | ListUndelivered


def answer(core: Core, phase: Phase, command: Question) -> None:
    state = core.state
    match command:
        case ReportStatus(reply=reply):
            core.answer(reply, status_report(state, phase, core.context, core.now()))
        case ListApprovals(reply=reply):
            pending = state.pending_round
            core.answer(reply, pending_json(pending) if pending is not None else [])
        case MarkDelivered(turn=delivered, message_ids=ids, reply=reply):
            owed = delivered in state.undelivered
            if owed:
                core.persist(ReplyDelivered(delivered, ids))
            core.answer(reply, owed)
        case ListUndelivered(reply=reply):
            core.answer(reply, owed_replies(state))
