"""A message comes in (pure): recorded before it is acknowledged, once per identity.

A repeated identity is answered with the message it first admitted (and refused when it
comes with different text: sending it again must neither lose the new message nor replay
the old one); a sub-agent's task or report is recorded with the input it arrives as
(:mod:`netclaw.sessions._core.handlers.subagents`). The caller waiting for the turn's outcome (``?wait=1``) is added
to the session's waiters.
"""

from __future__ import annotations

from netclaw.errors import IdempotencyKeyReused
from netclaw.sessions._core import turn as turn
from netclaw.sessions._core.activity import Core
from netclaw.sessions._core.commands import Admission, SendUserMessage
from netclaw.sessions._core.effects import Refuse
from netclaw.sessions._core.handlers import subagents as subagents
from netclaw.sessions._core.waiters import Waiters


def admit(core: Core, send: SendUserMessage, waiters: Waiters, *, may_start: bool) -> bool:
    """Admit ``send``; True when its turn starts now (``may_start``: the session is idle
    and free to; nothing queued or running)."""
    state, now = core.state, core.now()
    known = state.seen(send.identity, now) if send.identity else None
    if known is not None:
        first = state.find_message(known)
        if first is not None and first.content != send.text:
            reused = IdempotencyKeyReused(f"{send.identity} was first used for a different message")
            core.emit(Refuse(send.ack, reused))
            return False
        core.answer(send.ack, Admission(core.session_id, known, duplicate=True))
        if send.done is not None:
            for effect in waiters.add(state, known, send.done):
                core.emit(effect)
        return False
    extra = subagents.admission(core, send)  # a sub-agent's task or report is recorded with it
    if extra is None:
        return False
    start = may_start and state.active is None and not state.inbox
    message, events = turn.admitted(state, send, start=start, message_id=core.new_id("u"))
    # Recorded before the ack: the shell carries the effects out in order, and a write that
    # fails ends the command there (the ack below is never given; the shell refuses it).
    core.persist(*extra, *events)
    if send.place is not None:  # a DM's sender may decide the audience
        core.context.place_changed(core.state.place)
    subagents.admitted(core, send)
    core.answer(send.ack, Admission(core.session_id, message.id, duplicate=False))
    if send.done is not None:
        for effect in waiters.add(core.state, message.id, send.done):
            core.emit(effect)
    return start
