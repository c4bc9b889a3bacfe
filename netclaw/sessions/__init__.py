"""Sessions: one persistent actor per conversation, and the manager that routes to them.

The pure parts (phases, state, events, outputs, turn pieces) import no pykka,
aiohttp or aiosqlite; only ``_actor`` and ``_manager`` touch pykka.
"""

from netclaw.policy import channel_of
from netclaw.sessions._actor import ManagerPort, SessionActor, SessionDeps
from netclaw.sessions._commands import Admission, SendUserMessage, Subscribe, Unsubscribe
from netclaw.sessions._events import (
    HistoryTrimmed,
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._manager import SessionManager
from netclaw.sessions._outputs import EVENT_FILTER, LIFECYCLE_EVENTS, Output, OutputFilter
from netclaw.sessions._phases import LEGAL_TRANSITIONS, Phase, PhaseMachine
from netclaw.sessions._prompt import Prompt, PromptBuilder
from netclaw.sessions._recovery import load_state
from netclaw.sessions._state import SessionState, TurnOutcome
from netclaw.sessions._subscribers import OutputQueue, Sink, Subscriber, SubscriberSet
from netclaw.sessions._turn import build_context

__all__ = [
    "EVENT_FILTER",
    "LEGAL_TRANSITIONS",
    "LIFECYCLE_EVENTS",
    "Admission",
    "HistoryTrimmed",
    "InputAdmitted",
    "ManagerPort",
    "Output",
    "OutputFilter",
    "OutputQueue",
    "Phase",
    "PhaseMachine",
    "Prompt",
    "PromptBuilder",
    "SendUserMessage",
    "SessionActor",
    "SessionDeps",
    "SessionEvent",
    "SessionManager",
    "SessionState",
    "SessionTitleSet",
    "Sink",
    "StepRecorded",
    "Subscribe",
    "Subscriber",
    "SubscriberSet",
    "TurnOutcome",
    "TurnRecorded",
    "TurnStarted",
    "Unsubscribe",
    "build_context",
    "channel_of",
    "load_state",
]
