"""SessionManager: child-per-entity routing, the passivation handshake, and what actors
tell it.

It lives on the I/O loop (every method runs there), so routing is a dict lookup
and a queue put — no extra actor hop per message, and no locks. It counts the
commands it routes to each actor; an actor asking to stop reports how many it
received, and only when the counts match (nothing in flight) is it retired.
A command routed to an actor that died is re-routed to a freshly recovered one;
one that broke owing replies is restarted (:mod:`netclaw.sessions._residency.restarts`). Who is resident and
who waits for room under the hard bound is :mod:`netclaw.sessions._residency.residency`'s; warm start
:mod:`netclaw.sessions._residency.warming`'s.

Several nodes: a session can be handed off (:meth:`SessionManager.hand_off`: a drain, a
move, the rebalancer) and leaves once its turn is done (:mod:`netclaw.sessions._residency.handoff`). While
``draining`` no session starts here: its input goes to another node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence

import pykka

from netclaw import outputs as out
from netclaw.errors import SessionMoved, SessionUnavailable
from netclaw.outputs import OutputFilter
from netclaw.sessions._core.commands import (
    ConfirmStop,
    HandOff,
    PassivateNow,
    Release,
    Routed,
    Shutdown,
    Subscribe,
    Unsubscribe,
    refuse,
)
from netclaw.sessions._core.phases import Phase
from netclaw.sessions._residency.handoff import Departures
from netclaw.sessions._residency.residency import Residency, Resident
from netclaw.sessions._residency.restarts import Restarts
from netclaw.sessions._residency.warming import WarmStart
from netclaw.sessions._shell.actor import SessionActor
from netclaw.sessions._shell.deps import SessionDeps, SessionRef
from netclaw.sessions._subscribers import OutputQueue, Subscription

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0


class SessionManager:
    def __init__(self, make_deps: Callable[[SessionManager], SessionDeps]) -> None:
        self._deps = make_deps(self)
        self._residents = Residency(
            lambda: self._deps.live.current.session.max_resident_sessions, self._start
        )
        self._restarts = Restarts(self._deps.journal, self._admit, self._busy)
        # Sessions being erased: commands for them wait here, then go to a fresh session.
        self._erasing: dict[str, list[Routed]] = {}
        self._warm = WarmStart(self._admit, self._busy, lambda: self.closed)
        self._reply_listeners: list[Callable[[str], None]] = []
        self._stop_listeners: list[Callable[[str], None]] = []
        self._departures = Departures()  # handed off, their actors not yet stopped
        self.draining = False  # set by the cluster: no session starts here (they go elsewhere)
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
        if self._departures.hold(session_id, command):  # refused (SessionMoved) once it stopped
            return None
        entry = self._residents.get(session_id)
        if entry is not None:
            try:
                entry.tell(command)
                return entry.ref
            except pykka.ActorDeadError:
                log.warning("%s: actor was dead; recovering a new one", session_id)
                self._residents.retire(session_id, entry.ref)
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
        self._residents.take_back(session_id, sub_id)  # never delivered: take it back
        entry = self._residents.get(session_id)
        if entry is None or (ref is not None and entry.ref is not ref) or session_id in self._departures:
            return  # a session leaving closes every subscription itself; HandOff is its last command
        with contextlib.suppress(pykka.ActorDeadError):
            entry.tell(Unsubscribe(sub_id))

    def warm(self, session_id: str) -> None:
        """Start (recover) a session without a command: it resumes any unfinished turn. One
        that failed here restarts on its own backoff instead."""
        if (
            session_id not in self._residents
            and not self._restarts.failed_here(session_id)
            and not self.closed
            and not self.draining
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
        """Recover sessions before anyone talks to them (see :class:`~netclaw.sessions._residency.warming.WarmStart`)."""
        return await self._warm.warm_all(
            session_ids, concurrency=concurrency, resumed_at=resumed_at, resumed=resumed, timeout_s=timeout_s
        )

    def release_held(self) -> None:
        """Let warmed sessions go on: resume their interrupted turns and queued input."""
        for session_id in self._warm.take_held():
            entry = self._residents.get(session_id)
            if entry is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    entry.tell(Release())

    def continuity_of(self, session_id: str) -> float | None:
        """When the restart that warmed this session stopped netclaw, while the model has
        not been told yet."""
        return self._warm.continuity.get(session_id)

    def active_sessions(self) -> list[str]:
        """Sessions worth warming after a graceful restart: resident and not passivating."""
        return sorted(
            sid for sid, phase in self._residents.phases().items() if phase is not Phase.PASSIVATING
        )

    def _admit(
        self,
        session_id: str,
        command: Routed | None = None,
        *,
        resumed_at: float | None = None,
        held: bool = False,
    ) -> Resident | None:
        """Start the session and tell it ``command``, or park both until there is room
        (None). Draining: the command is refused, for another node to take (None)."""
        if self.draining:
            if command is not None:
                refuse(command, SessionMoved(session_id, "this node is draining"), None)
            return None
        return self._residents.admit(
            session_id, command, resumed_at=resumed_at, held=held, leaving=self._departures
        )

    def _start(self, session_id: str, resumed_at: float | None, held: bool) -> SessionRef:
        # A session warmed after a restart that passivated before the model heard of it
        # still owes the notice when it wakes.
        resumed = resumed_at or self._warm.continuity.get(session_id)
        return SessionActor.start(session_id, self._deps, resumed, held=held)

    def _start_parked(self) -> None:
        if not self.closed:
            self._residents.start_parked(divert=self._erasing)

    async def erase(self, session_id: str, erase: Callable[[], Awaitable[None]]) -> None:
        """Stop the session's actor, then ``erase`` its records. A command that arrives
        meanwhile waits and then reaches a fresh session, so a concurrent message either
        landed before (and is erased with the rest) or starts anew — never half-deleted."""
        if session_id in self._erasing:
            raise SessionUnavailable(f"session {session_id} is already being deleted")
        self._erasing[session_id] = []
        try:
            self._restarts.forget(session_id)
            entry = self._residents.get(session_id)
            if entry is not None:
                self._residents.retire(session_id, entry.ref)
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
        entry = self._residents.get(session_id)
        if entry is not None and entry.ref is ref:
            entry.phase = phase
        if phase is not Phase.RECOVERING:
            self._warm.recovered(session_id)
        if phase is Phase.READY and self._residents.parked():
            self._residents.make_room(self._departures)

    def actor_stopped(self, session_id: str, ref: SessionRef, thread: threading.Thread | None = None) -> None:
        """The actor's thread is ending: its room goes to the first parked session once the
        thread is gone (the bound counts threads, and a thread outlives its last word)."""
        self._residents.retire(session_id, ref)  # stopped behind our back, if still resident
        self._departures.left(session_id, ref)
        self._notify(self._stop_listeners, session_id)
        self._residents.free_when_gone(ref, thread, self._start_parked)

    def _busy(self, session_id: str) -> bool:
        """Resident or waiting for room already — or this node takes no new session."""
        return self.draining or session_id in self._residents or self._residents.waiting(session_id)

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
        entry = self._residents.get(session_id)
        if entry is None or entry.ref is not ref or entry.routed != received:
            return  # gone, or a command is in flight: receiving it aborts the passivation
        self._residents.retire(session_id, ref)
        self._restarts.forget(session_id)
        ref.tell(ConfirmStop(epoch))
        log.info("%s: passivated", session_id)

    def actor_failed(self, session_id: str, ref: SessionRef, reason: str, moved: bool = False) -> None:
        self._warm.recovered(session_id)
        self._retire(session_id, ref)
        if not self.closed and not moved and session_id not in self._departures:
            self._restarts.schedule(session_id)

    def passivate(self, session_id: str) -> None:
        """Passivate the session now if it is idle (it declines otherwise)."""
        entry = self._residents.get(session_id)
        if entry is not None and session_id not in self._departures:
            with contextlib.suppress(pykka.ActorDeadError):
                entry.tell(PassivateNow())

    def lease_lost(self, session_id: str) -> None:
        """Another node took the session over (this node's lease expired unrenewed): the
        actor here goes, unrestarted; its writes would be refused anyway."""
        entry = self._residents.get(session_id)
        if entry is not None:
            self._retire(session_id, entry.ref)

    # -- handing a session off (several nodes) -------------------------------------------------

    def hand_off(self, session_id: str) -> asyncio.Future[None] | None:
        """Let the session leave this node: it finishes the turn it is in (none is cut
        short), starts no other, and stops; its queued input stays in the journal for its
        next node. The future settles once its actor has stopped (its lease is released
        then, or handed on); None when it is not resident here."""
        parked = self._residents.unpark(session_id)
        if parked is not None:  # never started here: what waited goes to its next node
            moved = SessionMoved(session_id)
            for command in parked.commands:
                refuse(command, moved, None)
        entry = self._residents.get(session_id)
        if entry is None:
            return None
        already = session_id in self._departures
        gone = self._departures.begin(session_id, entry.ref)
        if not already:
            try:
                entry.tell(HandOff())  # the last command it gets: later ones are held
            except pykka.ActorDeadError:
                self._residents.retire(session_id, entry.ref)
                self._departures.left(session_id)
        return gone

    def leaving(self, session_id: str) -> bool:
        """Handed off, its actor not yet stopped."""
        return session_id in self._departures

    async def gone(self, session_id: str, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until a session handed off has left."""
        return await self._departures.gone(session_id, timeout_s)

    def by_last_use(self) -> list[tuple[str, Phase]]:
        """Resident sessions not leaving, least recently used first, with their phases."""
        return self._residents.by_last_use(self._departures)

    def _retire(self, session_id: str, ref: SessionRef) -> None:
        self._residents.retire(session_id, ref)
        # Queued behind whatever was already routed to it, which it fails rather than drops.
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(Shutdown())

    # -- views and shutdown -------------------------------------------------------------------

    @property
    def started(self) -> int:  # actors started (recoveries), for /healthz and tests
        return self._residents.started

    def resident(self) -> dict[str, Phase]:
        return self._residents.phases()

    def parked(self) -> list[str]:
        """Sessions waiting for room under the resident bound, first to start first."""
        return self._residents.parked()

    def is_resident(self, session_id: str) -> bool:
        return session_id in self._residents

    def ref_of(self, session_id: str) -> SessionRef | None:
        entry = self._residents.get(session_id)
        return entry.ref if entry else None

    def shutdown(self) -> list[SessionRef]:
        """Tell every session to stop; returns their refs so the caller can wait."""
        self.closed = True
        self._restarts.close()
        refs, parked = self._residents.clear()
        self._departures.settle_all()  # their new node takes what was held
        for session_id, waiting in parked.items():  # never started: answer them, never drop
            exc = SessionUnavailable("netclaw is shutting down; send the message again after it restarts")
            for command in waiting.commands:
                refuse(command, exc, out.Error(session_id=session_id, code=exc.code, message=str(exc)))
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Shutdown())
        return refs
