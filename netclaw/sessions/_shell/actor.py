"""The session actor: one pykka thread per resident session, and nothing but a shell.

It recovers the session's state (reading on the loop, folding here), hands every
command it receives to the pure :class:`~netclaw.sessions._core.session.Session`, and has the
:class:`~netclaw.sessions._shell.effector.Effector` carry out the effects the session returns — once each, in
order; what that brings back (a subscriber gone, work that could not start) goes to the
session next, as a command. It gives the session all it takes from the world: the
clocks, fresh ids, the daemon's own secrets. The one blocking call it makes is persist —
wait for the journal's durable ack — so what it acknowledges is never lost.

When anything fails it breaks visibly: the command's caller is told the failure, every
other caller still owed an answer is answered (those waiting on a turn, and those whose
answer came after a write that failed: it is never carried out), and the manager
recovers a fresh actor from the journal, the durable truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import pykka

from netclaw import outputs as out
from netclaw.errors import (
    JournalError,
    LeaseLost,
    NetclawError,
    OutcomeUnknown,
    SessionMoved,
    SessionOwnedElsewhere,
    SessionUnavailable,
)
from netclaw.security.redact import KNOWN
from netclaw.sessions._core.commands import (
    COMMAND_TYPES,
    Command,
    ConfirmStop,
    Routed,
    SendUserMessage,
    Shutdown,
    refuse,
)
from netclaw.sessions._core.context.build import SessionEnv
from netclaw.sessions._core.effects import Effect
from netclaw.sessions._core.session import Session
from netclaw.sessions._shell.deps import SessionDeps
from netclaw.sessions._shell.effector import Effector
from netclaw.sessions._shell.recovery import recover_state
from netclaw.skills import LiveSkills

log = logging.getLogger(__name__)

RECOVERY_TIMEOUT_S = 60.0


class RandomHex:
    """Random hex digits for a session's ids, from the system's generator (``os.urandom``)
    a few kB at a time. A session mints two or three ids a turn; each ``os.urandom`` is a
    system call that lets go of the GIL, and on a busy daemon an actor that let go of it
    waited to take it back (two context switches an id). One actor's, on its thread."""

    __slots__ = ("_at", "_digits")

    def __init__(self) -> None:
        self._digits = ""
        self._at = 0

    def __call__(self, digits: int) -> str:
        at = self._at
        if at + digits > len(self._digits):
            self._digits, at = os.urandom(max(2048, (digits + 1) // 2)).hex(), 0
        self._at = at + digits
        return self._digits[at : at + digits]


class SessionActor(pykka.ThreadingActor):
    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        # pykka's own inbox is a queue.Queue: Python code around a lock and a condition, run
        # on both sides of every message. A SimpleQueue hands a message over in C, and put,
        # get and empty are all pykka asks of an inbox. At 100 sessions: 0.94x the CPU per
        # turn (median of seven alternated pairs; a noisy host, the pairs spread 0.72-1.07x).
        return queue.SimpleQueue()

    def __init__(
        self, session_id: str, deps: SessionDeps, resumed_at: float | None = None, *, held: bool = False
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self._deps = deps
        self._resumed_at = resumed_at  # warmed after a graceful restart: tell the model once
        self._held = held  # warmed at start-up: recovered, but going on only when released
        self._effects = Effector(session_id, deps, self.actor_ref, self.stop)
        self._session: Session | None = None  # once recovered
        self._broken: str | None = None
        self._moved = False  # broken because another node owns the session: it answers
        self._lease: int | None = None  # the epoch of this node's claim, once recovered

    def on_start(self) -> None:
        # on_start failures call neither on_failure nor on_stop in pykka: catch them here and
        # stay alive in a "broken" mode that fails whatever was routed to us, until retired.
        with self._deps.io.batched():
            try:
                self._recover()
            except Exception as exc:  # noqa: BLE001 - any failure leaves us broken, visibly
                self._break(f"recovery failed: {exc}", exc)

    def _recover(self) -> None:
        started = time.perf_counter()
        deps = self._deps
        # I/O on the loop; decoding and the fold here, on our own thread.
        state, saved_rows, self._lease = recover_state(
            deps.io, deps.journal, self.session_id, RECOVERY_TIMEOUT_S
        )
        self._effects.recorder.recovered(state.seq, min(saved_rows, len(state.transcript)))
        memory = deps.memory
        env = SessionEnv(
            deps.live,
            deps.tools,
            has_memory=memory is not None,
            clock=time.time,
            monotonic=time.monotonic,
            random_hex=RandomHex(),
            known_secrets=lambda: KNOWN.scrubber,  # swapped whole on a reload: read it each time
            skills=deps.skills or LiveSkills(),
            spend=deps.ledger,
            may_recall=memory.may_have if memory is not None else lambda audience: False,
        )
        self._session = session = Session(self.session_id, env, resumed_at=self._resumed_at, held=self._held)
        self._effects.state = state
        self._carry_out(session, session.recovered(state))
        elapsed_ms = (time.perf_counter() - started) * 1000
        log.debug("%s: recovered at seq %d in %.1f ms", self.session_id, state.seq, elapsed_ms)

    def on_receive(self, message: object) -> None:
        with self._deps.io.batched():  # one loop wake-up for what this message hands the loop
            if isinstance(message, Routed):
                self._effects.received += 1
            session = self._session
            if self._broken is not None or session is None:
                self._refuse(message)
                return
            if not isinstance(message, COMMAND_TYPES):
                log.warning("%s: ignoring unknown message %r", self.session_id, message)
                return
            tracer = self._effects.tracer
            try:
                command: Command = message  # type: ignore[assignment]  # checked just above
                tracer.received(command)
                with tracer.turn.current():  # what the session logs carries the turn's trace
                    effects = session.handle(command)
                self._carry_out(session, effects)
                self._effects.settled(command)
            except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a BaseException stops ALL actors
                # Keep pykka out of it (it would stop us with commands still queued, leaving their
                # callers hanging). Fail what waits on us; the manager retires us and recovers a
                # fresh actor from the journal.
                self._break(f"{type(exc).__name__}: {exc}", exc, message)
            finally:
                tracer.handled()

    def on_stop(self) -> None:
        with self._deps.io.batched():
            # Handed off: a reply waited for comes from the session's next node.
            leaving = self._session is not None and self._session.leaving
            stopped = SessionMoved(self.session_id) if leaving else None
            self._answer_waiters(stopped or SessionUnavailable(f"session {self.session_id} stopped"))
            self._effects.close()
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the manager
                if self._lease is not None:  # after what we queued: another node may take it then
                    self._deps.io.call(self._deps.journal.release, self.session_id, self._lease)
                manager = self._deps.manager
                self._deps.io.call(
                    manager.actor_stopped, self.session_id, self.actor_ref, threading.current_thread()
                )

    def _carry_out(self, session: Session, effects: Sequence[Effect]) -> None:
        """Carry out what the session decided, once each, in order; then hand it what that
        brought back, and carry out what it decides about that, the same way. A failure
        the session cannot be told of raises (and the rest is not carried out)."""
        back = deque(self._effects.carry_out(effects))
        while back:
            command = back.popleft()
            back.extend(self._effects.carry_out(session.handle(command)))
            self._effects.settled(command)

    def _break(self, reason: str, exc: BaseException, message: object = None) -> None:
        # Owned by another node now: input goes there, nothing here to restart.
        moved = isinstance(exc, LeaseLost | SessionOwnedElsewhere)
        # A journal failure was already reported by the journal, plainly: no traceback here.
        quiet = isinstance(exc, JournalError | SessionOwnedElsewhere)
        log.log(
            logging.INFO if moved else logging.ERROR,
            "%s: session actor failed: %s",
            self.session_id,
            reason,
            exc_info=None if quiet else exc,
        )
        self._broken, self._moved = reason, moved
        unavailable = (
            SessionMoved(self.session_id, reason)
            if moved
            else SessionUnavailable(f"session {self.session_id} failed: {reason}")
        )
        if message is not None:  # what the failed command still owes its caller: the failure
            refuse(message, _owed_error(message, exc) or unavailable, None)
        # Then everyone else owed an answer: those waiting on a turn, and those whose answer
        # the session decided after what failed (never carried out, so never given).
        self._answer_waiters(unavailable, self._effects.unfinished)
        if not moved:  # moved: the owner answers (a chat's reply comes from its outbox there)
            error = out.Error(session_id=self.session_id, code="session_failed", message=reason)
            self._effects.subscribers.publish(error)
        self._effects.close()
        self._deps.io.call(self._deps.manager.actor_failed, self.session_id, self.actor_ref, reason, moved)

    def _answer_waiters(self, error: NetclawError, unfinished: Sequence[Effect] = ()) -> None:
        if self._session is not None:
            self._effects.carry_out(self._session.stopping(error, unfinished))  # nobody to tell back
            self._session = None

    def _refuse(self, message: object) -> None:
        """Broken: whatever reaches us before we are retired gets an answer, never silence."""
        if isinstance(message, Shutdown | ConfirmStop):
            self.stop()
            return
        reason = f"session {self.session_id} is unavailable: {self._broken}"
        notice = (
            None
            if self._moved
            else out.Error(session_id=self.session_id, code="session_failed", message=reason)
        )
        # Moved: nothing was carried out here, so the caller may follow the session to its node.
        refused = (
            SessionMoved(self.session_id, str(self._broken)) if self._moved else SessionUnavailable(reason)
        )
        refuse(message, refused, notice)


def _owed_error(message: object, exc: BaseException) -> Exception | None:
    """The error a caller is told when its command broke the session: a write that failed
    or may have landed is said as such (with the message's identity, to retry with)."""
    if isinstance(exc, OutcomeUnknown) and isinstance(message, SendUserMessage):
        return OutcomeUnknown(str(exc), identity=message.identity)
    if isinstance(exc, NetclawError):
        return exc
    return None
