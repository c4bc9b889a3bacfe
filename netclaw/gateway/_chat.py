"""The chat role: what a channel does with sessions — :class:`ChatService`, which plays
``ChatInput`` for the channels under ``adapters/`` (Slack, Discord, webhooks, the chat
renderer).

Its own part is the chat policy: :meth:`ChatService.permit` runs the channel/user/mention
policy once per platform message, here and nowhere else; :meth:`submit_chat` takes a
permitted message to its session, or runs it as a chat command under the sender's role;
:meth:`decide_in_chat` lets a button press decide only for people who may talk to the
session (and, when the audience names ``approvers``, only those). The rest a channel needs
it passes to the service that holds it: input (``_intake``), a session's outputs and
whereabouts (``_reads``), the session an approval belongs to (``_approvals``), and the
outbox and thread openers (``_outbox``). Runs on the I/O loop; the policy is read from the
live settings, so a reload applies at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from netclaw.commands import parse_command
from netclaw.config import LiveSettings, Settings
from netclaw.errors import InvalidInput, NotAnApprover, NotPermitted
from netclaw.gateway._approvals import ApprovalService
from netclaw.gateway._commands import CommandService
from netclaw.gateway._inbound import ChatPermit, Inbound, channel_access, check_inbound, parse_prompt_or_fail
from netclaw.gateway._intake import IntakeService
from netclaw.gateway._outbox import OutboxService
from netclaw.gateway._reads import ReadService
from netclaw.gateway._views import CommandDone, ThreadOpener
from netclaw.outputs import OutputFilter
from netclaw.persistence import Owner
from netclaw.security.policy import ChatEvent, channel_of, denial_reason
from netclaw.security.roles import may, may_command, refusal, role_for
from netclaw.sessions import Admission, Subscription, TurnOutcome

log = logging.getLogger(__name__)


class ChatService:
    def __init__(
        self,
        live: LiveSettings,
        intake: IntakeService,
        commands: CommandService,
        reads: ReadService,
        approvals: ApprovalService,
        outbox: OutboxService,
    ) -> None:
        self._live = live
        self._intake = intake
        self._commands = commands
        self._reads = reads
        self._approvals = approvals
        self._outbox = outbox

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self._live.current

    # -- the chat policy ----------------------------------------------------------------------

    def permit(self, event: ChatEvent) -> ChatPermit | None:
        """The chat access policy for one platform message, from the live settings. A
        denied message gets no turn: it is logged with the reason and None returned."""
        reason = denial_reason(channel_access(self.settings, event.platform), event)
        if reason is not None:
            log.info(
                "%s message from %s in %s denied: %s", event.platform, event.user_id, event.channel_id, reason
            )
            return None
        return ChatPermit(event)

    async def submit_chat(self, permit: ChatPermit, inbound: Inbound) -> Admission | CommandDone:
        """A chat-platform message that has its permit (for a session of its platform). A
        chat command runs instead of becoming model input."""
        if channel_of(inbound.session_id) != permit.event.platform:
            raise InvalidInput(
                "session_id",
                f"a {permit.event.platform} message cannot go to session {inbound.session_id[:80]!r}",
            )
        prompt = parse_prompt_or_fail(inbound.text)
        if prompt is not None:
            check_inbound(inbound)
            submitted = await self._commands.submit_prompt(inbound, prompt)
            return submitted if isinstance(submitted, CommandDone) else submitted[0]
        command = parse_command(inbound.text)
        if command is not None:
            check_inbound(inbound)
            role = role_for(self.settings, f"{permit.event.platform}:{permit.event.user_id}")
            if not may_command(self.settings, role, command.name):
                raise NotPermitted(refusal(role, f"/{command.name}"))
            return await self._commands.command(
                inbound.session_id, command, by=inbound.user or permit.event.user_id
            )
        admission, _ = await self._intake.submit(inbound)
        return admission

    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str:
        """A button press: only people who may talk to the session (and, when the audience
        names ``approvers``, only those) decide."""
        if channel_of(session_id) != platform:
            raise NotAnApprover(f"a {platform} user cannot decide in session {session_id}")
        access = channel_access(self.settings, platform)
        if access.users is not None and user_id not in access.users:
            raise NotAnApprover(f"{user_name} may not talk to this session, so may not decide")
        role = role_for(self.settings, f"{platform}:{user_id}")
        if role is not None and not may(self.settings, role, "approve"):
            raise NotAnApprover(f"{user_name} may not decide on tool calls: {refusal(role, 'approving')}")
        return await self._approvals.decide(session_id, approval_id, decision, by=user_name, approver=user_id)

    # -- passed to the service that holds it --------------------------------------------------

    async def submit(
        self,
        inbound: Inbound,
        *,
        wait: bool = False,
        turn_timeout: float | None = None,
        forwarded: bool = False,
    ) -> tuple[Admission, TurnOutcome | None]:
        return await self._intake.submit(inbound, wait=wait, turn_timeout=turn_timeout, forwarded=forwarded)

    def subscribe(self, session_id: str, mask: OutputFilter) -> Subscription:
        return self._reads.subscribe(session_id, mask)

    async def knows(self, session_id: str) -> bool:
        return await self._reads.knows(session_id)

    async def owner_of(self, session_id: str) -> Owner | None:
        return await self._reads.owner_of(session_id)

    async def find_approval(self, approval_id: str) -> str | None:
        return await self._approvals.find_approval(approval_id)

    @property
    def cluster_poll_s(self) -> float | None:
        return self._outbox.cluster_poll_s

    def offer_threads(self, platform: str, opener: ThreadOpener | None) -> None:
        self._outbox.offer_threads(platform, opener)

    async def open_thread(self, platform: str, channel: str, text: str, *, key: str, since: float) -> str:
        return await self._outbox.open_thread(platform, channel, text, key=key, since=since)

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self._outbox.watch_owed_replies(platform, listener)

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self._outbox.unwatch_owed_replies(platform, listener)

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        return await self._outbox.sessions_owing_replies(platform)

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]:
        return await self._outbox.sessions_with_pending_input(channel)

    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]:
        return await self._outbox.undelivered_replies(session_id)

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        return await self._outbox.mark_delivered(session_id, turn, message_ids)
