"""The chat renderer: how a session's outputs appear on a chat platform, written once.

One renderer per chat adapter, over its :class:`ChatPort`. For each session that is
active on the platform it keeps a *link*: one gateway subscription (the assembled
reply, its streamed deltas, files, and every lifecycle output) and one task that
renders what arrives:

- **Streaming.** The first text of a reply is posted at once; later deltas edit it at
  most every ``edit_interval_s`` (platforms rate-limit edits), and the final ``text``
  replaces what streamed, split at the platform's message size on paragraph and
  code-fence boundaries, leftover pieces deleted. Each posted piece has an idempotency
  key, so a post whose answer was lost is never shown twice. Where the port streams
  natively (:class:`StreamingPort`: Slack's ``chat.startStream``) the reply is one
  growing message instead, appended to at the same pace and closed with the final
  text; a workspace without it falls back to posting and editing, once and for all.
- **Reactions, by message id.** A user message the gateway admitted wears the
  "working on it" reaction until the ``turn_completed`` that names it — matched by the
  message id the turn reports, never by counting turns.
- **Notices** for people: errors, trimmed or summarised history, command answers.
- **Files** are uploaded; **approval requests** get buttons, edited once decided. A
  click comes back through :meth:`ChatRenderer.clicked` and decides through the gateway
  (which checks who may); a refusal is told to the person who clicked only.
- **Idle release.** A link with nothing pending lets its subscription go after
  ``release_after_s`` (a subscriber keeps a session resident), and the next message
  subscribes again.
- **Re-subscribing.** If the session ends the stream while a reply is owed (it
  restarted, or we fell behind) the link subscribes again, a few times; after a
  platform reconnect (:meth:`ChatRenderer.reconnected`) every owed link does.

Adapters map platform events to the gateway (and back to conversations); they hand a
permitted message to :meth:`ChatRenderer.submit` and never touch a subscription.
Runs on the I/O loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from adapters.chat._port import (
    BEST_EFFORT,
    MUST_DELIVER,
    Button,
    ButtonClick,
    ChatApiError,
    ChatPort,
    Conversation,
    MessageRef,
    StreamingPort,
    StreamingUnsupported,
    new_key,
    outbox_key,
    retry_verdict,
)
from adapters.chat._text import error_note, note_for, split_message
from netclaw import outputs as out
from netclaw.errors import ApprovalError, ApprovalNotFound, InvalidInput, NetclawError
from netclaw.gateway import Admission, ChatPermit, CommandDone, Gateway, Inbound, Subscription
from netclaw.policy import channel_of
from netclaw.retry import RetryPolicy, with_retries

log = logging.getLogger(__name__)

T = TypeVar("T")

SUBSCRIPTION = out.OutputFilter.TEXT | out.OutputFilter.TEXT_STREAMING | out.OutputFilter.FILES
REMEMBERED_COMPLETIONS = 64  # turns that ended before their message's reaction was added
MAX_APPROVAL_ARGUMENTS = 1500
STREAM_PIECES = 3  # a natively streamed reply holds up to this many messages' worth of text
OUTBOX_LOOKBACK_S = 300.0  # a crashed post is looked for from this long before its reply was recorded


@dataclass(frozen=True, slots=True)
class RenderOptions:
    edit_interval_s: float  # at most one streaming edit per message this often
    release_after_s: float  # let a quiet subscription go after this long
    stale_after_s: float  # ... and one whose turn we never saw end, after this long
    reaction: str  # the platform's name of the "working on it" mark
    revive_delay_s: float = 0.2
    max_revives: int = 3  # re-subscriptions in a row that bring no progress


@dataclass(slots=True)
class _Piece:
    message_id: str
    shown: str


@dataclass(slots=True)
class _Reply:
    """What the conversation shows of the turn being streamed."""

    turn: int | None = None
    text: str = ""
    pieces: list[_Piece] = field(default_factory=list)
    keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # piece → (key, text first sent)
    dirty: bool = False  # the text changed since it was last shown
    last_sync: float = 0.0
    stream: str | None = None  # the natively streamed message, while it is open
    streamed: str = ""  # the text it shows

    @property
    def active(self) -> bool:
        return bool(self.text or self.pieces or self.stream)


@dataclass(slots=True)
class _Ack:
    source: MessageRef  # the platform message wearing the reaction
    reacted: asyncio.Task[bool] | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Link:
    session_id: str
    conversation: Conversation
    subscription: Subscription | None = None
    task: asyncio.Task[None] | None = None
    acks: dict[str, _Ack] = field(default_factory=dict)  # netclaw message id → its platform message
    completed: list[str] = field(default_factory=list)  # turns that ended before their ack was known
    holds: int = 0  # messages being admitted right now
    reply: _Reply = field(default_factory=_Reply)
    approvals: dict[str, tuple[str, str]] = field(default_factory=dict)  # approval id → (message, tool)
    delivered: set[int] = field(default_factory=set)  # turns whose reply we showed and recorded
    joins: int = 0
    revives: int = 0
    released: bool = False
    last_activity: float = field(default_factory=time.monotonic)

    def pending(self) -> bool:
        """Is a reply owed (a message admitted, being admitted, or half shown)?"""
        return bool(self.acks) or self.holds > 0 or self.reply.active

    def listening(self) -> bool:
        return (
            self.subscription is not None
            and not self.subscription.ended
            and self.task is not None
            and not self.task.done()
        )


class ChatRenderer:
    def __init__(self, gateway: Gateway, port: ChatPort, options: RenderOptions) -> None:
        self.gateway = gateway
        self.port = port
        self.options = options
        self._links: dict[str, _Link] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._conversation_of: Callable[[str], Conversation | None] | None = None  # set by resume
        self._streaming = isinstance(port, StreamingPort)  # until the platform says it cannot

    # -- what adapters call -------------------------------------------------------------------

    async def submit(
        self,
        permit: ChatPermit,
        inbound: Inbound,
        conversation: Conversation,
        source: MessageRef,
    ) -> Admission | CommandDone | None:
        """Admit a permitted message and follow its session: the subscription is in place
        before the turn can speak, and the message wears the reaction until its turn ends.
        A chat command runs instead (its answer arrives as a notice). A refused message gets
        a note in the conversation; None is returned."""
        # Resident on another node: that node answers; here the message only wears the reaction.
        elsewhere = await self._owned_elsewhere(inbound.session_id)
        link = self._follow(inbound.session_id, conversation, listen=not elsewhere)
        link.holds += 1
        try:
            admission = await self.gateway.submit_chat(permit, inbound)
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

    async def note(self, conversation: Conversation, text: str) -> None:
        """Post a note for people; a failure is logged, never raised."""
        for piece in split_message(text, self.port.message_limit):
            try:
                key = new_key()
                await self._call("post a note", partial(self.port.post, conversation, piece, key=key))
            except ChatApiError as exc:
                log.warning("%s: could not post a note in %s: %s", self.port.platform, conversation, exc)
                return

    async def resume(self, conversation_of: Callable[[str], Conversation | None]) -> None:
        """Follow every session of this platform that owes its conversation something: a
        turn a restart interrupted, or a recorded reply never shown (the outbox). From now
        on, a reply recorded with nobody watching is followed and posted too — and, with
        several nodes, one another node recorded: they are looked for every few seconds."""
        if self._conversation_of is None:
            self._conversation_of = conversation_of
            self.gateway.watch_owed_replies(self.port.platform, self._reply_owed)
            every = self.gateway.cluster_poll_s
            if every is not None:
                self._spawn(self._keep_looking(every))
        await self._look_for_owed()

    async def _look_for_owed(self) -> None:
        platform, conversation_of = self.port.platform, self._conversation_of
        if conversation_of is None:  # not resumed yet: nothing to post to
            return
        clustered = self.gateway.cluster_poll_s is not None
        looked_at = time.monotonic()
        try:
            pending = await self.gateway.sessions_with_pending_input(channel=platform)
            owing = await self.gateway.sessions_owing_replies(platform)
            for session_id in dict.fromkeys([*pending, *owing]):
                conversation = conversation_of(session_id)
                if conversation is None or self._following(session_id):
                    continue
                # Owned by another node: it posts the reply itself, or (not connected to
                # this platform) lets the session go once it recorded one, and a later look
                # finds it free.
                if await self._owned_elsewhere(session_id):
                    continue
                self._follow(session_id, conversation)
        except NetclawError as exc:  # best effort: the next message follows it anyway
            log.warning("%s: cannot list sessions owing replies: %s", platform, exc)
            return
        if clustered:
            # A message acknowledged here whose turn ran on another node (or ended before
            # this node listened): once its session owes nothing, its reaction comes off.
            owes = {*pending, *owing}
            for link in [link for sid, link in self._links.items() if sid not in owes]:
                self._settle(link, looked_at)

    def _settle(self, link: _Link, before: float) -> None:
        """The session owed nothing when we looked: take the reaction off the messages
        acknowledged before that, and let the link go if nothing here is under way."""
        for message_id, ack in list(link.acks.items()):
            if ack.at < before:
                del link.acks[message_id]
                self._spawn(self._unreact(ack))
        if not link.listening() and not link.pending():
            self._drop(link)

    async def _keep_looking(self, every_s: float) -> None:
        while not self._stopping:
            await asyncio.sleep(every_s)
            await self._look_for_owed()

    async def _owned_elsewhere(self, session_id: str) -> bool:
        """Several nodes: is the session resident on another one?"""
        if self.gateway.cluster_poll_s is None:
            return False
        try:
            return await self.gateway.owner_of(session_id) is not None
        except NetclawError:  # the database is away: try here, as on one node
            return False

    def _following(self, session_id: str) -> bool:
        link = self._links.get(session_id)
        return link is not None and link.listening()

    def _reply_owed(self, session_id: str) -> None:
        """A session recorded a reply: if no link shows it live, follow the session (its
        ``joined`` makes the outbox post what is owed)."""
        if channel_of(session_id) != self.port.platform or self._stopping or self._conversation_of is None:
            return
        link = self._links.get(session_id)
        if link is not None and link.listening():
            return
        conversation = self._conversation_of(session_id)
        if conversation is not None:
            self._follow(session_id, conversation)

    async def open_thread(
        self, channel: str, text: str, session_of: Callable[[Conversation], str], *, key: str, since: float
    ) -> str:
        """A delivery target: post ``text`` as a new message in ``channel``; the thread under
        it becomes a session, followed from now on so its replies show there."""
        conversation = await self._call(
            "open a thread",
            partial(self.port.open_thread, channel, self.port.escape(text), key=key, since=since),
            MUST_DELIVER,
        )
        session_id = session_of(conversation)
        self._follow(session_id, conversation)
        return session_id

    def reconnected(self) -> None:
        """The platform connection is back: every link that owes a reply listens again, and
        the outbox looks for replies recorded meanwhile."""
        if not self._stopping:
            self._spawn(self._look_for_owed())
        for link in list(self._links.values()):
            if link.listening():
                continue
            if link.pending():
                link.revives = 0
                self._listen(link)
            else:
                self._drop(link)

    def clicked(self, click: ButtonClick) -> None:
        """One of our buttons was pressed (adapters route every click here): decide the
        approval it belongs to. The gateway checks who may; a refusal is told to the person
        who pressed, and a decision shows as the request's message edited."""
        self._spawn(self._decide(click))

    async def _decide(self, click: ButtonClick) -> None:
        session_id = next((sid for sid, link in self._links.items() if click.value in link.approvals), None)
        try:
            if session_id is None:  # asked before a restart: find it among the pending
                session_id = await self.gateway.find_approval(click.value)
            if session_id is None:
                raise ApprovalNotFound("this request is no longer pending (decided, expired or cancelled)")
            await self.gateway.decide_in_chat(
                self.port.platform,
                session_id,
                click.value,
                click.action_id,
                user_id=click.user_id,
                user_name=click.user_name or click.user_id,
            )
        except (ApprovalError, InvalidInput) as exc:
            log.info(
                "%s: %s's %r on %s refused: %s",
                self.port.platform,
                click.user_id,
                click.action_id,
                click.value,
                exc,
            )
            if click.respond is not None:
                await self._quietly("answer a button press", click.respond(str(exc)))
        except NetclawError as exc:
            log.warning("%s: deciding %s failed: %s", self.port.platform, click.value, exc)
            if click.respond is not None:
                await self._quietly("answer a button press", click.respond(f"could not decide: {exc}"))

    def following(self) -> list[str]:
        """Sessions with a live subscription (status, tests)."""
        return sorted(sid for sid, link in self._links.items() if link.listening())

    async def stop(self) -> None:
        self._stopping = True
        self.gateway.unwatch_owed_replies(self.port.platform, self._reply_owed)
        links = list(self._links.values())
        self._links.clear()
        for link in links:
            link.released = True
            if link.subscription is not None:
                link.subscription.close()
            if link.task is not None:
                link.task.cancel()
        for task in list(self._tasks):
            task.cancel()
        waiting = [t for t in (*self._tasks, *(link.task for link in links)) if t is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=5.0)
        # A turn cut short resumes after a restart: leave no "working on it" behind.
        removals = [self._react(ack.source, add=False) for link in links for ack in link.acks.values()]
        if removals:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*removals, return_exceptions=True), 2.0)

    # -- links and subscriptions --------------------------------------------------------------

    def _follow(self, session_id: str, conversation: Conversation, *, listen: bool = True) -> _Link:
        link = self._links.get(session_id)
        if link is None or link.released:
            link = _Link(session_id, conversation)
            self._links[session_id] = link
        if listen and not link.listening():
            self._listen(link)
        return link

    def _listen(self, link: _Link) -> None:
        """Subscribe (again) and make sure the link's render task runs."""
        if link.subscription is not None:
            link.subscription.close()
        link.subscription = self.gateway.subscribe(link.session_id, SUBSCRIPTION)
        link.last_activity = time.monotonic()
        if link.task is None or link.task.done():
            link.task = asyncio.create_task(self._run(link), name=f"render-{link.session_id}")

    def _drop(self, link: _Link) -> None:
        """Let go of a link for good (idle, or stale): unsubscribe, clear its marks."""
        link.released = True
        if self._links.get(link.session_id) is link:
            del self._links[link.session_id]
        if link.subscription is not None:
            link.subscription.close()
        for ack in link.acks.values():
            self._spawn(self._unreact(ack))
        link.acks.clear()

    # -- the render loop ----------------------------------------------------------------------

    async def _run(self, link: _Link) -> None:
        try:
            while not link.released and not self._stopping:
                subscription = link.subscription
                assert subscription is not None
                try:
                    output = await subscription.get(self._wait_time(link))
                except TimeoutError:
                    if link.reply.dirty:
                        await self._sync(link)
                    elif self._may_release(link):
                        log.debug(
                            "%s: %s is quiet; letting its subscription go",
                            self.port.platform,
                            link.session_id,
                        )
                        self._drop(link)
                    continue
                if output is None:
                    if subscription is not link.subscription:  # replaced by a new subscription
                        continue
                    if await self._revive(link):
                        continue
                    break
                await self._render_safely(link, output)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: the renderer for %s failed", self.port.platform, link.session_id)
        # The stream is over. With a reply owed, stay known: the next message or a reconnect
        # listens again; otherwise we are done with this session.
        if not link.released and not link.pending():
            self._drop(link)

    def _wait_time(self, link: _Link) -> float:
        now = time.monotonic()
        if link.reply.dirty:
            return max(0.0, link.reply.last_sync + self.options.edit_interval_s - now)
        hold = self.options.stale_after_s if link.pending() else self.options.release_after_s
        return max(0.05, link.last_activity + hold - now)

    def _may_release(self, link: _Link) -> bool:
        quiet = time.monotonic() - link.last_activity
        if quiet < self.options.release_after_s or link.holds > 0:
            return False
        return not link.pending() or quiet >= self.options.stale_after_s

    async def _revive(self, link: _Link) -> bool:
        """The session ended our stream. With a reply owed, subscribe again (it restarts
        from its journal and finishes the turn); otherwise let go."""
        if link.released or self._stopping or not link.pending():
            return False
        if await self._owned_elsewhere(link.session_id):  # another node answers it
            return False
        if link.revives >= self.options.max_revives:
            log.warning(
                "%s: %s keeps closing its stream; waiting for the next message or a reconnect",
                self.port.platform,
                link.session_id,
            )
            return False
        link.revives += 1
        log.info(
            "%s: %s closed our stream with a reply owed; subscribing again",
            self.port.platform,
            link.session_id,
        )
        await asyncio.sleep(self.options.revive_delay_s * link.revives)
        if link.released or self._stopping:
            return False
        try:
            self._listen(link)
        except NetclawError as exc:
            log.warning("%s: cannot subscribe to %s again: %s", self.port.platform, link.session_id, exc)
            return False
        return True

    async def _render_safely(self, link: _Link, output: out.Output) -> None:
        link.last_activity = time.monotonic()
        if isinstance(output, out.TextDelta | out.Text | out.TurnCompleted | out.Error):
            link.revives = 0  # progress
        try:
            await self._render(link, output)
        except ChatApiError as exc:
            log.warning(
                "%s: showing %s for %s failed: %s", self.port.platform, output.event, link.session_id, exc
            )

    async def _render(self, link: _Link, output: out.Output) -> None:
        reply = link.reply
        match output:
            case out.Joined():
                link.joins += 1
                if link.joins > 1:  # a new subscription: a resumed turn streams from its start
                    reply.text = ""
                await self._deliver_owed(link, output)
            case out.TextDelta(turn=turn, delta=delta):
                reply = self._reply_for(link, turn)
                reply.text += delta
                reply.dirty = True
                first = not reply.pieces and reply.stream is None  # shown at once, the rest throttled
                if first or time.monotonic() - reply.last_sync >= self.options.edit_interval_s:
                    await self._sync(link)
            case out.Text(turn=turn, text=text):
                await self._final_text(link, turn, text)
            case out.TurnCompleted(message_id=message_id):
                if reply.dirty or reply.stream is not None:  # no `text` came: show what streamed
                    await self._sync(link, final=True)
                link.reply = _Reply()
                self._turn_ended(link, message_id)
            case out.Error():
                if reply.dirty or reply.stream is not None:
                    await self._sync(link, final=reply.stream is not None)
                link.reply = _Reply()
                await self._note(link, output)
            case out.File(name=name, mime_type=mime_type, path=path):
                data = await asyncio.to_thread(Path(path).read_bytes)
                await self._call(
                    "upload a file", partial(self.port.upload, link.conversation, name, data, mime_type)
                )
            case out.ApprovalRequested():
                await self._ask_approval(link, output)
            case out.ApprovalDecided():
                await self._show_decision(link, output)
            case _:
                await self._note(link, output)

    async def _final_text(self, link: _Link, turn: int, text: str) -> None:
        """The turn's reply as recorded: shown in full, then recorded as delivered."""
        reply = self._reply_for(link, turn)
        if text.strip() or not reply.pieces:  # an empty answer leaves what streamed
            reply.text = text
        reply.dirty = True
        if await self._sync(link, final=True):
            await self._mark_delivered(link, turn, [p.message_id for p in reply.pieces])
        link.reply = _Reply()

    async def _show_decision(self, link: _Link, decided: out.ApprovalDecided) -> None:
        shown = link.approvals.pop(decided.approval_id, None)
        if shown is not None:
            message_id, tool = shown
            text = self.port.escape(f"{tool}: {decided.decision} by {decided.by}")
            await self._call("show a decision", partial(self.port.edit, link.conversation, message_id, text))

    def _reply_for(self, link: _Link, turn: int) -> _Reply:
        if link.reply.turn not in (None, turn) and link.reply.active:
            link.reply = _Reply()  # a new turn's text never lands in the last one's messages
        link.reply.turn = turn
        return link.reply

    async def _note(self, link: _Link, output: out.Output) -> None:
        text = note_for(output)
        if text is not None:
            await self.note(link.conversation, text)

    async def _ask_approval(self, link: _Link, request: out.ApprovalRequested) -> None:
        arguments = request.arguments[:MAX_APPROVAL_ARGUMENTS]
        text = self.port.escape(f"May I run {request.tool}?\n{arguments}")
        buttons = [
            Button("approve", "Approve", request.approval_id, "primary"),
            Button("deny", "Deny", request.approval_id, "danger"),
            Button("always", "Always", request.approval_id),
        ]
        key = new_key()
        message_id = await self._call(
            "ask for approval", partial(self.port.post_buttons, link.conversation, text, buttons, key=key)
        )
        link.approvals[request.approval_id] = (message_id, request.tool)

    # -- showing the reply --------------------------------------------------------------------

    async def _sync(self, link: _Link, *, final: bool = False) -> bool:
        """Make the conversation show the reply: edit what is posted, post what is new and,
        when final, delete what is left over. A streaming update that fails is tried again
        at the next interval; a final one is retried before it gives up. True when shown."""
        reply = link.reply
        reply.dirty = False
        reply.last_sync = time.monotonic()
        if self._streaming and link.conversation.thread is not None and (reply.stream or not reply.pieces):
            streamed = await self._sync_stream(link, final=final)
            if streamed is not None:
                return streamed
        limit = self.port.message_limit
        pieces = [self.port.escape(p) for p in split_message(reply.text, limit)] if reply.text.strip() else []
        try:
            await self._show(link, pieces, MUST_DELIVER if final else BEST_EFFORT)
            if final:
                while len(reply.pieces) > len(pieces):  # the final reply is shorter than the stream
                    extra = reply.pieces.pop()
                    await self._quietly(
                        "delete a stale piece", self.port.delete(link.conversation, extra.message_id)
                    )
        except ChatApiError as exc:
            if final:
                log.error("%s: could not show the reply in %s: %s", self.port.platform, link.session_id, exc)
            else:
                log.info("%s: streaming update in %s skipped: %s", self.port.platform, link.session_id, exc)
                reply.dirty = True
            return False
        finally:
            reply.last_sync = time.monotonic()
        return True

    async def _sync_stream(self, link: _Link, *, final: bool) -> bool | None:
        """The reply as one natively streamed message: opened with the first text, appended
        to, closed with the rest of the final text. None: not handled here (no streaming on
        this platform, or a final text the stream cannot show whole) — post and edit."""
        port = self.port
        assert isinstance(port, StreamingPort)
        reply, to = link.reply, link.conversation
        text = reply.text
        try:
            if reply.stream is None:
                if final or not text.strip():
                    return None if final else True
                reply.stream = await port.stream_start(to, text)
                reply.streamed = text
                return True
            grows = text.startswith(reply.streamed) and len(text) <= port.message_limit * STREAM_PIECES
            if not final:
                if grows and len(text) > len(reply.streamed):  # else: the final text settles it
                    await port.stream_append(to, reply.stream, text[len(reply.streamed) :])
                    reply.streamed = text
                return True
            key = outbox_key(link.session_id, reply.turn, 0) if reply.turn is not None else new_key()
            rest = text[len(reply.streamed) :] if grows else ""
            stream_id = reply.stream
            await self._call(
                "close a streamed reply", partial(port.stream_stop, to, stream_id, rest, key=key)
            )
            reply.stream = None
            reply.streamed = text if grows else reply.streamed
            # From here it is an ordinary posted piece: a final text it could not show whole
            # (rewritten, or longer than a streamed message holds) is edited in as usual.
            reply.pieces = [_Piece(stream_id, port.escape(text) if grows else "")]
            return True if grows else None
        except StreamingUnsupported as exc:
            log.info("%s: no native streaming here (%s); posting and editing instead", port.platform, exc)
            self._streaming = False
            reply.stream = None
            return None
        except ChatApiError as exc:
            if final:
                log.error(
                    "%s: could not close the streamed reply in %s: %s", port.platform, link.session_id, exc
                )
            else:
                log.info("%s: streaming update in %s skipped: %s", port.platform, link.session_id, exc)
                reply.dirty = True
            return False

    async def _show(self, link: _Link, pieces: Sequence[str], policy: RetryPolicy) -> None:
        reply, to = link.reply, link.conversation
        for index, piece in enumerate(pieces):
            if index >= len(reply.pieces):
                # One key per piece of the turn, the outbox's: a repeat after a lost answer (or
                # the outbox after a crash) finds the message already made.
                key = new_key() if reply.turn is None else outbox_key(link.session_id, reply.turn, index)
                key, first = reply.keys.setdefault(index, (key, piece))
                message_id = await self._call(
                    "send a reply", partial(self.port.post, to, piece, key=key), policy
                )
                reply.pieces.append(_Piece(message_id, first))
            shown = reply.pieces[index]
            if shown.shown == piece:
                continue
            try:
                await self._call("edit a reply", partial(self.port.edit, to, shown.message_id, piece), policy)
            except ChatApiError as exc:
                if exc.status != 404:
                    raise
                # Someone deleted our message: post the piece anew rather than lose it.
                key = new_key()
                reply.keys[index] = (key, piece)
                shown.message_id = await self._call(
                    "send a reply", partial(self.port.post, to, piece, key=key), policy
                )
            shown.shown = piece

    # -- the outbox ---------------------------------------------------------------------------

    async def _deliver_owed(self, link: _Link, joined: out.Joined) -> None:
        """Post the replies the session recorded but the conversation never showed (nobody
        was watching, or we crashed between the two). A turn still running is left to the
        live path. Each piece keeps its outbox key, so one the crashed process did post is
        found (where the platform can tell) and edited to the final text, not posted twice."""
        try:
            owed = await self.gateway.undelivered_replies(link.session_id)
        except NetclawError as exc:
            log.warning("%s: cannot ask %s what it owes: %s", self.port.platform, link.session_id, exc)
            return
        running = joined.turns if joined.phase in ("processing", "compacting") else joined.turns + 1
        for turn, text, recorded_at in owed:
            if turn >= running or turn in link.delivered:
                continue
            ids: list[str] = []
            pieces = (
                [self.port.escape(p) for p in split_message(text, self.port.message_limit)]
                if text.strip()
                else []
            )
            for index, piece in enumerate(pieces):
                key = outbox_key(link.session_id, turn, index)
                found = await self._call(
                    "look for a posted reply",
                    partial(self.port.find_posted, link.conversation, key, recorded_at - OUTBOX_LOOKBACK_S),
                )
                if found is None:
                    found = await self._call(
                        "post an owed reply",
                        partial(self.port.post, link.conversation, piece, key=key),
                        MUST_DELIVER,
                    )
                else:
                    await self._quietly(
                        "finish an owed reply", self.port.edit(link.conversation, found, piece)
                    )
                ids.append(found)
            log.info("%s: posted the owed reply of turn %d in %s", self.port.platform, turn, link.session_id)
            await self._mark_delivered(link, turn, ids)

    async def _mark_delivered(self, link: _Link, turn: int, message_ids: list[str]) -> None:
        link.delivered.add(turn)
        try:
            await self.gateway.mark_delivered(link.session_id, turn, message_ids)
        except NetclawError as exc:  # shown but not recorded: the outbox finds it by key later
            log.warning(
                "%s: could not record the reply of turn %d in %s: %s",
                self.port.platform,
                turn,
                link.session_id,
                exc,
            )
            link.delivered.discard(turn)

    # -- reactions ----------------------------------------------------------------------------

    def _acknowledge(self, link: _Link, message_id: str, source: MessageRef) -> None:
        if message_id in link.completed:  # its turn already ended: nothing to mark
            link.completed.remove(message_id)
            return
        ack = _Ack(source)
        ack.reacted = self._spawn(self._react(source, add=True))
        link.acks[message_id] = ack
        if not link.reply.active:
            self._spawn(self._quietly("show typing", self.port.typing(link.conversation)))

    def _turn_ended(self, link: _Link, message_id: str) -> None:
        ack = link.acks.pop(message_id, None)
        if ack is not None:
            self._spawn(self._unreact(ack))
            return
        link.completed.append(message_id)  # the admission is still on its way back to us
        del link.completed[:-REMEMBERED_COMPLETIONS]

    async def _unreact(self, ack: _Ack) -> bool:
        if ack.reacted is not None:
            with contextlib.suppress(Exception):
                if not await ack.reacted:  # never remove before the add landed
                    return False
        return await self._react(ack.source, add=False)

    async def _react(self, source: MessageRef, *, add: bool) -> bool:
        what = "add a reaction" if add else "remove a reaction"
        return await self._quietly(what, self.port.react(source, self.options.reaction, add=add))

    # -- calls --------------------------------------------------------------------------------

    async def _call(
        self, what: str, call: Callable[[], Awaitable[T]], policy: RetryPolicy = MUST_DELIVER
    ) -> T:
        return await with_retries(
            call, classify=retry_verdict, policy=policy, what=f"{self.port.platform}: {what}", logger=log
        )

    async def _quietly(self, what: str, call: Awaitable[object]) -> bool:
        """A best-effort call: True if it worked; a failure is logged, not raised."""
        try:
            await call
        except ChatApiError as exc:
            log.info("%s: could not %s: %s", self.port.platform, what, exc)
            return False
        return True

    def _spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
