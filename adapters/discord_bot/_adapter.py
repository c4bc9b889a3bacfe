"""The Discord adapter: message handling and thread ↔ session mapping.

Nothing here imports discord.py: platform calls go through a :class:`DiscordPort` and
platform messages arrive already normalised as :class:`DiscordMessage` (see ``_client.py``),
so the whole flow is testable with a fake port and the real gateway. How replies appear
(streaming edits, splitting, the 👀 reaction, notes, idle release, re-subscribing) is the
shared :class:`~adapters.chat.ChatRenderer`'s.

- A message in an allowed channel that mentions the bot starts a public thread from that
  message; the thread is the session ``discord:<thread_id>``. A message in a thread that is
  already a session continues it without a mention. A DM (when ``allow_dms``) is the session
  ``discord:<dm_channel_id>``. Who may talk is the gateway's chat policy (``permit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from adapters.base import AdapterStatus, required_secret
from adapters.chat import (
    MUST_DELIVER,
    Asides,
    ButtonClick,
    ChatRenderer,
    Conversation,
    MessageRef,
    RenderOptions,
    SharedFile,
    fetch_files,
    retry_verdict,
    session_known,
    with_file_names,
)
from adapters.discord_bot._config import DiscordConfig
from adapters.discord_bot._port import (
    SEEN_EMOJI,
    THREAD_NAME_LIMIT,
    DiscordApiError,
    DiscordMessage,
    DiscordPort,
)
from netclaw.config import Settings
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.retry import with_retries
from netclaw.security.policy import ChatEvent, Place, dm_audience

if TYPE_CHECKING:
    from adapters.discord_bot._client import NetclawClient

log = logging.getLogger("adapters.discord_bot")

EDIT_INTERVAL_S = 1.5  # Discord allows ~5 edits per 5 s per channel; stay well under it
CONNECT_TIMEOUT_S = 10.0  # how long start() waits for READY before returning "starting"


def session_id_for(thread_id: str) -> str:
    return f"discord:{thread_id}"


def conversation_of(session_id: str) -> Conversation | None:
    head, _, channel = session_id.partition(":")
    return Conversation(channel) if head == "discord" and channel.isascii() and channel.isdigit() else None


def thread_name(text: str) -> str:
    """A thread name from the first words of the message (Discord allows 1-100 characters)."""
    line = " ".join(text.split())
    if not line:
        return "netclaw"
    if len(line) <= THREAD_NAME_LIMIT:
        return line
    return line[: THREAD_NAME_LIMIT - 1].rstrip() + "\N{HORIZONTAL ELLIPSIS}"


class DiscordAdapter:
    """See the module docstring. ``port`` replaces the discord.py client (tests)."""

    name = "discord"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        port: DiscordPort | None = None,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.token_env = DiscordConfig.of(settings).token_env
        self.options = RenderOptions.of(
            settings, edit_interval_s=edit_interval_s, reaction=SEEN_EMOJI, release_after_s=release_after_s
        )
        self.connect_timeout_s = connect_timeout_s
        self._port: DiscordPort | None = port
        self._injected = port is not None
        self._asides: Asides[DiscordMessage] = Asides()  # said in followed threads, not to us
        self.renderer: ChatRenderer | None = None
        self._client: NetclawClient | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._running = False
        self._starting = False  # start() reports connection failures itself
        self._resumed_sessions = False  # the first connection resumes what a restart left owed
        self._owed: asyncio.Future[None] | None = None
        self._gateway_up: asyncio.Event | None = None
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> DiscordConfig:
        """The current ``discord`` section (follows a reload); the token and ``enabled``
        need a restart."""
        return DiscordConfig.of(self.gateway.settings)

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        try:
            self._token()
            if importlib.util.find_spec("discord") is None:
                raise AdapterError(
                    "discord: the discord.py library is not installed; install it with "
                    "pip install '.[discord]' in the netclaw checkout"
                )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return []

    async def probe(self) -> str:
        self.check()
        from adapters.discord_bot._client import probe_login

        return await probe_login(self._token(), self.token_env)

    async def start(self) -> None:
        self._resumed_sessions = False  # a new renderer: it looks for what is owed once connected
        if self._injected:
            assert self._port is not None
            self.renderer = ChatRenderer(self.gateway, self._port, self.options)
            self._running = True
            self._status = AdapterStatus("running")
            return
        self.check()
        token = self._token()
        from adapters.discord_bot._client import ClientPort, NetclawClient, translate_error

        self._status = AdapterStatus("starting", "connecting to Discord")
        client = NetclawClient(self)
        try:
            await client.login(token)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await client.close()
            error = translate_error(exc, "log in", token_env=self.token_env)
            self._status = AdapterStatus("failed", str(error))
            raise error from exc
        self._client = client
        self._port = port = ClientPort(client)
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        self.gateway.offer_threads("discord", self._open_thread)
        # Wait for the gateway's READY (token and intents accepted), not for on_ready (which
        # discord.py delays until every server has streamed in), or for an early refusal.
        gateway_up = self._gateway_up = asyncio.Event()
        self._starting = True
        try:
            task = asyncio.create_task(client.connect(reconnect=True), name="discord-gateway")
            task.add_done_callback(self._connection_ended)
            self._connect_task = task
            up = asyncio.create_task(gateway_up.wait())
            done, _ = await asyncio.wait(
                {up, task}, timeout=self.connect_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if up not in done:
                up.cancel()
            if task in done:  # refused: Message Content intent off, token revoked, no gateway
                failure = task.exception() if not task.cancelled() else None
                await self.stop()
                error = translate_error(
                    failure or RuntimeError("the connection ended"), "connect to the Discord gateway"
                )
                self._status = AdapterStatus("failed", str(error))
                raise error from failure
            if up not in done:
                log.warning(
                    "discord: not connected after %.0fs; still trying in the background",
                    self.connect_timeout_s,
                )
        finally:
            self._starting = False

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``)."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: session_id_for(c.channel), key=key, since=since
        )

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("discord", None)
        if self.renderer is not None:
            await self.renderer.stop()
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 10)
            except Exception as exc:  # noqa: BLE001 - stopping goes on whatever the client does
                log.warning("discord: closing the client failed: %r", exc)
        task, self._connect_task = self._connect_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if not self._injected:
            self._port = None
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- the platform's side --------------------------------------------------------------------

    def connected(self, *, resumed: bool) -> None:
        """The gateway session is (re)established: running, and every renderer listening."""
        if not self._running:
            return
        self._status = AdapterStatus("running")
        if self._gateway_up is not None:
            self._gateway_up.set()
        log.info("discord: gateway session %s", "resumed" if resumed else "established")
        if self.renderer is not None:
            if not self._resumed_sessions:  # the first connection: what a restart left owed
                self._resumed_sessions = True
                self._owed = asyncio.ensure_future(self.renderer.resume(conversation_of))
            self.renderer.reconnected()

    def clicked(self, click: ButtonClick) -> None:
        """A press on one of our buttons: to the renderer."""
        if self._running and self.renderer is not None:
            self.renderer.clicked(click)

    def disconnected(self) -> None:
        """The gateway connection dropped; discord.py reconnects by itself."""
        if self._running and self._status.state == "running":
            self._status = AdapterStatus(
                "reconnecting", "the gateway connection dropped; discord.py reconnects"
            )

    def _connection_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or not self._running or self._starting:
            return
        exc = task.exception()
        if exc is None:
            self._status = AdapterStatus("stopped", "the Discord connection was closed")
            return
        from adapters.discord_bot._client import translate_error

        error = translate_error(exc, "stay connected to the Discord gateway")
        log.error("discord: the gateway connection failed for good: %s", error)
        self._status = AdapterStatus("failed", str(error))

    async def handle(self, message: DiscordMessage) -> str | None:
        """One incoming message. Returns the session id it was admitted to, or None."""
        renderer = self.renderer
        if not self._running or renderer is None or message.from_self:
            return None
        target: str | None  # the channel replies go to (a thread or a DM), once known
        if message.is_dm:
            target = message.channel_id
            event = self._event(message, message.channel_id, is_dm=True)
        elif message.in_thread:
            assert message.parent_id is not None
            target = message.channel_id
            known = False if message.from_bot else await self._knows(session_id_for(target))
            event = self._event(message, message.parent_id, thread_known=known)
        else:
            target = None
            event = self._event(message, message.channel_id)
        permit = self.gateway.permit(event)
        if permit is None:
            if event.thread_known and not message.from_bot and (message.text.strip() or message.attachments):
                self._asides.add(session_id_for(message.channel_id), message)
            return None
        if not message.text.strip() and not message.attachments:
            log.debug("discord: message %s has neither text nor files; ignored", message.message_id)
            return None
        port = self._require_port()
        # A session starting mid-conversation first reads what came before it: the thread's
        # earlier messages (a mention mid-thread), the DM's. A new thread starts from nothing.
        earlier: list[DiscordMessage] = []
        if (message.in_thread and not event.thread_known) or (
            message.is_dm and target is not None and not await self._knows(session_id_for(target))
        ):
            earlier = await self._earlier(port, message)
        if target is None:
            target = await self._start_thread(message)
            if target is None:
                return None
        session_id = session_id_for(target)
        earlier += self._asides.take(session_id)
        files, refused = await fetch_files(
            [
                SharedFile(a.name, a.mime_type, a.size, partial(port.download, a.url))
                for a in message.attachments
            ],
            "discord",
        )
        if refused:
            await renderer.note(Conversation(target), refused)
        if not message.text.strip() and not files:
            return None
        inbound = Inbound(
            session_id,
            message.text,
            user=message.author_id,
            identity=f"discord:{message.message_id}",
            user_name=message.author_name or None,
            prior=[
                PriorMessage(m.author_id, m.author_name, with_file_names(m.text, m.attachments))
                for m in earlier
            ],
            files=files,
            # Memories stay in the guild channel a thread is in (a DM channel is one person's);
            # a DM is only "team" when a user allowlist vetted who may write.
            place=Place(
                f"discord:{message.parent_id or message.channel_id}",
                dm_audience(self.config) if message.is_dm else None,
            ),
        )
        # None: refused (noted), a redelivery already handled, or not followed (shutting down).
        return (
            session_id
            if await renderer.taken(
                permit, inbound, Conversation(target), MessageRef(message.channel_id, message.message_id)
            )
            else None
        )

    async def _earlier(self, port: DiscordPort, message: DiscordMessage) -> list[DiscordMessage]:
        try:
            found = await port.history(
                message.channel_id, message.message_id, self.config.thread_context_messages
            )
        except DiscordApiError as exc:
            log.warning(
                "discord: earlier messages of %s not read (%s); the turn goes without",
                message.channel_id,
                exc,
            )
            return []
        return [m for m in found if not m.from_self and (m.text.strip() or m.attachments)]

    async def _start_thread(self, message: DiscordMessage) -> str | None:
        port, renderer = self._require_port(), self.renderer
        assert renderer is not None
        try:
            return await with_retries(
                partial(
                    port.create_thread, message.channel_id, message.message_id, thread_name(message.text)
                ),
                classify=retry_verdict,
                policy=MUST_DELIVER,
                what="discord: create a thread",
                logger=log,
            )
        except DiscordApiError as exc:
            if exc.status == 409:
                # The message already has its thread (the same event delivered again, as a
                # resumed gateway replays it): a thread started from a message has the
                # message's id, so it is the same session and the gateway admits it once.
                return message.message_id
            log.warning("discord: could not start a thread in %s: %s", message.channel_id, exc)
            await renderer.note(
                Conversation(message.channel_id), f"Sorry, I could not start a thread here: {exc}"
            )
            return None

    def _event(
        self, message: DiscordMessage, channel_id: str, *, is_dm: bool = False, thread_known: bool = False
    ) -> ChatEvent:
        return ChatEvent(
            platform="discord",
            channel_id=channel_id,
            user_id=message.author_id,
            is_dm=is_dm,
            mentioned=message.mentioned,
            thread_known=thread_known,
            from_bot=message.from_bot,
        )

    def following(self) -> list[str]:
        """Sessions whose replies are being rendered (status, tests)."""
        return self.renderer.following() if self.renderer is not None else []

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "discord")

    def _require_port(self) -> DiscordPort:
        if self._port is None:
            raise AdapterError("discord: the adapter is not started")
        return self._port

    def _token(self) -> str:
        return required_secret(
            self.token_env, what="bot token", key="discord.token_env", docs="docs/channels/discord.md"
        )
