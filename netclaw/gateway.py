"""The gateway: every inbound message, from any channel, enters here.

It normalises the message, checks it (policy grows here: audiences, allowlists),
and hands it to the SessionManager as the same ``SendUserMessage`` command.
Adapters depend on the gateway, never the reverse. Runs on the I/O loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass

from netclaw.config import ChannelAccess, Settings
from netclaw.errors import NetclawError, SessionUnavailable
from netclaw.policy import ChatEvent, denial_reason
from netclaw.runtime import Reply
from netclaw.sessions import (
    Admission,
    SendUserMessage,
    SessionManager,
    Subscribe,
    TurnOutcome,
    Unsubscribe,
)
from netclaw.sessions._outputs import OutputFilter
from netclaw.sessions._subscribers import Sink

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._\-]{0,199}$")
MAX_TEXT_CHARS = 200_000
ACK_TIMEOUT_S = 30.0


class InvalidInput(NetclawError):
    """The inbound message itself is wrong; ``field`` names what."""

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Inbound:
    session_id: str
    text: str
    user: str | None = None
    identity: str | None = None  # inbound event id or idempotency key, if the channel has one


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.match(session_id):
        raise InvalidInput(
            "session_id",
            f"invalid session id {session_id[:80]!r}: use 1-200 characters from "
            "letters, digits and : . _ - (starting with a letter or digit)",
        )
    return session_id


def _check_encodable(field: str, value: str) -> None:
    # JSON can carry lone surrogates ("\\ud800") that no UTF-8 store accepts; refuse them
    # here rather than fail the journal write after the message was routed.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field, f"{field} contains characters that are not valid Unicode ({exc.reason})"
        ) from exc


class Gateway:
    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    async def submit(
        self, inbound: Inbound, *, wait: bool = False, turn_timeout: float | None = None
    ) -> tuple[Admission, TurnOutcome | None]:
        """Admit a message; returns once it is durable (and, with ``wait``, once its turn is recorded)."""
        check_session_id(inbound.session_id)
        if not inbound.text.strip():
            raise InvalidInput("text", "text is empty")
        if len(inbound.text) > MAX_TEXT_CHARS:
            raise InvalidInput("text", f"text is longer than {MAX_TEXT_CHARS} characters")
        _check_encodable("text", inbound.text)
        if inbound.user is not None:
            _check_encodable("user", inbound.user)
        if inbound.identity is not None:
            _check_encodable("identity", inbound.identity)
        loop = asyncio.get_running_loop()
        ack: Reply[Admission] = Reply(loop)
        done: Reply[TurnOutcome] | None = Reply(loop) if wait else None
        self.manager.route(
            inbound.session_id,
            SendUserMessage(
                text=inbound.text,
                ts=time.time(),
                ack=ack,
                identity=inbound.identity,
                user=inbound.user,
                done=done,
            ),
        )
        try:
            admission = await ack.wait(ACK_TIMEOUT_S)
        except TimeoutError as exc:
            raise SessionUnavailable(
                f"session {inbound.session_id} did not confirm the message within {ACK_TIMEOUT_S:g}s"
            ) from exc
        if done is None:
            return admission, None
        limit = turn_timeout or self.manager.deps.settings.session.turn_timeout_s + 30
        try:
            outcome = await done.wait(limit)
        except SessionUnavailable as exc:
            raise SessionUnavailable(
                f"message {admission.message_id} is accepted, but its session stopped before "
                f"the turn finished ({exc}); the turn resumes when the session recovers"
            ) from exc
        except TimeoutError as exc:
            raise SessionUnavailable(
                f"message {admission.message_id} is accepted, but its turn did not finish "
                f"within {limit:g}s; its reply will appear in the session"
            ) from exc
        return admission, outcome

    async def submit_chat(
        self, event: ChatEvent, access: ChannelAccess, inbound: Inbound
    ) -> Admission | None:
        """A chat-platform message: the channel/user/mention policy first, then admission.
        A denied message gets no turn; it is logged with the reason and None returned."""
        reason = denial_reason(access, event)
        if reason is not None:
            log.info(
                "%s message from %s in %s denied: %s", event.platform, event.user_id, event.channel_id, reason
            )
            return None
        admission, _ = await self.submit(inbound)
        return admission

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self.manager.deps.settings

    def is_resident(self, session_id: str) -> bool:
        return self.manager.is_resident(session_id)

    async def sessions_with_pending_input(self) -> list[str]:
        """Sessions with admitted messages not yet answered (e.g. interrupted by a restart)."""
        return await self.manager.deps.journal.sessions_with_pending_input()

    async def knows(self, session_id: str) -> bool:
        """Is this an existing session (a thread the bot already takes part in)?"""
        if self.manager.is_resident(session_id):
            return True
        return await self.manager.deps.journal.get_session(session_id) is not None

    def subscribe(self, session_id: str, mask: OutputFilter, sink: Sink) -> str:
        check_session_id(session_id)
        sub_id = f"sub_{uuid.uuid4().hex[:12]}"
        self.manager.route(session_id, Subscribe(sub_id, mask, sink))
        return sub_id

    def unsubscribe(self, session_id: str, sub_id: str) -> None:
        self.manager.route(session_id, Unsubscribe(sub_id))
