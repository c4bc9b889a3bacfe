"""Sessions leaving this node (several nodes: a drain, a move, the rebalancer).

A session handed off finishes the turn it is in, starts no other, and stops. What is
routed to it meanwhile is held here and, once its actor has stopped, refused with
``SessionMoved``, which tells the gateway to send it to the session's new node.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from netclaw.errors import SessionMoved
from netclaw.sessions._core.commands import Routed, refuse
from netclaw.sessions._shell.deps import SessionRef


@dataclass(slots=True)
class _Leaving:
    """A session handed off: its actor's ref, what was routed to it since (held), and a
    future settled once its actor has stopped (its lease is then released or handed on)."""

    ref: SessionRef
    gone: asyncio.Future[None]
    held: list[Routed] = field(default_factory=list)


class Departures:
    """Loop-confined: who is leaving, and what waits for them to be gone."""

    def __init__(self) -> None:
        self._leaving: dict[str, _Leaving] = {}

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._leaving

    def begin(self, session_id: str, ref: SessionRef) -> asyncio.Future[None]:
        leaving = self._leaving.get(session_id)
        if leaving is None:
            leaving = _Leaving(ref, asyncio.get_running_loop().create_future())
            self._leaving[session_id] = leaving
        return leaving.gone

    def hold(self, session_id: str, command: Routed) -> bool:
        """Keep ``command`` for the session's next node, if it is leaving (True)."""
        leaving = self._leaving.get(session_id)
        if leaving is None:
            return False
        leaving.held.append(command)
        return True

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

    def left(self, session_id: str, ref: SessionRef | None = None) -> None:
        """Its actor stopped (``ref``; None: whichever): settle the wait, refuse what was held."""
        leaving = self._leaving.get(session_id)
        if leaving is None or (ref is not None and leaving.ref is not ref):
            return
        del self._leaving[session_id]
        if not leaving.gone.done():
            leaving.gone.set_result(None)
        moved = SessionMoved(session_id)
        for command in leaving.held:
            refuse(command, moved, None)

    def settle_all(self) -> None:
        """Shutting down: their new node takes what was held."""
        for session_id in list(self._leaving):
            self.left(session_id)
