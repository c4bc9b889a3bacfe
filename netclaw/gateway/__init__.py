"""The gateway: the one surface every channel, the API and the CLI use to reach sessions
(:class:`Gateway`), seen by each through the role it plays (:mod:`._roles`)."""

from netclaw.gateway._gateway import (
    MAX_NAME_CHARS,
    Admission,
    ChatPermit,
    CommandDone,
    Gateway,
    Inbound,
    PendingApproval,
    SessionsFound,
    SessionSummary,
    SessionView,
    StatusReport,
    Subscription,
    TurnOutcome,
    check_inbound,
    check_session_id,
    parse_prompt_or_fail,
)
from netclaw.gateway._roles import ChatInput, Control, Reads

__all__ = [
    "MAX_NAME_CHARS",
    "Admission",
    "ChatInput",
    "ChatPermit",
    "CommandDone",
    "Control",
    "Gateway",
    "Inbound",
    "PendingApproval",
    "Reads",
    "SessionSummary",
    "SessionView",
    "SessionsFound",
    "StatusReport",
    "Subscription",
    "TurnOutcome",
    "check_inbound",
    "check_session_id",
    "parse_prompt_or_fail",
]
