"""The outbox and threads: replies a conversation is owed, shown exactly once, and the
threads channels open as delivery targets — :class:`OutboxService`.

A session that records a reply tells the manager, which tells this service; the channel
that watches the session's platform (:meth:`OutboxService.watch_owed_replies`) follows the
session and posts the reply, then marks it delivered (``MarkDelivered``, journaled), so a
crash between posting and marking posts nothing twice. With several nodes, a reply
recorded where its platform is not connected hands the session over to the node that is.
A channel that can open threads offers its opener here; a reminder's or a webhook's
``deliver`` opens one through :meth:`OutboxService.open_thread`.

Who uses it: the chat role (``_chat``: every chat channel's outbox and thread opener);
the sub-agents' port (``_subagents``: a child's answers are replies owed to its parent,
on the ``agent`` channel); the scheduler and the webhook channel (``open_thread``, the
``Threads`` role). Runs on the I/O loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from netclaw.cluster import Routing
from netclaw.config import LiveSettings
from netclaw.errors import SessionUnavailable
from netclaw.gateway._ask import ask
from netclaw.gateway._views import ThreadOpener
from netclaw.persistence import Journal
from netclaw.security.policy import channel_of
from netclaw.sessions import ListUndelivered, MarkDelivered, SessionManager

log = logging.getLogger(__name__)


class OutboxService:
    def __init__(
        self, manager: SessionManager, journal: Journal, live: LiveSettings, routing: Routing | None = None
    ) -> None:
        self._manager = manager
        self._journal = journal
        self._live = live
        self._routing = routing
        self._openers: dict[str, ThreadOpener] = {}  # platform → its adapter's thread opener
        self._shown: dict[str, Callable[[str], None]] = {}  # platform → its channel's outbox
        manager.on_reply_owed(self._reply_owed)

    @property
    def cluster_poll_s(self) -> float | None:
        """Several nodes: how often a channel looks for replies owed in sessions another node
        recorded (None on one node, where every reply is recorded here)."""
        return self._live.current.cluster.lease_s / 3 if self._routing is not None else None

    # -- replies owed -------------------------------------------------------------------------

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        """Chat sessions of ``platform`` whose recorded replies are not all shown yet."""
        return await self._journal.sessions_owing_replies(platform)

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]:
        """Sessions with admitted messages not yet answered (e.g. interrupted by a restart)."""
        found = await self._journal.sessions_with_pending_input()
        return [s for s in found if channel is None or channel_of(s) == channel]

    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]:
        """(turn, text, recorded at) of each reply the conversation is still owed."""
        return await ask(self._manager, session_id, ListUndelivered)

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        """The channel showed the reply of ``turn``; False if it was not owed (any more)."""
        return await ask(
            self._manager, session_id, lambda reply: MarkDelivered(turn, tuple(message_ids), reply)
        )

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        """``listener(session_id)`` on the loop whenever a session of ``platform`` records a
        reply (its channel follows the session and posts it, whether or not anyone was
        watching), until :meth:`unwatch_owed_replies`."""
        self._shown[platform] = listener

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        """The channel stopped here (its adapter stopped, or another node took it over)."""
        if self._shown.get(platform) == listener:
            del self._shown[platform]

    def _reply_owed(self, session_id: str) -> None:
        platform = channel_of(session_id)
        listener = self._shown.get(platform)
        if listener is not None:
            listener(session_id)
        elif self._routing is not None:
            # Several nodes: the platform is connected on another one (Discord's one
            # connection). Let the session go, so the node that shows its replies takes it
            # over and posts this one (its outbox looks for owed replies every few seconds).
            log.info(
                "%s: recorded a reply %s is not connected here for; handing the session over",
                session_id,
                platform,
            )
            self._manager.passivate(session_id)

    # -- threads ------------------------------------------------------------------------------

    def offer_threads(self, platform: str, opener: ThreadOpener | None) -> None:
        """A chat adapter that can open threads (delivery targets) offers it here while it
        runs (None withdraws it)."""
        if opener is None:
            self._openers.pop(platform, None)
        else:
            self._openers[platform] = opener

    async def open_thread(self, platform: str, channel: str, text: str, *, key: str, since: float) -> str:
        """Post ``text`` as a new message in ``channel`` of ``platform``; the session id of the
        thread under it. The same ``key`` again opens no second thread where the platform
        can tell (see ``ChatPort.open_thread``)."""
        opener = self._openers.get(platform)
        if opener is None:
            raise SessionUnavailable(f"{platform} is not connected, so nothing can be delivered to {channel}")
        return await opener(channel, text, key, since)
