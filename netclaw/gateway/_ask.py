"""The one way a service asks a session something and waits for its answer: :func:`ask`
routes a command carrying a :class:`~netclaw.process.runtime.Reply` to the session (starting it if
it is not resident) and awaits the answer on the loop, never longer than
:data:`CONTROL_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from netclaw.errors import SessionUnavailable
from netclaw.identifiers import check_session_id
from netclaw.process.runtime import Reply
from netclaw.sessions import Routed, SessionManager

CONTROL_TIMEOUT_S = 30.0  # a control command's answer (a compaction may take a while)

T = TypeVar("T")


async def ask(manager: SessionManager, session_id: str, make: Callable[[Reply[T]], Routed]) -> T:
    """The session's answer to ``make(reply)``; SessionUnavailable when it does not come in
    time (InvalidInput first when ``session_id`` is not one)."""
    check_session_id(session_id)
    reply: Reply[T] = Reply(asyncio.get_running_loop())
    manager.route(session_id, make(reply))
    try:
        return await reply.wait(CONTROL_TIMEOUT_S)
    except TimeoutError as exc:
        raise SessionUnavailable(
            f"session {session_id} did not answer within {CONTROL_TIMEOUT_S:g}s; try again"
        ) from exc
