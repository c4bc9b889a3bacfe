"""Sessions: one persistent actor per conversation, and the manager that routes to them.

The pure parts (phases, state, events, the context ladder, turn pieces) import no
pykka, aiohttp, aiosqlite or httpx; only ``_actor`` and ``_manager`` touch pykka.
This face imports the pure parts eagerly and everything else on first use
(PEP 562), so ``import netclaw.sessions._state`` stays light — the import-linter
contracts and ``tests/unit/test_layering.py`` hold it to that. Nothing outside
``netclaw/sessions/`` imports ``netclaw.sessions._*``: take names from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from netclaw.sessions._approvals import PendingApproval
from netclaw.sessions._events import (
    HistoryTrimmed,
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._phases import LEGAL_TRANSITIONS, Phase, check_transition
from netclaw.sessions._state import SessionState, TurnOutcome

if TYPE_CHECKING:
    from netclaw.sessions._actor import SessionActor
    from netclaw.sessions._commands import (
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
        SpawnAnswer,
        Subscribe,
        Unsubscribe,
    )
    from netclaw.sessions._deps import ManagerPort, SessionDeps
    from netclaw.sessions._manager import SessionManager
    from netclaw.sessions._prompt import Prompt, PromptBuilder, build_context
    from netclaw.sessions._recovery import load_state
    from netclaw.sessions._status import ModelChoice, StatusReport
    from netclaw.sessions._subscribers import OutputQueue, Sink, Subscriber, SubscriberSet, Subscription
    from netclaw.sessions._tail import continuity_notice

_LAZY = {
    "ManagerPort": "_deps",
    "SessionActor": "_actor",
    "SessionDeps": "_deps",
    "Admission": "_commands",
    "Announce": "_commands",
    "Cancel": "_commands",
    "CompactNow": "_commands",
    "Decide": "_commands",
    "DetachChild": "_commands",
    "ListApprovals": "_commands",
    "ListChildren": "_commands",
    "ListUndelivered": "_commands",
    "MarkDelivered": "_commands",
    "OwedReports": "_commands",
    "RecordSpawn": "_commands",
    "SpawnAnswer": "_commands",
    "ModelChoice": "_status",
    "PinModel": "_commands",
    "ReportStatus": "_commands",
    "Reset": "_commands",
    "Routed": "_commands",
    "StatusReport": "_status",
    "SendUserMessage": "_commands",
    "Subscribe": "_commands",
    "Unsubscribe": "_commands",
    "SessionManager": "_manager",
    "Prompt": "_prompt",
    "PromptBuilder": "_prompt",
    "load_state": "_recovery",
    "OutputQueue": "_subscribers",
    "Sink": "_subscribers",
    "Subscriber": "_subscribers",
    "SubscriberSet": "_subscribers",
    "Subscription": "_subscribers",
    "build_context": "_prompt",
    "continuity_notice": "_tail",
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
    "build_context",
    "check_transition",
    "continuity_notice",
    "load_state",
]
