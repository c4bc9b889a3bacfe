"""Link supervision: the subscription lifecycle of each session a renderer follows.

A :class:`Link` is one followed session: one gateway subscription (the assembled reply,
its streamed deltas, files, and every lifecycle output), one task handing what arrives
to the renderer, and the session's rendering parts (reply, reactions, approval prompts,
outbox, sub-agents' status lines). :class:`Links` keeps them:

- **Idle release.** A link with nothing pending lets its subscription go after
  ``release_after_s`` (a subscriber keeps a session resident); one whose turn we never
  saw end, after ``stale_after_s``. The next message follows the session again.
- **Re-subscribing.** If the session ends the stream while a reply is owed (it
  restarted, or we fell behind) the link subscribes again, a few times, backing off
  (:class:`~netclaw.retry.Backoff`); after a platform reconnect every owed link does.
- **Several nodes.** A session resident on another node is answered there: no local
  subscription is tried for it (:meth:`Links.owned_elsewhere`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from adapters.chat._approvals import ApprovalPrompts
from adapters.chat._calls import PlatformCalls
from adapters.chat._children import ChildLines
from adapters.chat._outbox import Deliveries, Outbox
from adapters.chat._port import ChatApiError, Conversation, StreamingPort
from adapters.chat._reactions import Reactions
from adapters.chat._streaming import NativeStreaming, ReplyStream
from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.errors import NetclawError
from netclaw.gateway import Subscription
from netclaw.retry import Backoff

log = logging.getLogger(__name__)

SUBSCRIPTION = out.OutputFilter.TEXT | out.OutputFilter.TEXT_STREAMING | out.OutputFilter.FILES
REVIVE_MAX_DELAY_S = 5.0
PROGRESS = (out.TextDelta, out.Text, out.TurnCompleted, out.Error)  # a stream that says these is alive


@dataclass(frozen=True, slots=True)
class RenderOptions:
    edit_interval_s: float  # at most one streaming edit per message this often
    release_after_s: float  # let a quiet subscription go after this long
    stale_after_s: float  # ... and one whose turn we never saw end, after this long
    reaction: str  # the platform's name of the "working on it" mark
    revive_delay_s: float = 0.2  # the first wait before subscribing again (then it doubles)
    max_revives: int = 3  # re-subscriptions in a row that bring no progress
    # False: the reply is shown once, whole, when the turn ends (mail cannot be edited):
    # the subscription takes no streamed deltas.
    streaming: bool = True

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        edit_interval_s: float,
        reaction: str,
        release_after_s: float | None = None,
        streaming: bool = True,
    ) -> RenderOptions:
        """A channel's options with the timings every channel shares, from ``settings``."""
        session = settings.session
        return cls(
            edit_interval_s=edit_interval_s,
            # Let go well before the session's own idle timer would want to passivate it.
            release_after_s=release_after_s
            if release_after_s is not None
            else min(300.0, session.idle_timeout_s / 2),
            stale_after_s=session.turn_timeout_s + 60.0,  # a pending turn we never saw end
            reaction=reaction,
            streaming=streaming,
        )


class Subscribing(Deliveries, Protocol):
    """What link supervision needs of the gateway."""

    def subscribe(self, session_id: str, mask: out.OutputFilter) -> Subscription: ...

    @property
    def cluster_poll_s(self) -> float | None: ...

    async def owner_of(self, session_id: str) -> object | None: ...


@dataclass(slots=True, eq=False)
class Link:
    session_id: str
    conversation: Conversation
    reply: ReplyStream
    reactions: Reactions
    approvals: ApprovalPrompts
    outbox: Outbox
    children: ChildLines
    subscription: Subscription | None = None
    task: asyncio.Task[None] | None = None
    holds: int = 0  # messages being admitted right now
    joins: int = 0  # streams joined so far (a second one replays the turn under way)
    revives: int = 0
    released: bool = False
    last_activity: float = field(default_factory=time.monotonic)

    def pending(self) -> bool:
        """Is a reply owed (a message admitted, being admitted, or half shown), or a
        sub-agent's answer (its line still says it works)?"""
        return self.reactions.waiting or self.holds > 0 or self.reply.active or self.children.running

    def listening(self) -> bool:
        return (
            self.subscription is not None
            and not self.subscription.ended
            and self.task is not None
            and not self.task.done()
        )


Render = Callable[[Link, out.Output], Awaitable[None]]


class Links:
    """The sessions one renderer follows, by session id. ``render`` shows one output."""

    def __init__(
        self, gateway: Subscribing, calls: PlatformCalls, options: RenderOptions, render: Render
    ) -> None:
        # Replaceable: supervision reads it at each use; a link's parts (the edit interval,
        # the reaction) take theirs when the link is made.
        self.options = options
        self.stopping = False
        self._gateway = gateway
        self._calls = calls
        self._render = render
        self._links: dict[str, Link] = {}
        self._native = NativeStreaming(isinstance(calls.port, StreamingPort))

    def __iter__(self) -> Iterator[Link]:
        return iter(list(self._links.values()))

    def get(self, session_id: str) -> Link | None:
        return self._links.get(session_id)

    def listening(self, session_id: str) -> bool:
        link = self._links.get(session_id)
        return link is not None and link.listening()

    def following(self) -> list[str]:
        """Sessions with a live subscription (status, tests)."""
        return sorted(sid for sid, link in self._links.items() if link.listening())

    async def owned_elsewhere(self, session_id: str) -> bool:
        """Several nodes: is the session resident on another one?"""
        if self._gateway.cluster_poll_s is None:
            return False
        try:
            return await self._gateway.owner_of(session_id) is not None
        except NetclawError:  # the database is away: try here, as on one node
            return False

    def follow(self, session_id: str, conversation: Conversation, *, listen: bool = True) -> Link:
        link = self._links.get(session_id)
        if link is None or link.released:
            link = self._new(session_id, conversation)
            self._links[session_id] = link
        if listen and not link.listening():
            self._listen(link)
        return link

    def drop(self, link: Link) -> None:
        """Let go of a link for good (idle, or stale): unsubscribe, take its marks off."""
        link.released = True
        if self._links.get(link.session_id) is link:
            del self._links[link.session_id]
        if link.subscription is not None:
            link.subscription.close()
        link.reactions.release()

    def reconnected(self) -> None:
        """The platform connection is back: every link that owes a reply listens again."""
        for link in list(self._links.values()):
            if link.listening():
                continue
            if link.pending():
                link.revives = 0
                self._listen(link)
            else:
                self.drop(link)

    def close(self) -> list[Link]:
        """Stop: end every subscription and render task (the caller awaits the tasks)."""
        self.stopping = True
        links = list(self._links.values())
        self._links.clear()
        for link in links:
            link.released = True
            if link.subscription is not None:
                link.subscription.close()
            if link.task is not None:
                link.task.cancel()
        return links

    def _new(self, session_id: str, conversation: Conversation) -> Link:
        calls, options = self._calls, self.options
        return Link(
            session_id,
            conversation,
            reply=ReplyStream(calls, session_id, conversation, self._native, options.edit_interval_s),
            reactions=Reactions(calls, options.reaction),
            approvals=ApprovalPrompts(calls, conversation),
            outbox=Outbox(self._gateway, calls, session_id, conversation),
            children=ChildLines(calls, session_id, conversation),
        )

    def _listen(self, link: Link) -> None:
        """Subscribe (again) and make sure the link's render task runs."""
        if link.subscription is not None:
            link.subscription.close()
        mask = SUBSCRIPTION if self.options.streaming else SUBSCRIPTION & ~out.OutputFilter.TEXT_STREAMING
        link.subscription = self._gateway.subscribe(link.session_id, mask)
        link.last_activity = time.monotonic()
        if link.task is None or link.task.done():
            link.task = asyncio.create_task(self._run(link), name=f"render-{link.session_id}")

    # -- the render loop ------------------------------------------------------------------------

    async def _run(self, link: Link) -> None:
        platform = self._calls.platform
        try:
            while not link.released and not self.stopping:
                subscription = link.subscription
                assert subscription is not None
                try:
                    output = await subscription.get(self._wait_time(link))
                except TimeoutError:
                    if link.reply.due_in(time.monotonic()) is not None:
                        await link.reply.flush()
                    elif self._may_release(link):
                        log.debug("%s: %s is quiet; letting its subscription go", platform, link.session_id)
                        self.drop(link)
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
            log.exception("%s: the renderer for %s failed", platform, link.session_id)
        # The stream is over. With a reply owed, stay known: the next message or a reconnect
        # listens again; otherwise we are done with this session.
        if not link.released and not link.pending():
            self.drop(link)

    def _wait_time(self, link: Link) -> float:
        now = time.monotonic()
        due = link.reply.due_in(now)
        if due is not None:
            return due
        hold = self.options.stale_after_s if link.pending() else self.options.release_after_s
        return max(0.05, link.last_activity + hold - now)

    def _may_release(self, link: Link) -> bool:
        quiet = time.monotonic() - link.last_activity
        if quiet < self.options.release_after_s or link.holds > 0:
            return False
        return not link.pending() or quiet >= self.options.stale_after_s

    async def _revive(self, link: Link) -> bool:
        """The session ended our stream. With a reply owed, subscribe again (it restarts
        from its journal and finishes the turn); otherwise let go."""
        platform, options = self._calls.platform, self.options
        if link.released or self.stopping or not link.pending():
            return False
        if await self.owned_elsewhere(link.session_id):  # another node answers it
            return False
        if link.revives >= options.max_revives:
            log.warning(
                "%s: %s keeps closing its stream; waiting for the next message or a reconnect",
                platform,
                link.session_id,
            )
            return False
        link.revives += 1
        log.info("%s: %s closed our stream with a reply owed; subscribing again", platform, link.session_id)
        backoff = Backoff(first_s=options.revive_delay_s, max_s=REVIVE_MAX_DELAY_S, jitter=0.0)
        await asyncio.sleep(backoff.delay(link.revives - 1))
        if link.released or self.stopping:
            return False
        try:
            self._listen(link)
        except NetclawError as exc:
            log.warning("%s: cannot subscribe to %s again: %s", platform, link.session_id, exc)
            return False
        return True

    async def _render_safely(self, link: Link, output: out.Output) -> None:
        link.last_activity = time.monotonic()
        if isinstance(output, PROGRESS):
            link.revives = 0
        try:
            await self._render(link, output)
        except ChatApiError as exc:
            log.warning(
                "%s: showing %s for %s failed: %s", self._calls.platform, output.event, link.session_id, exc
            )
