"""The gateway: the one way every channel, the API, the control room, the scheduler and the
sub-agents reach sessions — a few services, each a module of this package, seen by each
caller through the role it plays (:mod:`._roles`), built together by the daemon
(:class:`Gateway`).

- ``_intake``: input (a message, checked, redacted and admitted; a notice);
- ``_chat``: the chat role of the channels (the chat policy; the rest passed on);
- ``_commands``: chat commands and their answers, ``/prompt``;
- ``_control``: cancel, reset, compact, model, delete, forget, the audit trail;
- ``_reads``: listings, views, status, memories, usage, the cluster, outputs;
- ``_approvals``: tool calls waiting for a decision, tools' questions;
- ``_outbox``: replies owed to a conversation, threads opened to deliver to;
- ``_subagents``: the sub-agents' port;
- shared pieces: ``_ask`` (ask a session, wait for its answer), ``_inbound`` (a message
  and its checks), ``_views`` (what the services answer with).

Adapters depend on the gateway, never the reverse.
"""

from netclaw.gateway._gateway import Gateway
from netclaw.gateway._inbound import (
    MAX_NAME_CHARS,
    ChatPermit,
    Inbound,
    check_inbound,
    parse_prompt_or_fail,
)
from netclaw.gateway._roles import (
    Approvals,
    Auditing,
    ChatInput,
    Commands,
    Control,
    Input,
    Operator,
    Reads,
    SubagentSessions,
    Threads,
    ToolQuestions,
)
from netclaw.gateway._views import (
    CommandDone,
    Recorded,
    SessionsFound,
    SessionSummary,
    SessionView,
    ThreadOpener,
)
from netclaw.identifiers import check_session_id
from netclaw.sessions import Admission, PendingApproval, StatusReport, Subscription, TurnOutcome

__all__ = [
    "MAX_NAME_CHARS",
    "Admission",
    "Approvals",
    "Auditing",
    "ChatInput",
    "ChatPermit",
    "CommandDone",
    "Commands",
    "Control",
    "Gateway",
    "Inbound",
    "Input",
    "Operator",
    "PendingApproval",
    "Reads",
    "Recorded",
    "SessionSummary",
    "SessionView",
    "SessionsFound",
    "StatusReport",
    "SubagentSessions",
    "Subscription",
    "ThreadOpener",
    "Threads",
    "ToolQuestions",
    "TurnOutcome",
    "check_inbound",
    "check_session_id",
    "parse_prompt_or_fail",
]
