"""The Matrix adapter: rooms and threads ↔ sessions, invites, the sync loop.

Nothing here imports matrix-nio: platform calls go through a :class:`MatrixPort` and what
the homeserver sends arrives normalised (``_events.py``), so the flow is the same over the
real client and in tests. How replies appear (streaming by edits, splitting, the "seen" mark — a read receipt here —,
notes, approvals, the outbox) is the shared :class:`~adapters.chat.ChatRenderer`'s.

- A message in an allowed room that mentions the bot starts a thread under it; the thread
  is the session ``matrix:<room>:<root>`` (ids encoded by ``_ids.py``). A message in a
  thread that is already a session continues it without a mention; a mention in a thread
  people started without the bot makes it a session (reading what was said there first).
  A direct chat (``allow_dms``) is one session, ``matrix:<room>``.
- Invites are accepted by rule (``auto_join``): to a room in ``channels``, or a direct chat
  when ``allow_dms`` and the inviter passes ``users``; others are rejected, saying why.
- End-to-end encrypted rooms are refused out loud: netclaw says it cannot read them and
  leaves (invited to one, or a room it is in turning encryption on).
- The sync position is kept in the bot's account data after each batch it acted on: after
  a restart, what arrived meanwhile is answered; the first start answers no history. A
  replayed event is admitted once (``identity=matrix:<event id>``).
- Approvals are decided by a reaction on the prompt (👍 👎 ✅) or a reply saying the word.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from functools import partial

from aiohttp import web

from adapters.base import AdapterStatus, required_secret
from adapters.chat import (
    Asides,
    ButtonClick,
    ChatRenderer,
    Conversation,
    MessageRef,
    RenderOptions,
    SharedFile,
    fetch_files,
    new_key,
    session_known,
    with_file_names,
)
from adapters.matrix._config import MatrixConfig
from adapters.matrix._events import approval_of, reaction_key, thread_of
from adapters.matrix._ids import conversation_ids, place_of, session_id_for
from adapters.matrix._port import (
    APPROVAL_REACTIONS,
    EDIT_INTERVAL_S,
    SEEN_REACTION,
    MatrixApiError,
    MatrixInvite,
    MatrixMessage,
    MatrixPort,
    MatrixReaction,
    SyncBatch,
)
from netclaw.config import Settings
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.retry import Backoff
from netclaw.security.policy import ChatEvent, Place, dm_audience

log = logging.getLogger("adapters.matrix")

SYNC_TIMEOUT_MS = 30_000  # the long-poll: the homeserver answers at once when something happens
ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and netclaw does not read encrypted rooms, so it is "
    "leaving. Invite it to an unencrypted room (or a direct chat without encryption) instead."
)


def conversation_of(session_id: str) -> Conversation | None:
    ids = conversation_ids(session_id)
    return Conversation(ids[0], ids[1]) if ids is not None else None


class MatrixAdapter:
    """See the module docstring. ``port`` replaces the nio client (tests)."""

    name = "matrix"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        port: MatrixPort | None = None,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
        sync_timeout_ms: int = SYNC_TIMEOUT_MS,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        section = MatrixConfig.of(settings)
        self.homeserver = section.homeserver
        self.token_env = section.token_env
        self.options = RenderOptions.of(
            settings, edit_interval_s=edit_interval_s, reaction=SEEN_REACTION, release_after_s=release_after_s
        )
        self.sync_timeout_ms = sync_timeout_ms
        self._port: MatrixPort | None = port
        self._injected = port is not None
        self._asides: Asides[MatrixMessage] = Asides()
        self._refused: set[str] = set()  # encrypted rooms we said goodbye to
        self.renderer: ChatRenderer | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._owed: asyncio.Future[None] | None = None
        self._running = False
        self.since: str | None = None
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> MatrixConfig:
        """The current ``matrix`` section (follows a reload); the homeserver, the token and
        ``enabled`` need a restart."""
        return MatrixConfig.of(self.gateway.settings)

    # -- the Adapter protocol -------------------------------------------------------------------

    def check(self) -> None:
        try:
            if not self.homeserver:
                raise AdapterError(
                    "matrix: no homeserver is set (matrix.homeserver, e.g. https://matrix.example.org); "
                    "see docs/channels/matrix.md"
                )
            self._token()
            if importlib.util.find_spec("nio") is None:
                raise AdapterError(
                    "matrix: the matrix-nio library is not installed; install it with "
                    "pip install '.[matrix]' in the netclaw checkout"
                )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return []

    async def probe(self) -> str:
        self.check()
        from adapters.matrix._client import probe_whoami

        return await probe_whoami(self.homeserver, self._token(), self.token_env)

    async def start(self) -> None:
        if not self._injected:
            self.check()
            from adapters.matrix._client import connect

            self._status = AdapterStatus("starting", f"connecting to {self.homeserver}")
            try:
                self._port = await connect(self.homeserver, self._token(), self.token_env)
            except MatrixApiError as exc:
                self._status = AdapterStatus("failed", str(exc))
                raise
        port = self._require_port()
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        try:
            self.since = await port.load_since()
            if self.since is None:
                # The first start: take the current position, answer none of the history, but
                # handle the invites waiting (and the encrypted rooms) as any later ones.
                batch = await port.sync(None, 0)
                await self._apply(batch, answer=False)
                await port.save_since(batch.next_batch)
                self.since = batch.next_batch
        except MatrixApiError as exc:
            await self.stop()
            self._status = AdapterStatus("failed", str(exc))
            raise
        self.gateway.offer_threads("matrix", self._open_thread)
        self._owed = asyncio.ensure_future(self.renderer.resume(conversation_of))
        self._sync_task = asyncio.create_task(self._sync_forever(), name="matrix-sync")
        self._status = AdapterStatus("running")
        log.info("matrix: syncing as %s", port.user_id)

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("matrix", None)
        task, self._sync_task = self._sync_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self.renderer is not None:
            await self.renderer.stop()
        if not self._injected and self._port is not None:
            port, self._port = self._port, None
            with contextlib.suppress(Exception):
                await port.close()
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- the sync loop --------------------------------------------------------------------------

    async def _sync_forever(self) -> None:
        port = self._require_port()
        backoff = Backoff(0.5, 30.0, jitter=0.2)
        failures = 0
        while self._running:
            try:
                batch = await port.sync(self.since, self.sync_timeout_ms)
            except MatrixApiError as exc:
                if not exc.transient:
                    log.error("matrix: sync failed for good: %s", exc)
                    self._status = AdapterStatus("failed", str(exc))
                    return
                delay = exc.retry_after or backoff.delay(failures)
                failures += 1
                log.warning("matrix: sync failed (%s); again in %.1fs", exc, delay)
                self._status = AdapterStatus("reconnecting", f"the homeserver is unreachable: {exc}")
                await asyncio.sleep(delay)
                continue
            if self._status.state == "reconnecting":
                self._status = AdapterStatus("running")
                if self.renderer is not None:
                    self.renderer.reconnected()
            failures = 0
            acted = await self._apply(batch, answer=True)
            self.since = batch.next_batch
            if acted:
                # Kept after what it brought was handed on: a crash before this replays the
                # batch, and each event is admitted once (its identity).
                try:
                    await port.save_since(batch.next_batch)
                except MatrixApiError as exc:
                    log.warning("matrix: could not save the sync position: %s", exc)

    async def _apply(self, batch: SyncBatch, *, answer: bool) -> bool:
        """Act on one batch; True when it held anything from others (worth saving the position)."""
        for room_id in batch.limited:
            log.warning(
                "matrix: the homeserver left out earlier events of %s (a gap in its timeline): "
                "messages in the gap are not answered",
                room_id,
            )
        for invite in batch.invites:
            await self._invited(invite)
        for room_id in batch.encrypted:
            await self._refuse_encrypted(room_id)
        acted = bool(batch.invites)
        for event in batch.events:
            if event.from_self:
                continue
            acted = True
            if not answer:
                continue
            try:
                if isinstance(event, MatrixReaction):
                    await self._reacted(event)
                else:
                    await self.handle(event)
            except MatrixApiError as exc:
                log.warning("matrix: event %s in %s not handled: %s", event.event_id, event.room_id, exc)
        return acted

    # -- invites and encrypted rooms ------------------------------------------------------------

    async def _invited(self, invite: MatrixInvite) -> None:
        config, port = self.config, self._require_port()
        if not config.auto_join:
            log.info(
                "matrix: invite to %s from %s left alone (auto_join is off)", invite.room_id, invite.inviter
            )
            return
        why = self._invite_refusal(invite)
        if why is not None:
            log.info("matrix: rejected the invite to %s from %s: %s", invite.room_id, invite.inviter, why)
            await port.leave(invite.room_id, f"netclaw does not join this room: {why}")
            return
        await port.join(invite.room_id)
        log.info("matrix: joined %s (invited by %s)", invite.room_id, invite.inviter)
        if invite.encrypted:
            await self._refuse_encrypted(invite.room_id)
            return
        if invite.is_direct:
            await port.mark_direct(invite.room_id, invite.inviter)

    def _invite_refusal(self, invite: MatrixInvite) -> str | None:
        config = self.config
        if invite.room_id in config.channels:
            return None
        if invite.is_direct:
            if not config.allow_dms:
                return "direct chats are off (matrix.allow_dms)"
            if config.users is not None and invite.inviter not in config.users:
                return f"{invite.inviter} is not in its allowlist (matrix.users)"
            return None
        return "the room is not in its allowlist (matrix.channels)"

    async def _refuse_encrypted(self, room_id: str) -> None:
        """Say why, then leave: an encrypted room would otherwise see a bot that never answers."""
        if room_id in self._refused:
            return
        self._refused.add(room_id)
        port = self._require_port()
        log.warning("matrix: %s is end-to-end encrypted; netclaw said so and left it", room_id)
        try:
            await port.post(Conversation(room_id), ENCRYPTED_NOTICE, key=new_key())
        except MatrixApiError as exc:
            log.warning("matrix: could not tell %s why netclaw leaves: %s", room_id, exc)
        await port.leave(room_id, "netclaw does not read end-to-end encrypted rooms")

    # -- messages -------------------------------------------------------------------------------

    async def handle(self, message: MatrixMessage) -> str | None:
        """One incoming message. Returns the session id it was admitted to, or None."""
        renderer = self.renderer
        if not self._running or renderer is None or message.from_self:
            return None
        if await self._decided_by_reply(message):
            return None
        room = message.room_id
        try:
            if message.is_dm:
                session_id, target = session_id_for(room), Conversation(room)
            else:
                root = message.thread_root or message.event_id
                session_id, target = session_id_for(room, root), Conversation(room, root)
        except ValueError as exc:
            log.warning("matrix: message %s in %s cannot be a session: %s", message.event_id, room, exc)
            return None
        known = (
            not message.from_bot
            and message.thread_root is not None
            and not message.is_dm
            and await self._knows(session_id)
        )
        event = ChatEvent(
            platform="matrix",
            channel_id=room,
            user_id=message.sender,
            is_dm=message.is_dm,
            mentioned=message.mentioned,
            thread_known=known,
            from_bot=message.from_bot,
        )
        permit = self.gateway.permit(event)
        if permit is None:
            if known and (message.text.strip() or message.files):
                self._asides.add(session_id, message)
            return None
        if not message.text.strip() and not message.files:
            return None
        port = self._require_port()
        earlier: list[MatrixMessage] = []
        if message.thread_root is not None and not known and not message.is_dm:
            earlier = await self._earlier(port, message)
        earlier += self._asides.take(session_id)
        files, refused = await fetch_files(
            [SharedFile(f.name, f.mime_type, f.size, partial(port.download, f.url)) for f in message.files],
            "matrix",
        )
        if refused:
            await renderer.note(target, refused)
        if not message.text.strip() and not files:
            return None
        inbound = Inbound(
            session_id,
            message.text,
            user=message.sender,
            identity=f"matrix:{message.event_id}",
            user_name=message.sender_name or None,
            prior=[PriorMessage(m.sender, m.sender_name, with_file_names(m.text, m.files)) for m in earlier],
            files=files,
            # Memories stay in the room its threads are in; a direct chat is only "team" when a
            # user allowlist vetted who may write.
            place=Place(place_of(room), dm_audience(self.config) if message.is_dm else None),
        )
        # None: refused (noted), a redelivery already handled, or not followed (shutting down).
        return (
            session_id
            if await renderer.taken(permit, inbound, target, MessageRef(room, message.event_id))
            else None
        )

    async def _earlier(self, port: MatrixPort, message: MatrixMessage) -> list[MatrixMessage]:
        assert message.thread_root is not None
        try:
            found = await port.thread(
                message.room_id, message.thread_root, message.event_id, self.config.thread_context_messages
            )
        except MatrixApiError as exc:
            log.warning(
                "matrix: the thread before %s not read (%s); the turn goes without", message.event_id, exc
            )
            return []
        return [m for m in found if not m.from_self and (m.text.strip() or m.files)]

    # -- approvals ------------------------------------------------------------------------------

    async def _reacted(self, reaction: MatrixReaction) -> None:
        """A reaction on one of our approval prompts decides it (the renderer's button click)."""
        await self._decide(
            reaction.room_id, reaction.target, reaction.sender, reaction.sender_name, key=reaction.key
        )

    async def _decided_by_reply(self, message: MatrixMessage) -> bool:
        """A reply to an approval prompt saying approve, deny or always decides it."""
        word = message.text.strip().lower().rstrip(".!")
        if message.reply_to is None or word not in ("approve", "deny", "always"):
            return False
        return await self._decide(
            message.room_id, message.reply_to, message.sender, message.sender_name, action=word
        )

    async def _decide(
        self, room: str, target: str, user: str, user_name: str, *, key: str = "", action: str = ""
    ) -> bool:
        renderer, port = self.renderer, self._require_port()
        if renderer is None:
            return False
        if key and key not in {reaction_key(k) for k in APPROVAL_REACTIONS.values()}:
            return False  # not one of ours: no need to read what it is on
        prompt = await port.event(room, target)
        if prompt is None or prompt.get("sender") != port.user_id:
            return False
        content = prompt.get("content")
        found = approval_of(content) if isinstance(content, dict) else None
        if found is None:
            return False
        approval_id, choices = found
        action = action or choices.get(key, "")
        if action not in choices.values():
            return False
        where = Conversation(room, thread_of(content) if isinstance(content, dict) else None)

        async def respond(text: str) -> None:
            await port.post(where, f"{user_name or user}: {text}", key=new_key())

        renderer.clicked(
            ButtonClick(
                action_id=action,
                value=approval_id,
                user_id=user,
                message=MessageRef(room, target),
                user_name=user_name or user,
                respond=respond,
            )
        )
        return True

    # -- helpers --------------------------------------------------------------------------------

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``): a room id."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: session_id_for(c.channel, c.thread), key=key, since=since
        )

    def following(self) -> list[str]:
        return self.renderer.following() if self.renderer is not None else []

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "matrix")

    def _require_port(self) -> MatrixPort:
        if self._port is None:
            raise AdapterError("matrix: the adapter is not started")
        return self._port

    def _token(self) -> str:
        return required_secret(
            self.token_env, what="access token", key="matrix.token_env", docs="docs/channels/matrix.md"
        )
