"""The chat renderer: how a session's outputs appear on a chat platform, written once.

One renderer per chat adapter, over its :class:`~adapters.chat.ChatPort`. It composes the
parts, each in its own module:

- ``_links``: link supervision — one subscription and render task per followed session;
  idle release, re-subscribing, reconnects.
- ``_streaming``: the reply as it streams — throttled edits, splitting, native streaming.
- ``_reactions``: the "working on it" mark, keyed by message id.
- ``_approvals``: approval requests as buttons; a press decides through the gateway.
- ``_children``: a compact status line per sub-agent the session spawned.
- ``_outbox`` and ``_outbox_watch``: every recorded reply shown exactly once, also one
  recorded with nobody watching or before a crash.
- ``_calls``: how each part calls the platform (retried, quietly, in the background).

This module holds what adapters call (:meth:`ChatRenderer.submit`, ``note``, ``resume``,
``open_thread``, ``reconnected``, ``clicked`` or ``decide``, ``stop``) and :meth:`ChatRenderer._render`,
which hands each output to its part. Adapters map platform events to the gateway (and
back to conversations) and never touch a subscription. Runs on the I/O loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from adapters.chat._approvals import decide
from adapters.chat._calls import PlatformCalls
from adapters.chat._links import Link, Links, RenderOptions
from adapters.chat._outbox_watch import ConversationOf, OutboxWatch
from adapters.chat._port import (
    MUST_DELIVER,
    ButtonClick,
    ChatApiError,
    ChatPort,
    Conversation,
    MessageRef,
    new_key,
)
from adapters.chat._text import error_note, note_for, split_message
from netclaw import outputs as out
from netclaw.errors import NetclawError
from netclaw.gateway import Admission, ChatInput, ChatPermit, CommandDone, Inbound

log = logging.getLogger(__name__)

STOP_UNMARK_S = 2.0  # at stop, how long taking the marks off may take


class ChatRenderer:
    def __init__(self, gateway: ChatInput, port: ChatPort, options: RenderOptions) -> None:
        self.gateway = gateway
        self.port = port
        self._calls = PlatformCalls(port)
        # Looked up per output, not bound once: the render step is this class's to change.
        self._links = Links(gateway, self._calls, options, lambda link, output: self._render(link, output))
        self._watch = OutboxWatch(gateway, self._calls, self._links)

    @property
    def options(self) -> RenderOptions:
        return self._links.options

    @options.setter
    def options(self, options: RenderOptions) -> None:
        self._links.options = options

    # -- what adapters call -------------------------------------------------------------------

    async def submit(
        self,
        permit: ChatPermit,
        inbound: Inbound,
        conversation: Conversation,
        source: MessageRef,
        *,
        retry_later: tuple[type[NetclawError], ...] = (),
    ) -> Admission | CommandDone | None:
        """Admit a permitted message and follow its session: the subscription is in place
        before the turn can speak, and the message wears the reaction until its turn ends.
        A chat command runs instead (its answer arrives as a notice). A refused message gets
        a note in the conversation; None is returned. A failure of a ``retry_later`` kind is
        raised instead, noted nowhere (a channel that will take the message again later:
        mail left unread)."""
        # Resident on another node: that node answers; here the message only wears the reaction.
        elsewhere = await self._links.owned_elsewhere(inbound.session_id)
        link = self._links.follow(inbound.session_id, conversation, listen=not elsewhere)
        link.holds += 1
        try:
            admission = await self.gateway.submit_chat(permit, inbound)
        except retry_later:
            raise
        except NetclawError as exc:
            log.warning(
                "%s: message %s not admitted to %s: %s",
                self.port.platform,
                source.message_id,
                inbound.session_id,
                exc,
            )
            await self.note(conversation, error_note(str(exc)))
            return None
        finally:
            link.holds -= 1
            link.last_activity = time.monotonic()
        if isinstance(admission, Admission) and not admission.duplicate:
            self._acknowledge(link, admission.message_id, source)
        return admission

    async def taken(
        self, permit: ChatPermit, inbound: Inbound, conversation: Conversation, source: MessageRef
    ) -> bool:
        """:meth:`submit`, for a channel that only needs to know whether the message was
        taken now: False when it was refused (noted), a redelivery already handled, or could
        not even be followed (shutting down: logged)."""
        try:
            admission = await self.submit(permit, inbound, conversation, source)
        except NetclawError as exc:
            log.warning("%s: cannot follow %s: %s", self.port.platform, inbound.session_id, exc)
            return False
        return admission is not None and not (isinstance(admission, Admission) and admission.duplicate)

    def _acknowledge(self, link: Link, message_id: str, source: MessageRef) -> None:
        """The message wears the mark until its turn ends; "typing" shows until a reply does."""
        if link.reactions.mark(message_id, source) and not link.reply.active:
            self._calls.spawn(self._calls.quietly("show typing", self.port.typing(link.conversation)))

    async def note(self, conversation: Conversation, text: str) -> None:
        """Post a note for people; a failure is logged, never raised."""
        for piece in split_message(text, self.port.message_limit):
            try:
                key = new_key()
                await self._calls.retried(
                    "post a note", partial(self.port.post, conversation, piece, key=key)
                )
            except ChatApiError as exc:
                log.warning("%s: could not post a note in %s: %s", self.port.platform, conversation, exc)
                return

    async def resume(self, conversation_of: ConversationOf) -> None:
        """Follow every session of this platform that owes its conversation something: a
        turn a restart interrupted, or a recorded reply never shown (the outbox). From now
        on, a reply recorded with nobody watching is followed and posted too."""
        await self._watch.resume(conversation_of)

    async def open_thread(
        self, channel: str, text: str, session_of: Callable[[Conversation], str], *, key: str, since: float
    ) -> str:
        """A delivery target: post ``text`` as a new message in ``channel``; the thread under
        it becomes a session, followed from now on so its replies show there."""
        conversation = await self._calls.retried(
            "open a thread",
            partial(self.port.open_thread, channel, self.port.escape(text), key=key, since=since),
            MUST_DELIVER,
        )
        session_id = session_of(conversation)
        self._links.follow(session_id, conversation)
        return session_id

    def reconnected(self) -> None:
        """The platform connection is back: every link that owes a reply listens again, and
        the outbox looks for replies recorded meanwhile."""
        if not self._links.stopping:
            self._calls.spawn(self._watch.look())
        self._links.reconnected()

    def clicked(self, click: ButtonClick) -> asyncio.Task[None]:
        """One of our buttons was pressed (adapters route every click here): decide the
        approval it belongs to. The gateway checks who may; a refusal is told to the person
        who pressed, and a decision shows as the request's message edited. Returns the
        deciding task (a channel that acknowledges the press only once decided awaits it)."""
        return self._calls.spawn(self.decide(click))

    async def decide(self, click: ButtonClick) -> None:
        """:meth:`clicked`, awaited: for a platform that answers the press itself once it is
        decided (Mattermost's action callback shows its reply to the presser alone)."""
        link = next((link for link in self._links if click.value in link.approvals), None)
        if link is not None and click.message is not None:
            link.approvals.pressed(click.value, click.message.message_id)
        await decide(self.gateway, self._calls, click, link.session_id if link is not None else None)

    def following(self) -> list[str]:
        """Sessions with a live subscription (status, tests)."""
        return self._links.following()

    async def stop(self) -> None:
        self._watch.stop()
        links = self._links.close()
        await self._calls.cancel_all(also=[link.task for link in links])
        # A turn cut short resumes after a restart: leave no "working on it" behind.
        removals = [removal for link in links for removal in link.reactions.removals()]
        if removals:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*removals, return_exceptions=True), STOP_UNMARK_S)

    # -- one output ---------------------------------------------------------------------------

    async def _render(self, link: Link, output: out.Output) -> None:
        match output:
            case out.Joined():
                link.joins += 1
                if link.joins > 1:  # a new subscription: a resumed turn streams from its start
                    link.reply.restart()
                await link.outbox.deliver_owed(output)
            case out.TextDelta(turn=turn, delta=delta):
                await link.reply.delta(turn, delta)
            case out.Text(turn=turn, text=text):
                shown = await link.reply.final(turn, text)
                if shown is not None:
                    await self._mark_delivered(link, turn, shown)
                link.reply.reset()
            case out.TurnCompleted(message_id=message_id):
                await link.reply.completed()
                link.reactions.turn_ended(message_id)
            case out.Error():
                await link.reply.failed()
                await self._note(link, output)
            case out.File(name=name, mime_type=mime_type, path=path):
                data = await asyncio.to_thread(Path(path).read_bytes)
                await self._calls.retried(
                    "upload a file", partial(self.port.upload, link.conversation, name, data, mime_type)
                )
            case out.ApprovalRequested():
                await link.approvals.ask(output)
            case out.ApprovalDecided():
                await link.approvals.show_decision(output)
            case out.SubagentStarted():
                await link.children.started(output)
            case out.SubagentFinished():
                await link.children.finished(output)
            case _:
                await self._note(link, output)

    async def _mark_delivered(self, link: Link, turn: int, message_ids: list[str]) -> None:
        """A reply shown live is recorded as delivered (the outbox owes it no more)."""
        await link.outbox.mark_delivered(turn, message_ids)

    async def _note(self, link: Link, output: out.Output) -> None:
        text = note_for(output)
        if text is not None:
            await self.note(link.conversation, text)
