"""SessionManager: child-per-entity routing, resident bound, passivation handshake.

It lives on the I/O loop (every method runs there), so routing is a dict lookup
and a queue put — no extra actor hop per message, and no locks. It counts the
commands it routes to each actor; an actor asking to stop reports how many it
received, and only when the counts match (nothing in flight) is it retired.
A command routed to an actor that died is re-routed to a freshly recovered one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pykka

from netclaw.config import Settings
from netclaw.errors import SessionUnavailable
from netclaw.sessions._actor import SessionActor, SessionDeps
from netclaw.sessions._commands import ConfirmStop, PassivateNow, Routed, Shutdown
from netclaw.sessions._phases import Phase

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Resident:
    ref: Any  # pykka.ActorRef[SessionActor]
    routed: int = 0
    phase: Phase = Phase.RECOVERING
    last_used: float = field(default_factory=time.monotonic)


class SessionManager:
    def __init__(self, make_deps: Callable[[SessionManager], SessionDeps]) -> None:
        self._deps = make_deps(self)
        self._resident: dict[str, _Resident] = {}
        self.started = 0  # actors started (recoveries), for /healthz and tests
        self.closed = False  # set by shutdown(): no new sessions may start

    @property
    def deps(self) -> SessionDeps:
        return self._deps

    # -- routing (loop thread) ----------------------------------------------------------------

    def route(self, session_id: str, command: Routed) -> None:
        if self.closed:
            raise SessionUnavailable("netclaw is shutting down; send the message again after it restarts")
        entry = self._resident.get(session_id)
        if entry is not None:
            try:
                self._tell(entry, command)
                return
            except pykka.ActorDeadError:
                log.warning("%s: actor was dead; recovering a new one", session_id)
                self._resident.pop(session_id, None)
        self._tell(self._start(session_id), command)

    def warm(self, session_id: str) -> None:
        """Start (recover) a session without a command: it resumes any unfinished turn."""
        if session_id not in self._resident:
            self._start(session_id)

    def update_settings(self, settings: Settings) -> None:
        """Sessions started from now on use ``settings`` (a config reload)."""
        self._deps = replace(self._deps, settings=settings)

    def _tell(self, entry: _Resident, command: Routed) -> None:
        entry.ref.tell(command)
        entry.routed += 1
        entry.last_used = time.monotonic()

    def _start(self, session_id: str) -> _Resident:
        self._make_room()
        ref = SessionActor.start(session_id, self._deps)
        entry = _Resident(ref)
        self._resident[session_id] = entry
        self.started += 1
        return entry

    def _make_room(self) -> None:
        limit = self._deps.settings.session.max_resident_sessions
        excess = len(self._resident) + 1 - limit
        if excess <= 0:
            return
        # Ask the least recently used idle sessions to passivate now; busy ones are left
        # alone, so the bound is soft under load rather than losing anyone's turn.
        for session_id, entry in list(self._resident.items()):
            if not entry.ref.is_alive():  # stopped behind our back: it holds no room
                del self._resident[session_id]
        excess = len(self._resident) + 1 - limit
        idle = sorted(
            (e for e in self._resident.values() if e.phase is Phase.READY),
            key=lambda e: e.last_used,
        )
        for entry in idle[: max(excess, 0)]:
            with contextlib.suppress(pykka.ActorDeadError):
                self._tell(entry, PassivateNow())

    # -- what sessions tell us (ManagerPort; run on the loop) ---------------------------------

    def phase_changed(self, session_id: str, ref: Any, phase: Phase) -> None:
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:
            entry.phase = phase

    def stop_requested(self, session_id: str, ref: Any, received: int, epoch: int) -> None:
        entry = self._resident.get(session_id)
        if entry is None or entry.ref is not ref:
            return
        if entry.routed != received:
            return  # a command is in flight; receiving it aborts the passivation
        del self._resident[session_id]
        ref.tell(ConfirmStop(epoch))
        log.info("%s: passivated", session_id)

    def actor_failed(self, session_id: str, ref: Any, reason: str) -> None:
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:
            del self._resident[session_id]
        # Queued behind whatever was already routed to it, which it fails rather than drops.
        ref.tell(Shutdown())

    # -- views and shutdown -------------------------------------------------------------------

    def resident(self) -> dict[str, Phase]:
        return {sid: e.phase for sid, e in self._resident.items()}

    def is_resident(self, session_id: str) -> bool:
        return session_id in self._resident

    def ref_of(self, session_id: str) -> Any:
        entry = self._resident.get(session_id)
        return entry.ref if entry else None

    def shutdown(self) -> list[Any]:
        """Tell every session to stop; returns their refs so the caller can wait."""
        self.closed = True
        refs = [e.ref for e in self._resident.values()]
        self._resident.clear()
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Shutdown())
        return refs
