"""Input: every message any caller sends a session goes through :class:`IntakeService`.

:meth:`IntakeService.submit` checks a message, resolves its speaker's role (``chat`` is
needed), redacts secrets out of it, stores its files (in a worker thread) and hands it to
the SessionManager as the same ``SendUserMessage`` command whatever its channel; it
returns once the message is durable (and, with ``wait``, once its turn is recorded). A
message for a session another node serves is forwarded there. :meth:`announce` tells a
session's subscribers a notice (no turn, nothing stored).

Who uses it (as the ``Input`` role): the control API and the control room (a person's
message), the scheduler (a reminder's fire and its notices), the chat role (``_chat``) and
the webhook channel, the sub-agents' port (``_subagents``: a child's task, a report to
its parent), chat commands (``/prompt``) and the controls (a deleted sub-agent's parent is
told). Runs on the I/O loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from netclaw import attachments
from netclaw.cluster import Routing
from netclaw.config import ChannelAccess, LiveSettings, Settings, is_chat_channel
from netclaw.errors import LeaseLost, NotPermitted, OutcomeUnknown, SessionMoved, SessionUnavailable
from netclaw.gateway._inbound import Inbound, channel_access, check_inbound, redact_inbound
from netclaw.history.tokens import fallback_count
from netclaw.identifiers import check_session_id
from netclaw.messages import Attachment, bounded_prior, prior_block
from netclaw.persistence import Journal, Owner
from netclaw.process import traces
from netclaw.process.runtime import Reply
from netclaw.security.policy import channel_of
from netclaw.security.redact import merge, notice
from netclaw.security.roles import may, refusal, role_for, speaker_of
from netclaw.sessions import Admission, Announce, SendUserMessage, SessionManager, TurnOutcome

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 30.0


class IntakeService:
    def __init__(
        self, manager: SessionManager, journal: Journal, live: LiveSettings, routing: Routing | None = None
    ) -> None:
        self._manager = manager
        self._journal = journal
        self._live = live
        self._routing = routing  # several nodes: a session's input goes to the node serving it

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    async def submit(
        self,
        inbound: Inbound,
        *,
        wait: bool = False,
        turn_timeout: float | None = None,
        forwarded: bool = False,
    ) -> tuple[Admission, TurnOutcome | None]:
        """Admit a message; returns once it is durable (and, with ``wait``, once its turn
        is recorded). If durability cannot be confirmed in time the answer is
        :class:`OutcomeUnknown`: sending again with the same identity is safe. A message
        for a session another node serves is submitted there (unless it was ``forwarded``
        here by another node: it is then taken here)."""
        check_inbound(inbound)
        if self._routing is None or forwarded:
            return await self._submit_here(inbound, wait, turn_timeout)
        return await self._routing.route(
            inbound.session_id,
            lambda owner: self._submit_on(owner, inbound, wait, turn_timeout),
            lambda: self._submit_here(inbound, wait, turn_timeout),
        )

    def announce(self, session_id: str, text: str, kind: str) -> None:
        """Tell the session's subscribers something (a ``notice``); no turn, nothing stored."""
        check_session_id(session_id)
        self._manager.route(session_id, Announce(text, kind))

    async def _submit_here(
        self, inbound: Inbound, wait: bool, turn_timeout: float | None
    ) -> tuple[Admission, TurnOutcome | None]:
        speaker = speaker_of(inbound.session_id, inbound.user, inbound.speaker)
        role = role_for(self.settings, speaker, inbound.speaker_role)
        if not may(self.settings, role, "chat"):
            raise NotPermitted(refusal(role, "sending messages that start turns"))
        # Secrets out before anything is stored or shown to a model (netclaw/security/redact.py); the
        # speaker as recorded is the redacted one (its role was found from the real one).
        identity = inbound.identity  # as the sender knows it: what a retry must repeat
        inbound, found = redact_inbound(inbound)
        speaker = speaker_of(inbound.session_id, inbound.user, inbound.speaker)
        files: tuple[Attachment, ...] = ()
        if inbound.files:  # scanned, hashed and written in a worker thread, never on the I/O loop
            stored = await asyncio.to_thread(
                attachments.save, self.settings.data_dir, inbound.session_id, inbound.files
            )
            files, found = stored.files, merge(found, stored.redacted)
        loop = asyncio.get_running_loop()
        ack: Reply[Admission] = Reply(loop)
        done: Reply[TurnOutcome] | None = Reply(loop) if wait else None
        self._manager.route(
            inbound.session_id,
            SendUserMessage(
                text=inbound.text.strip() if files else inbound.text,
                ts=time.time(),
                ack=ack,
                identity=inbound.identity,
                user=inbound.user,
                done=done,
                user_name=inbound.user_name.strip() if inbound.user_name else None,
                prior=self._prior_block(inbound),
                files=files,
                place=inbound.place,
                speaker=speaker,
                speaker_role=role,
                subagent=inbound.subagent,
                trace=traces.carrier(),
            ),
        )
        try:
            admission = await ack.wait(ACK_TIMEOUT_S)
        except TimeoutError as exc:
            raise OutcomeUnknown(
                f"session {inbound.session_id} did not confirm the message within {ACK_TIMEOUT_S:g}s; "
                "it may still be recorded",
                identity=identity,
            ) from exc
        except (OutcomeUnknown, SessionMoved):
            raise
        except LeaseLost as exc:  # refused, not written: another node owns the session now
            if self._routing is None:
                raise
            raise SessionMoved(inbound.session_id, str(exc)) from exc
        except SessionUnavailable:
            # Not admitted here: another node may have claimed the session meanwhile (its
            # recovery here then failed). Then the message belongs there, once.
            if self._routing is not None and await self._journal.owner(inbound.session_id) is not None:
                raise SessionMoved(inbound.session_id, "another node took it first") from None
            raise
        if found:
            log.info(
                "%s: redacted %s from message %s", inbound.session_id, ", ".join(found), admission.message_id
            )
            self._manager.route(inbound.session_id, Announce(notice(found), "redaction"))
        if done is None:
            return admission, None
        limit = turn_timeout or self.settings.session.turn_timeout_s + 30
        try:
            outcome = await done.wait(limit)
        except SessionUnavailable as exc:
            if isinstance(exc, SessionMoved) and self._routing is not None and inbound.identity is not None:
                # Handed off before this message's turn ran here: its next node runs it, and
                # the same identity there waits for that turn instead of recording it again.
                raise
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

    async def _submit_on(
        self, owner: Owner, inbound: Inbound, wait: bool, turn_timeout: float | None
    ) -> tuple[Admission, TurnOutcome | None]:
        assert self._routing is not None
        answer = await self._routing.forwarder.submit(
            inbound.session_id,
            owner,
            {"inbound": inbound.to_json(), "wait": wait, "turn_timeout": turn_timeout},
        )
        try:
            admission = Admission(**answer["admission"])
            outcome = answer.get("outcome")
            return admission, TurnOutcome(**outcome) if outcome is not None else None
        except (KeyError, TypeError) as exc:
            raise SessionUnavailable(
                f"node {owner.node_id} answered a forwarded message in an unknown shape ({exc})"
            ) from exc

    def _prior_block(self, inbound: Inbound) -> str | None:
        """The earlier conversation as the model gets it: the newest messages that fit the
        channel's ``thread_context`` bounds (count and tokens)."""
        if not inbound.prior:
            return None
        platform = channel_of(inbound.session_id)
        access = channel_access(self.settings, platform) if is_chat_channel(platform) else ChannelAccess()
        max_messages, max_tokens = access.thread_context_messages, access.thread_context_tokens
        kept, left_out = bounded_prior(
            inbound.prior, max_messages=max_messages, max_tokens=max_tokens, count=fallback_count
        )
        return prior_block(kept, left_out=left_out)
