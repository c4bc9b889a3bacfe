"""What a session actor needs from the daemon, and what it tells its manager."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pykka

from netclaw.config import LiveSettings
from netclaw.persistence import Journal, MemoryStore
from netclaw.process.metrics import Metrics
from netclaw.process.runtime import IoLoop
from netclaw.process.traces import OFF, Tracing
from netclaw.providers import Provider, Speech
from netclaw.sessions._core.commands import Routed
from netclaw.sessions._core.phases import Phase
from netclaw.skills import LiveSkills
from netclaw.spend import SpendLedger
from netclaw.tools import Questions, ToolRegistry

# Actors are only told things (never proxied), so the ref's actor type does not matter here;
# naming SessionActor would make this module and the actor's import each other.
SessionRef = pykka.ActorRef[Any]


class ManagerPort(Protocol):
    """What a session tells its manager. Called on the I/O loop (via ``IoLoop.call``)."""

    def phase_changed(self, session_id: str, ref: SessionRef, phase: Phase) -> None: ...

    def stop_requested(self, session_id: str, ref: SessionRef, received: int, epoch: int) -> None: ...

    def actor_failed(self, session_id: str, ref: SessionRef, reason: str, moved: bool = False) -> None:
        """The actor broke; ``moved``: another node owns the session now (no restart here)."""
        ...

    def actor_stopped(self, session_id: str, ref: SessionRef, thread: threading.Thread | None = None) -> None:
        """The last word of an actor's thread (``thread``), however it stopped."""
        ...

    def continuity_delivered(self, session_id: str, ref: SessionRef) -> None:
        """The restart notice reached the model: it no longer applies."""
        ...

    def compaction_health(self, session_id: str, failures: int) -> None:
        """How many summaries in a row failed for the session (0: compaction works)."""
        ...

    def reply_owed(self, session_id: str) -> None:
        """A chat session recorded a reply its conversation has not been shown yet (or a
        sub-agent an answer its parent has not admitted yet)."""
        ...

    def route(self, session_id: str, command: Routed) -> object:
        """Tell another session ``command`` (starting it if needed): a parent cancelling
        its sub-agents. Raises SessionUnavailable when shutting down."""
        ...


@dataclass(frozen=True, slots=True)
class SessionDeps:
    io: IoLoop
    journal: Journal
    providers: Mapping[str, Provider]  # by their name under `providers` (every model's)
    tools: ToolRegistry
    live: LiveSettings
    manager: ManagerPort
    memory: MemoryStore | None = None
    metrics: Metrics | None = None
    questions: Questions | None = None  # what tools ask people, waiting on the loop (netclaw.tools)
    skills: LiveSkills | None = None  # the loaded skills, swapped on reload (None: no skills)
    ledger: SpendLedger = field(default_factory=SpendLedger)  # the daemon's spend today (shared)
    tracing: Tracing = OFF  # telemetry.traces: each turn's spans (netclaw.process.traces)
    speech: Speech | None = None  # speech-to-text and text-to-speech (None: neither is configured)

    def provider_of(self, name: str) -> Provider:
        """The provider a model names (the config names only configured ones)."""
        return self.providers[name]
