"""Who is resident, who is stopping, and who waits for room: the resident bound.

The bound is hard: an actor thread counts from its start until the thread is gone (after
``actor_stopped``, its last word), so retired actors still stopping hold their room too.
A session that would start past the bound waits, its commands parked in order, while the
least recently used idle sessions passivate (and every session that becomes idle
meanwhile); it starts as soon as a thread is gone. Busy sessions are never cut short for
room. Loop-confined, like the manager that owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field

import pykka

from netclaw.sessions._core.commands import PassivateNow, Routed, Subscribe
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._shell.deps import SessionRef

log = logging.getLogger(__name__)

THREAD_EXIT_POLL_S = 0.001  # a stopped actor's thread ends microseconds after it says so

# Start a session's actor: (session id, resumed_at, held) → its ref.
Starter = Callable[[str, float | None, bool], SessionRef]


@dataclass(slots=True)
class Resident:
    ref: SessionRef
    routed: int = 0  # commands told to it (compared with what it says it received)
    phase: Phase = Phase.RECOVERING
    last_used: float = field(default_factory=time.monotonic)

    def tell(self, command: Routed) -> None:
        self.ref.tell(command)
        self.routed += 1
        self.last_used = time.monotonic()


@dataclass(slots=True)
class Parked:  # a session waiting for room under the bound, and what it will start with
    commands: list[Routed] = field(default_factory=list)
    resumed_at: float | None = None
    held: bool = False


class Residency:
    def __init__(self, limit: Callable[[], int], start: Starter) -> None:
        self._limit = limit
        self._start = start
        self._resident: dict[str, Resident] = {}
        self._stopping: set[SessionRef] = set()  # retired, thread not yet gone: they hold room
        self._parked: dict[str, Parked] = {}  # waiting for room, first come first started
        self.started = 0  # actors started (recoveries), for /healthz and tests

    # -- reads --------------------------------------------------------------------------------

    def get(self, session_id: str) -> Resident | None:
        return self._resident.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._resident

    def items(self) -> Iterator[tuple[str, Resident]]:
        return iter(list(self._resident.items()))

    def phases(self) -> dict[str, Phase]:
        return {sid: e.phase for sid, e in self._resident.items()}

    def waiting(self, session_id: str) -> bool:
        return session_id in self._parked

    def parked(self) -> list[str]:
        """Sessions waiting for room, first to start first."""
        return list(self._parked)

    def by_last_use(self, leaving: Container[str]) -> list[tuple[str, Phase]]:
        """Resident sessions not in ``leaving``, least recently used first, with their phases."""
        entries = sorted(
            ((sid, e) for sid, e in self._resident.items() if sid not in leaving),
            key=lambda item: item[1].last_used,
        )
        return [(sid, e.phase) for sid, e in entries]

    # -- starting, and waiting for room -------------------------------------------------------

    def admit(
        self,
        session_id: str,
        command: Routed | None,
        *,
        resumed_at: float | None,
        held: bool,
        leaving: Container[str],
    ) -> Resident | None:
        """Start the session and tell it ``command`` when there is room; otherwise park both
        until there is (None), and ask idle sessions to make room."""
        parked = self._parked.get(session_id)
        if parked is None and self._occupied() < self._limit():
            entry = self._begin(session_id, resumed_at, held)
            if command is not None:
                entry.tell(command)
            return entry
        if parked is None:
            parked = self._parked[session_id] = Parked(resumed_at=resumed_at, held=held)
            log.info("%s: waiting for room (%d sessions resident)", session_id, len(self._resident))
        if command is not None:
            parked.commands.append(command)
        self.make_room(leaving)
        return None

    def make_room(self, leaving: Container[str]) -> None:
        """Ask the least recently used idle sessions to passivate, as many as are parked
        beyond what is already stopping or passivating. Busy ones are left alone."""
        wanted = len(self._parked) + self._occupied() - self._limit()
        wanted -= sum(1 for e in self._resident.values() if e.phase is Phase.PASSIVATING)
        if wanted <= 0:
            return
        idle = sorted(
            (e for sid, e in self._resident.items() if e.phase is Phase.READY and sid not in leaving),
            key=lambda e: e.last_used,
        )
        for entry in idle[:wanted]:  # a watched one declines: it stays, and so may the wait
            with contextlib.suppress(pykka.ActorDeadError):
                entry.tell(PassivateNow())

    def start_parked(self, divert: dict[str, list[Routed]]) -> None:
        """Start parked sessions while there is room; one in ``divert`` (being erased) has
        its commands moved there instead, to reach a fresh session afterwards."""
        while self._parked and self._occupied() < self._limit():
            session_id = next(iter(self._parked))
            parked = self._parked.pop(session_id)
            if session_id in divert:
                divert[session_id].extend(parked.commands)
                continue
            entry = self._resident.get(session_id)
            if entry is None:
                entry = self._begin(session_id, parked.resumed_at, parked.held)
            for command in parked.commands:
                entry.tell(command)

    def unpark(self, session_id: str) -> Parked | None:
        return self._parked.pop(session_id, None)

    def take_back(self, session_id: str, sub_id: str) -> None:
        """A parked subscription was closed before its session started: never deliver it."""
        parked = self._parked.get(session_id)
        if parked is not None:
            parked.commands[:] = [
                c for c in parked.commands if not (isinstance(c, Subscribe) and c.sub_id == sub_id)
            ]

    # -- stopping -----------------------------------------------------------------------------

    def retire(self, session_id: str, ref: SessionRef) -> bool:
        """No longer resident (its thread still holds room until gone); False when ``ref``
        is not the session's resident actor."""
        entry = self._resident.get(session_id)
        if entry is None or entry.ref is not ref:
            return False
        del self._resident[session_id]
        self._stopping.add(ref)
        return True

    def free_when_gone(
        self, ref: SessionRef, thread: threading.Thread | None, then: Callable[[], None]
    ) -> None:
        """Give the room back once ``thread`` has ended (the bound counts threads, and a
        thread outlives its last word), then ``then()``."""
        if thread is not None and thread.is_alive():
            asyncio.get_running_loop().call_later(THREAD_EXIT_POLL_S, self.free_when_gone, ref, thread, then)
            return
        self._stopping.discard(ref)
        then()

    def clear(self) -> tuple[list[SessionRef], dict[str, Parked]]:
        """Shutting down: every resident actor's ref, and what was parked."""
        refs = [e.ref for e in self._resident.values()]
        self._resident.clear()
        parked, self._parked = self._parked, {}
        return refs, parked

    def _occupied(self) -> int:
        return len(self._resident) + len(self._stopping)

    def _begin(self, session_id: str, resumed_at: float | None, held: bool) -> Resident:
        entry = Resident(self._start(session_id, resumed_at, held))
        self._resident[session_id] = entry
        self.started += 1
        return entry
