"""SessionManager: child-per-entity routing, resident bound, passivation handshake.

It lives on the I/O loop (every method runs there), so routing is a dict lookup
and a queue put — no extra actor hop per message, and no locks. It counts the
commands it routes to each actor; an actor asking to stop reports how many it
received, and only when the counts match (nothing in flight) is it retired.
A command routed to an actor that died is re-routed to a freshly recovered one;
one that broke owing replies is restarted (:mod:`._restarts`).

The resident bound is hard: an actor thread counts from its start until the thread
is gone (after ``actor_stopped``, its last word), so retired actors still stopping
hold their room too. A session that would start past the
bound waits, its commands parked in order, while the least recently used idle
sessions passivate (and every session that becomes idle meanwhile); it starts as
soon as a thread is gone. Busy sessions are never cut short for room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pykka

from netclaw import outputs as out
from netclaw.errors import SessionUnavailable
from netclaw.outputs import OutputFilter
from netclaw.sessions._actor import SessionActor
from netclaw.sessions._commands import (
    ConfirmStop,
    PassivateNow,
    Release,
    Routed,
    Shutdown,
    Subscribe,
    Unsubscribe,
    refuse,
)
from netclaw.sessions._deps import SessionDeps, SessionRef
from netclaw.sessions._phases import Phase
from netclaw.sessions._restarts import Restarts
from netclaw.sessions._subscribers import OutputQueue, Subscription
from netclaw.sessions._warming import WarmStart

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
THREAD_EXIT_POLL_S = 0.001  # a stopped actor's thread ends microseconds after it says so


@dataclass(slots=True)
class _Resident:
    ref: SessionRef
    routed: int = 0
    phase: Phase = Phase.RECOVERING
    last_used: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Parked:  # a session waiting for room under the bound, and what it will start with
    commands: list[Routed] = field(default_factory=list)
    resumed_at: float | None = None
    held: bool = False


class SessionManager:
    def __init__(self, make_deps: Callable[[SessionManager], SessionDeps]) -> None:
        self._deps = make_deps(self)
        self._resident: dict[str, _Resident] = {}
        self._stopping: set[SessionRef] = set()  # retired, thread not yet gone: they hold room
        self._parked: dict[str, _Parked] = {}  # waiting for room, first come first started
        self._restarts = Restarts(self._deps.journal, self._admit, self._busy)
        # Sessions being erased: commands for them wait here, then go to a fresh session.
        self._erasing: dict[str, list[Routed]] = {}
        self._warm = WarmStart(self._admit, self._busy, lambda: self.closed)
        self._reply_listeners: list[Callable[[str], None]] = []
        self._stop_listeners: list[Callable[[str], None]] = []
        self.started = 0  # actors started (recoveries), for /healthz and tests
        self.compaction_failing: dict[str, int] = {}  # session → failed summaries in a row
        self.closed = False  # set by shutdown(): no new sessions may start

    # -- routing (loop thread) ----------------------------------------------------------------

    def route(self, session_id: str, command: Routed) -> SessionRef | None:
        """Tell ``command`` to the session's actor, starting (recovering) it if needed.
        None when the session is being erased: the command goes to its successor after."""
        if self.closed:
            raise SessionUnavailable("netclaw is shutting down; send the message again after it restarts")
        waiting = self._erasing.get(session_id)
        if waiting is not None:
            waiting.append(command)
            return None
        entry = self._resident.get(session_id)
        if entry is not None:
            try:
                self._tell(entry, command)
                return entry.ref
            except pykka.ActorDeadError:
                log.warning("%s: actor was dead; recovering a new one", session_id)
                self._stopping.add(self._resident.pop(session_id).ref)
        entry = self._admit(session_id, command)
        return entry.ref if entry is not None else None

    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription:
        """Watch a session (starting it if it is not resident)."""
        queue = OutputQueue(asyncio.get_running_loop())
        sub_id = f"sub_{uuid.uuid4().hex[:12]}"
        ref = self.route(session_id, Subscribe(sub_id, mask, queue))
        return Subscription(session_id, sub_id, queue, lambda: self._unsubscribe(session_id, sub_id, ref))

    def _unsubscribe(self, session_id: str, sub_id: str, ref: SessionRef | None) -> None:
        # Only the actor we subscribed to has us; one that stopped took its subscribers
        # with it, and waking the session (a full recovery) just to remove us is waste.
        parked = self._parked.get(session_id)
        if parked is not None:  # never delivered: take it back
            parked.commands[:] = [
                c for c in parked.commands if not (isinstance(c, Subscribe) and c.sub_id == sub_id)
            ]
        entry = self._resident.get(session_id)
        if entry is None or (ref is not None and entry.ref is not ref):
            return
        with contextlib.suppress(pykka.ActorDeadError):
            self._tell(entry, Unsubscribe(sub_id))

    def warm(self, session_id: str) -> None:
        """Start (recover) a session without a command: it resumes any unfinished turn. One
        that failed here restarts on its own backoff instead."""
        if (
            session_id not in self._resident
            and not self._restarts.failed_here(session_id)
            and not self.closed
        ):
            self._admit(session_id)

    async def warm_all(
        self,
        session_ids: Sequence[str],
        *,
        concurrency: int,
        resumed_at: float | None = None,
        resumed: frozenset[str] = frozenset(),
        timeout_s: float = 120.0,
    ) -> int:
        """Recover sessions before anyone talks to them (see :class:`~._warming.WarmStart`)."""
        return await self._warm.warm_all(
            session_ids, concurrency=concurrency, resumed_at=resumed_at, resumed=resumed, timeout_s=timeout_s
        )

    def release_held(self) -> None:
        """Let warmed sessions go on: resume their interrupted turns and queued input."""
        for session_id in self._warm.take_held():
            entry = self._resident.get(session_id)
            if entry is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    self._tell(entry, Release())

    def continuity_of(self, session_id: str) -> float | None:
        """When the restart that warmed this session stopped netclaw, while the model has
        not been told yet."""
        return self._warm.continuity.get(session_id)

    def active_sessions(self) -> list[str]:
        """Sessions worth warming after a graceful restart: resident and not passivating."""
        return sorted(sid for sid, e in self._resident.items() if e.phase is not Phase.PASSIVATING)

    def _tell(self, entry: _Resident, command: Routed) -> None:
        entry.ref.tell(command)
        entry.routed += 1
        entry.last_used = time.monotonic()

    def _admit(
        self,
        session_id: str,
        command: Routed | None = None,
        *,
        resumed_at: float | None = None,
        held: bool = False,
    ) -> _Resident | None:
        """Start the session and tell it ``command`` when there is room under the bound;
        otherwise park both until there is (None)."""
        parked = self._parked.get(session_id)
        if parked is None and self._occupied() < self._limit():
            entry = self._start(session_id, resumed_at=resumed_at, held=held)
            if command is not None:
                self._tell(entry, command)
            return entry
        if parked is None:
            parked = self._parked[session_id] = _Parked(resumed_at=resumed_at, held=held)
            log.info("%s: waiting for room (%d sessions resident)", session_id, len(self._resident))
        if command is not None:
            parked.commands.append(command)
        self._make_room()
        return None

    def _occupied(self) -> int:
        return len(self._resident) + len(self._stopping)

    def _limit(self) -> int:
        return self._deps.live.current.session.max_resident_sessions

    def _start(self, session_id: str, *, resumed_at: float | None = None, held: bool = False) -> _Resident:
        # A session warmed after a restart that passivated before the model heard of it
        # still owes the notice when it wakes.
        resumed = resumed_at or self._warm.continuity.get(session_id)
        ref = SessionActor.start(session_id, self._deps, resumed, held=held)
        entry = _Resident(ref)
        self._resident[session_id] = entry
        self.started += 1
        return entry

    def _make_room(self) -> None:
        """Ask the least recently used idle sessions to passivate, as many as are parked
        beyond what is already stopping or passivating. Busy ones are left alone."""
        wanted = len(self._parked) + self._occupied() - self._limit()
        wanted -= sum(1 for e in self._resident.values() if e.phase is Phase.PASSIVATING)
        if wanted <= 0:
            return
        idle = sorted(
            (e for e in self._resident.values() if e.phase is Phase.READY),
            key=lambda e: e.last_used,
        )
        for entry in idle[:wanted]:  # a watched one declines: it stays, and so may the wait
            with contextlib.suppress(pykka.ActorDeadError):
                self._tell(entry, PassivateNow())

    def _start_parked(self) -> None:
        while self._parked and self._occupied() < self._limit() and not self.closed:
            session_id = next(iter(self._parked))
            parked = self._parked.pop(session_id)
            if session_id in self._erasing:  # its commands wait for the erase, then start anew
                self._erasing[session_id].extend(parked.commands)
                continue
            entry = self._resident.get(session_id)
            if entry is None:
                entry = self._start(session_id, resumed_at=parked.resumed_at, held=parked.held)
            for command in parked.commands:
                self._tell(entry, command)

    async def erase(self, session_id: str, erase: Callable[[], Awaitable[None]]) -> None:
        """Stop the session's actor, then ``erase`` its records. A command that arrives
        meanwhile waits and then reaches a fresh session, so a concurrent message either
        landed before (and is erased with the rest) or starts anew — never half-deleted."""
        if session_id in self._erasing:
            raise SessionUnavailable(f"session {session_id} is already being deleted")
        self._erasing[session_id] = []
        try:
            self._restarts.forget(session_id)
            entry = self._resident.pop(session_id, None)
            if entry is not None:
                self._stopping.add(entry.ref)
                with contextlib.suppress(pykka.ActorDeadError):
                    entry.ref.tell(Shutdown())
                # The stop is waited for on a worker thread: the loop never blocks on an actor.
                stopped = await asyncio.to_thread(entry.ref.actor_stopped.wait, STOP_TIMEOUT_S)
                if not stopped:
                    raise SessionUnavailable(f"session {session_id} did not stop; nothing was deleted")
            await erase()
        finally:
            waiting = self._erasing.pop(session_id)
            for command in waiting:
                try:
                    self.route(session_id, command)
                except SessionUnavailable as exc:  # shutting down meanwhile: answer, never drop
                    notice = out.Error(session_id=session_id, code=exc.code, message=str(exc))
                    refuse(command, exc, notice)

    # -- what sessions tell us (ManagerPort; run on the loop) ---------------------------------

    def phase_changed(self, session_id: str, ref: SessionRef, phase: Phase) -> None:
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:
            entry.phase = phase
        if phase is not Phase.RECOVERING:
            self._warm.recovered(session_id)
        if phase is Phase.READY and self._parked:
            self._make_room()

    def actor_stopped(self, session_id: str, ref: SessionRef, thread: threading.Thread | None = None) -> None:
        """The actor's thread is ending: its room goes to the first parked session once the
        thread is gone (the bound counts threads, and a thread outlives its last word)."""
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:  # stopped behind our back
            del self._resident[session_id]
            self._stopping.add(ref)
        self._notify(self._stop_listeners, session_id)
        self._free_when_gone(ref, thread)

    def _free_when_gone(self, ref: SessionRef, thread: threading.Thread | None) -> None:
        if thread is not None and thread.is_alive():
            asyncio.get_running_loop().call_later(THREAD_EXIT_POLL_S, self._free_when_gone, ref, thread)
            return
        self._stopping.discard(ref)
        self._start_parked()

    def _busy(self, session_id: str) -> bool:
        return session_id in self._resident or session_id in self._parked

    @property
    def restarts(self) -> int:  # broken actors restarted because they owed replies
        return self._restarts.restarts

    def continuity_delivered(self, session_id: str, ref: SessionRef) -> None:
        self._warm.continuity.pop(session_id, None)

    def on_reply_owed(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(session_id)`` (on the loop) whenever a chat session records a reply
        its conversation still owes (the channels' outbox watches this)."""
        self._reply_listeners.append(listener)

    def on_session_stopped(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(session_id)`` (on the loop) whenever a session's actor has stopped."""
        self._stop_listeners.append(listener)

    def compaction_health(self, session_id: str, failures: int) -> None:
        if failures:
            self.compaction_failing[session_id] = failures
        else:
            self.compaction_failing.pop(session_id, None)

    def reply_owed(self, session_id: str) -> None:
        self._notify(self._reply_listeners, session_id)

    @staticmethod
    def _notify(listeners: list[Callable[[str], None]], session_id: str) -> None:
        for listener in list(listeners):
            try:
                listener(session_id)
            except Exception:  # one listener failing must not cost the others
                log.exception("%s: a session listener failed", session_id)

    def stop_requested(self, session_id: str, ref: SessionRef, received: int, epoch: int) -> None:
        entry = self._resident.get(session_id)
        if entry is None or entry.ref is not ref or entry.routed != received:
            return  # gone, or a command is in flight: receiving it aborts the passivation
        del self._resident[session_id]
        self._stopping.add(ref)
        self._restarts.forget(session_id)
        ref.tell(ConfirmStop(epoch))
        log.info("%s: passivated", session_id)

    def actor_failed(self, session_id: str, ref: SessionRef, reason: str, moved: bool = False) -> None:
        self._warm.recovered(session_id)
        self._retire(session_id, ref)
        if not self.closed and not moved:
            self._restarts.schedule(session_id)

    def passivate(self, session_id: str) -> None:
        """Passivate the session now if it is idle (it declines otherwise)."""
        entry = self._resident.get(session_id)
        if entry is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                self._tell(entry, PassivateNow())

    def lease_lost(self, session_id: str) -> None:
        """Another node took the session over (this node's lease expired unrenewed): the
        actor here goes, unrestarted; its writes would be refused anyway."""
        entry = self._resident.get(session_id)
        if entry is not None:
            self._retire(session_id, entry.ref)

    def _retire(self, session_id: str, ref: SessionRef) -> None:
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:
            del self._resident[session_id]
            self._stopping.add(ref)
        # Queued behind whatever was already routed to it, which it fails rather than drops.
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(Shutdown())

    # -- views and shutdown -------------------------------------------------------------------

    def resident(self) -> dict[str, Phase]:
        return {sid: e.phase for sid, e in self._resident.items()}

    def parked(self) -> list[str]:
        """Sessions waiting for room under the resident bound, first to start first."""
        return list(self._parked)

    def is_resident(self, session_id: str) -> bool:
        return session_id in self._resident

    def ref_of(self, session_id: str) -> SessionRef | None:
        entry = self._resident.get(session_id)
        return entry.ref if entry else None

    def shutdown(self) -> list[SessionRef]:
        """Tell every session to stop; returns their refs so the caller can wait."""
        self.closed = True
        self._restarts.close()
        refs = [e.ref for e in self._resident.values()]
        self._resident.clear()
        parked, self._parked = self._parked, {}
        for session_id, waiting in parked.items():  # never started: answer them, never drop
            exc = SessionUnavailable("netclaw is shutting down; send the message again after it restarts")
            for command in waiting.commands:
                refuse(command, exc, out.Error(session_id=session_id, code=exc.code, message=str(exc)))
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Shutdown())
        return refs
