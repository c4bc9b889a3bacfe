"""Sessions: one persistent actor per conversation, and the manager that routes to them.

Three private packages: ``_core``, the pure session (a reducer: command → effects; no
pykka, aiohttp, aiosqlite or httpx, no clock or id source); ``_shell``, the pykka actor
that carries the effects out; ``_residency``, the manager that routes to actors and keeps
who is resident. This face imports pure parts eagerly and everything else on first use
(PEP 562), so importing the pure core stays light — the import-linter contracts and
``tests/unit/test_layering.py`` hold it to that. Nothing outside ``netclaw/sessions/``
imports ``netclaw.sessions._*``: take names from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from netclaw.sessions._core.approvals import PendingApproval
from netclaw.sessions._core.journal.events import (
    HistoryTrimmed,
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import SessionState, TurnOutcome
from netclaw.sessions._core.phases import LEGAL_TRANSITIONS, Phase, check_transition

if TYPE_CHECKING:
    from netclaw.sessions._core.commands import (
        Admission,
        Announce,
        Cancel,
        CompactNow,
        Decide,
        DetachChild,
        ListApprovals,
        ListChildren,
        ListUndelivered,
        MarkDelivered,
        OwedReports,
        PinModel,
        RecordSpawn,
        ReportStatus,
        Reset,
        Routed,
        SendUserMessage,
        SetVoice,
        SpawnAnswer,
        Subscribe,
        Unsubscribe,
    )
    from netclaw.sessions._core.context.prompt import Prompt, PromptBuilder, build_context
    from netclaw.sessions._core.context.tail import continuity_notice
    from netclaw.sessions._core.status import ModelChoice, StatusReport, VoiceChoice
    from netclaw.sessions._residency.manager import SessionManager
    from netclaw.sessions._shell.actor import SessionActor
    from netclaw.sessions._shell.deps import ManagerPort, SessionDeps
    from netclaw.sessions._shell.recovery import load_state
    from netclaw.sessions._subscribers import OutputQueue, Sink, Subscriber, SubscriberSet, Subscription

_LAZY = {
    "ManagerPort": "_shell.deps",
    "SessionActor": "_shell.actor",
    "SessionDeps": "_shell.deps",
    "Admission": "_core.commands",
    "Announce": "_core.commands",
    "Cancel": "_core.commands",
    "CompactNow": "_core.commands",
    "Decide": "_core.commands",
    "DetachChild": "_core.commands",
    "ListApprovals": "_core.commands",
    "ListChildren": "_core.commands",
    "ListUndelivered": "_core.commands",
    "MarkDelivered": "_core.commands",
    "OwedReports": "_core.commands",
    "RecordSpawn": "_core.commands",
    "SpawnAnswer": "_core.commands",
    "ModelChoice": "_core.status",
    "PinModel": "_core.commands",
    "SetVoice": "_core.commands",
    "VoiceChoice": "_core.status",
    "ReportStatus": "_core.commands",
    "Reset": "_core.commands",
    "Routed": "_core.commands",
    "StatusReport": "_core.status",
    "SendUserMessage": "_core.commands",
    "Subscribe": "_core.commands",
    "Unsubscribe": "_core.commands",
    "SessionManager": "_residency.manager",
    "Prompt": "_core.context.prompt",
    "PromptBuilder": "_core.context.prompt",
    "load_state": "_shell.recovery",
    "OutputQueue": "_subscribers",
    "Sink": "_subscribers",
    "Subscriber": "_subscribers",
    "SubscriberSet": "_subscribers",
    "Subscription": "_subscribers",
    "build_context": "_core.context.prompt",
    "continuity_notice": "_core.context.tail",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "LEGAL_TRANSITIONS",
    "Admission",
    "Announce",
    "Cancel",
    "CompactNow",
    "Decide",
    "DetachChild",
    "HistoryTrimmed",
    "InputAdmitted",
    "ListApprovals",
    "ListChildren",
    "ListUndelivered",
    "ManagerPort",
    "MarkDelivered",
    "ModelChoice",
    "OutputQueue",
    "OwedReports",
    "PendingApproval",
    "Phase",
    "PinModel",
    "Prompt",
    "PromptBuilder",
    "RecordSpawn",
    "ReportStatus",
    "Reset",
    "Routed",
    "SendUserMessage",
    "SessionActor",
    "SessionDeps",
    "SessionEvent",
    "SessionManager",
    "SessionState",
    "SessionTitleSet",
    "SetVoice",
    "Sink",
    "SpawnAnswer",
    "StatusReport",
    "StepRecorded",
    "Subscribe",
    "Subscriber",
    "SubscriberSet",
    "Subscription",
    "TurnOutcome",
    "TurnRecorded",
    "TurnStarted",
    "Unsubscribe",
    "VoiceChoice",
    "build_context",
    "check_transition",
    "continuity_notice",
    "load_state",
]
