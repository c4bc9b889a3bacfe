"""SessionManager: child-per-entity routing, resident bound, passivation handshake.

It lives on the I/O loop (every method runs there), so routing is a dict lookup
and a queue put — no extra actor hop per message, and no locks. It counts the
commands it routes to each actor; an actor asking to stop reports how many it
received, and only when the counts match (nothing in flight) is it retired.
A command routed to an actor that died is re-routed to a freshly recovered one,
and an actor that broke while it still owed replies (queued input, a turn the
journal says is unfinished) is restarted from the journal, with backoff.

The resident bound is hard: an actor thread counts from its start until it says
it has stopped (``actor_stopped``, the last thing its thread does), so retired
actors still stopping hold their room too. A session that would start past the
bound waits, its commands parked in order, while the least recently used idle
sessions passivate (and every session that becomes idle meanwhile); it starts as
soon as a thread is gone. Busy sessions are never cut short for room.

Several nodes: a session can be handed off (:meth:`SessionManager.hand_off`: a drain, a
move, the rebalancer). It finishes the turn it is in, starts no other, and stops; what is
routed to it meanwhile waits and is then refused with SessionMoved, which tells the
gateway to send it to the session's new node. While ``draining`` no session starts here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pykka

from netclaw import outputs as out
from netclaw.errors import NetclawError, SessionMoved, SessionUnavailable
from netclaw.outputs import OutputFilter
from netclaw.sessions._actor import SessionActor
from netclaw.sessions._commands import (
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
from netclaw.sessions._deps import SessionDeps, SessionRef
from netclaw.sessions._phases import Phase
from netclaw.sessions._subscribers import OutputQueue, Subscription

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
RESTART_BACKOFF_S = (0.5, 2.0, 10.0, 30.0, 60.0)  # after the 1st, 2nd, ... failure in a row
FAILURES_FORGOTTEN_AFTER_S = 600.0  # a session that ran this long without failing starts afresh


@dataclass(slots=True)
class _Resident:
    ref: SessionRef
    routed: int = 0
    phase: Phase = Phase.RECOVERING
    last_used: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Parked:
    """A session waiting for room under the resident bound, and what it will start with."""

    commands: list[Routed] = field(default_factory=list)
    resumed_at: float | None = None
    held: bool = False


@dataclass(slots=True)
class _Leaving:
    """A session handed off: its actor's ref, what was routed to it since (held), and a
    future settled once its actor has stopped (its lease is then released or handed on)."""

    ref: SessionRef
    gone: asyncio.Future[None]
    held: list[Routed] = field(default_factory=list)


@dataclass(slots=True)
class _Failures:
    count: int = 0
    last: float = 0.0
    restart: asyncio.TimerHandle | None = None


class SessionManager:
    def __init__(self, make_deps: Callable[[SessionManager], SessionDeps]) -> None:
        self._deps = make_deps(self)
        self._resident: dict[str, _Resident] = {}
        self._stopping: set[SessionRef] = set()  # retired, thread not yet gone: they hold room
        self._parked: dict[str, _Parked] = {}  # waiting for room, first come first started
        self._failures: dict[str, _Failures] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Sessions being erased: commands for them wait here, then go to a fresh session.
        self._erasing: dict[str, list[Routed]] = {}
        # Warmed after a graceful restart and not yet told so: session → when it stopped.
        self._continuity: dict[str, float] = {}
        self._reply_listeners: list[Callable[[str], None]] = []
        self._stop_listeners: list[Callable[[str], None]] = []
        self._recovering: dict[str, asyncio.Future[None]] = {}  # warm() waits on these
        self._held: set[str] = set()  # warmed, waiting for release_held()
        self._leaving: dict[str, _Leaving] = {}  # handed off, their actors not yet stopped
        self.draining = False  # set by the cluster: no session starts here (they go elsewhere)
        self.started = 0  # actors started (recoveries), for /healthz and tests
        self.restarts = 0  # broken actors restarted because they owed replies
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
        leaving = self._leaving.get(session_id)
        if leaving is not None:  # refused (SessionMoved) once its actor has stopped
            leaving.held.append(command)
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
        if entry is None or (ref is not None and entry.ref is not ref) or session_id in self._leaving:
            return  # a session leaving closes every subscription itself; HandOff is its last command
        with contextlib.suppress(pykka.ActorDeadError):
            self._tell(entry, Unsubscribe(sub_id))

    def warm(self, session_id: str) -> None:
        """Start (recover) a session without a command: it resumes any unfinished turn. One
        that failed here restarts on its own backoff instead."""
        if (
            session_id not in self._resident
            and session_id not in self._failures
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
        """Recover sessions before anyone talks to them, ``concurrency`` at a time; those in
        ``resumed`` learn (once, on their first model call) that a restart at ``resumed_at``
        interrupted them. They hold their interrupted turns until :meth:`release_held`, so
        the channels that show the replies are listening first. Returns how many started."""
        started = 0
        deadline = asyncio.get_running_loop().time() + timeout_s
        for first in range(0, len(session_ids), max(1, concurrency)):
            waiting = []
            for session_id in session_ids[first : first + concurrency]:
                if session_id in self._resident or session_id in self._parked or self.closed:
                    continue
                when = resumed_at if session_id in resumed else None
                if when is not None:
                    self._continuity[session_id] = when
                waiting.append(
                    self._recovering.setdefault(session_id, asyncio.get_running_loop().create_future())
                )
                self._admit(session_id, resumed_at=when, held=True)
                self._held.add(session_id)
                started += 1
            if waiting:
                left = max(0.1, deadline - asyncio.get_running_loop().time())
                _, late = await asyncio.wait(waiting, timeout=left)
                if late:
                    log.warning("%d session(s) still recovering; going on without waiting", len(late))
        return started

    def release_held(self) -> None:
        """Let warmed sessions go on: resume their interrupted turns and queued input."""
        held, self._held = self._held, set()
        for session_id in sorted(held):
            entry = self._resident.get(session_id)
            if entry is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    self._tell(entry, Release())

    def continuity_of(self, session_id: str) -> float | None:
        """When the restart that warmed this session stopped netclaw, while the model has
        not been told yet."""
        return self._continuity.get(session_id)

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
        otherwise park both until there is (None). Draining: the command is refused, for
        another node to take (None)."""
        if self.draining:
            if command is not None:
                refuse(command, SessionMoved(session_id, "this node is draining"), None)
            return None
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
        resumed = resumed_at or self._continuity.get(session_id)
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
            (e for sid, e in self._resident.items() if e.phase is Phase.READY and sid not in self._leaving),
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
            failures = self._failures.pop(session_id, None)
            if failures is not None and failures.restart is not None:
                failures.restart.cancel()
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
            self._recovered(session_id)
        if phase is Phase.READY and self._parked:
            self._make_room()

    def actor_stopped(self, session_id: str, ref: SessionRef) -> None:
        """The actor's thread is ending: its room goes to the first parked session."""
        self._stopping.discard(ref)
        entry = self._resident.get(session_id)
        if entry is not None and entry.ref is ref:  # stopped behind our back
            del self._resident[session_id]
        leaving = self._leaving.get(session_id)
        if leaving is not None and leaving.ref is ref:
            self._left(session_id, leaving)
        self._start_parked()
        self._notify(self._stop_listeners, session_id)

    def _recovered(self, session_id: str) -> None:
        waiter = self._recovering.pop(session_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def continuity_delivered(self, session_id: str, ref: SessionRef) -> None:
        self._continuity.pop(session_id, None)

    def on_reply_owed(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(session_id)`` (on the loop) whenever a chat session records a reply
        its conversation still owes (the channels' outbox watches this)."""
        self._reply_listeners.append(listener)

    def on_session_stopped(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(session_id)`` (on the loop) whenever a session's actor has stopped."""
        self._stop_listeners.append(listener)

    def reply_owed(self, session_id: str) -> None:
        self._notify(self._reply_listeners, session_id)

    @staticmethod
    def _notify(listeners: list[Callable[[str], None]], session_id: str) -> None:
        for listener in list(listeners):
            try:
                listener(session_id)
            except Exception:
                log.exception("%s: a session listener failed", session_id)

    def stop_requested(self, session_id: str, ref: SessionRef, received: int, epoch: int) -> None:
        entry = self._resident.get(session_id)
        if entry is None or entry.ref is not ref:
            return
        if entry.routed != received:
            return  # a command is in flight; receiving it aborts the passivation
        del self._resident[session_id]
        self._stopping.add(ref)
        self._failures.pop(session_id, None)
        ref.tell(ConfirmStop(epoch))
        log.info("%s: passivated", session_id)

    def actor_failed(self, session_id: str, ref: SessionRef, reason: str, moved: bool = False) -> None:
        self._recovered(session_id)
        self._retire(session_id, ref)
        if not self.closed and not moved and session_id not in self._leaving:
            self._schedule_restart(session_id)

    def passivate(self, session_id: str) -> None:
        """Passivate the session now if it is idle (it declines otherwise)."""
        entry = self._resident.get(session_id)
        if entry is not None and session_id not in self._leaving:
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

    # -- handing a session off (several nodes) -------------------------------------------------

    def hand_off(self, session_id: str) -> asyncio.Future[None] | None:
        """Let the session leave this node: it finishes the turn it is in (none is cut
        short), starts no other, and stops; its queued input stays in the journal for its
        next node. The future settles once its actor has stopped (its lease is released
        then, or handed on); None when it is not resident here."""
        leaving = self._leaving.get(session_id)
        if leaving is not None:
            return leaving.gone
        parked = self._parked.pop(session_id, None)
        if parked is not None:  # never started here: what waited goes to its next node
            moved = SessionMoved(session_id)
            for command in parked.commands:
                refuse(command, moved, None)
        entry = self._resident.get(session_id)
        if entry is None:
            return None
        leaving = _Leaving(entry.ref, asyncio.get_running_loop().create_future())
        self._leaving[session_id] = leaving
        try:
            self._tell(entry, HandOff())  # the last command it gets: later ones are held
        except pykka.ActorDeadError:
            self._resident.pop(session_id, None)
            self._left(session_id, leaving)
        return leaving.gone

    def leaving(self, session_id: str) -> bool:
        """Handed off, its actor not yet stopped."""
        return session_id in self._leaving

    async def gone(self, session_id: str, timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until a session handed off has left; True when it has
        (or was not leaving)."""
        leaving = self._leaving.get(session_id)
        if leaving is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(leaving.gone), timeout_s)
        except TimeoutError:
            return False
        return True

    def _left(self, session_id: str, leaving: _Leaving) -> None:
        del self._leaving[session_id]
        if not leaving.gone.done():
            leaving.gone.set_result(None)
        moved = SessionMoved(session_id)
        for command in leaving.held:
            refuse(command, moved, None)

    # -- restarting a broken session ----------------------------------------------------------

    def _schedule_restart(self, session_id: str) -> None:
        """A client was told its accepted message resumes: make that true without waiting
        for the next message. Backs off, so a broken journal is not hammered."""
        now = time.monotonic()
        failures = self._failures.setdefault(session_id, _Failures())
        if now - failures.last > FAILURES_FORGOTTEN_AFTER_S:
            failures.count = 0
        failures.count += 1
        failures.last = now
        if failures.restart is not None:
            failures.restart.cancel()
            failures.restart = None
        if failures.count > len(RESTART_BACKOFF_S):
            log.error(
                "%s: failed %d times in a row; not restarting it until its next message",
                session_id,
                failures.count,
            )
            return
        delay = RESTART_BACKOFF_S[failures.count - 1]
        failures.restart = asyncio.get_running_loop().call_later(delay, self._spawn_restart, session_id)

    def _spawn_restart(self, session_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._restart_if_owed(session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart_if_owed(self, session_id: str) -> None:
        failures = self._failures.get(session_id)
        if failures is not None:
            failures.restart = None
        if self.closed or self.draining or session_id in self._resident or session_id in self._parked:
            return  # shutting down, leaving, or a new message already recovered it (or will)
        try:
            row = await self._deps.journal.get_session(session_id)
        except NetclawError as exc:
            log.warning("%s: cannot tell whether the failed session owes replies: %s", session_id, exc)
            self._schedule_restart(session_id)
            return
        if row is None or row.pending == 0:
            return
        if self.closed or session_id in self._resident:
            return
        log.info(
            "%s: restarting the failed session: %d message(s) still owe a reply", session_id, row.pending
        )
        self.restarts += 1
        self._admit(session_id)

    # -- views and shutdown -------------------------------------------------------------------

    def resident(self) -> dict[str, Phase]:
        return {sid: e.phase for sid, e in self._resident.items()}

    def parked(self) -> list[str]:
        """Sessions waiting for room under the resident bound, first to start first."""
        return list(self._parked)

    def is_resident(self, session_id: str) -> bool:
        return session_id in self._resident

    def by_last_use(self) -> list[tuple[str, Phase]]:
        """Resident sessions not leaving, least recently used first, with their phases."""
        entries = sorted(
            ((sid, e) for sid, e in self._resident.items() if sid not in self._leaving),
            key=lambda item: item[1].last_used,
        )
        return [(sid, e.phase) for sid, e in entries]

    def ref_of(self, session_id: str) -> SessionRef | None:
        entry = self._resident.get(session_id)
        return entry.ref if entry else None

    def shutdown(self) -> list[SessionRef]:
        """Tell every session to stop; returns their refs so the caller can wait."""
        self.closed = True
        for failures in self._failures.values():
            if failures.restart is not None:
                failures.restart.cancel()
        self._failures.clear()
        for task in self._tasks:
            task.cancel()
        refs = [e.ref for e in self._resident.values()]
        self._resident.clear()
        for session_id, leaving in list(self._leaving.items()):  # their new node takes these
            self._left(session_id, leaving)
        parked, self._parked = self._parked, {}
        for session_id, waiting in parked.items():  # never started: answer them, never drop
            exc = SessionUnavailable("netclaw is shutting down; send the message again after it restarts")
            for command in waiting.commands:
                refuse(command, exc, out.Error(session_id=session_id, code=exc.code, message=str(exc)))
        for ref in refs:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Shutdown())
        return refs
