"""The Discord adapter: message handling, thread ↔ session mapping and rendering.

Nothing here imports discord.py: platform calls go through a :class:`DiscordPort` and
platform messages arrive already normalised as :class:`DiscordMessage` (see ``_client.py``),
so the whole flow is testable with a fake port and the real gateway.

- A message in an allowed channel that mentions the bot starts a public thread from that
  message; the thread is the session ``discord:<thread_id>``. A message in a thread that is
  already a session continues it without a mention. A DM (when ``allow_dms``) is the session
  ``discord:<dm_channel_id>``. Who may talk is the gateway's policy (``denial_reason``).
- Each active session has one renderer: a subscription with TEXT | TEXT_STREAMING that posts
  the first streamed text at once, then edits it at most every ``edit_interval_s``, and at
  the final ``text`` shows the reply split into ≤2,000-character messages. Lifecycle outputs
  that matter to people (errors, compaction, trimmed history) become short notes. A renderer
  lets go of its subscription after ``release_after_s`` of quiet, so the session can
  passivate; the next message subscribes again. If the session closes the stream while a
  turn is pending (it restarted, or we fell behind), the renderer subscribes again at once,
  and a gateway reconnect checks every renderer, so no session goes silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from aiohttp import web

from adapters.base import AdapterStatus
from adapters.discord_bot._port import (
    MESSAGE_LIMIT,
    THREAD_NAME_LIMIT,
    DiscordApiError,
    DiscordMessage,
    DiscordPort,
    new_nonce,
    with_retry,
)
from adapters.render import lifecycle_note, split_message
from netclaw.config import DiscordConfig, Settings
from netclaw.errors import AdapterError, NetclawError
from netclaw.gateway import Gateway, Inbound
from netclaw.policy import ChatEvent, denial_reason
from netclaw.sessions._outputs import Output, OutputFilter
from netclaw.sessions._subscribers import OutputQueue

if TYPE_CHECKING:
    from adapters.discord_bot._client import NetclawClient

log = logging.getLogger("adapters.discord_bot")

RENDER_FILTER = OutputFilter.TEXT | OutputFilter.TEXT_STREAMING
EDIT_INTERVAL_S = 1.5  # Discord allows ~5 edits per 5 s per channel; stay well under it
CONNECT_TIMEOUT_S = 10.0  # how long start() waits for READY before returning "starting"
SEEN_EMOJI = "\N{EYES}"  # on a message while its turn runs
MAX_REVIVES = 3  # re-subscriptions in a row that bring no progress before we give up
PROGRESS_EVENTS = frozenset({"text_delta", "text", "turn_completed", "error"})
REVIVE_DELAY_S = 0.2


def session_id_for(thread_id: str) -> str:
    return f"discord:{thread_id}"


def thread_name(text: str) -> str:
    """A thread name from the first words of the message (Discord allows 1-100 characters)."""
    line = " ".join(text.split())
    if not line:
        return "netclaw"
    if len(line) <= THREAD_NAME_LIMIT:
        return line
    return line[: THREAD_NAME_LIMIT - 1].rstrip() + "\N{HORIZONTAL ELLIPSIS}"


@dataclass(slots=True)
class _Ack:
    """A user message whose turn is pending: it wears SEEN_EMOJI until the turn ends."""

    channel_id: str
    message_id: str
    reacted: bool = False
    done: bool = False


@dataclass(slots=True)
class _Posted:
    message_id: str
    text: str


@dataclass(slots=True)
class _Stream:
    """What the renderer shows for the turn being streamed."""

    turn: Any = None
    buffer: str = ""
    posted: list[_Posted] = field(default_factory=list)
    nonces: dict[int, tuple[str, str]] = field(default_factory=dict)  # piece -> (nonce, first text)
    dirty: bool = False  # buffer changed since it was last shown
    last_sync: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.buffer or self.posted)


class DiscordAdapter:
    """See the module docstring. ``port`` replaces the discord.py client (tests)."""

    name = "discord"

    def __init__(
        self,
        settings: Settings,
        gateway: Gateway,
        port: DiscordPort | None = None,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.token_env = settings.discord.token_env
        self.edit_interval_s = edit_interval_s
        idle = settings.session.idle_timeout_s
        # Let go well before the session's own idle timer would want to passivate it.
        self.release_after_s = release_after_s if release_after_s is not None else min(300.0, idle / 2)
        self.stale_after_s = settings.session.turn_timeout_s + 60.0  # a pending turn we never saw end
        self.connect_timeout_s = connect_timeout_s
        self._port: DiscordPort | None = port
        self._injected = port is not None
        self._client: NetclawClient | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._renderers: dict[str, _Renderer] = {}
        self._running = False
        self._starting = False  # start() reports connection failures itself
        self._gateway_up: asyncio.Event | None = None
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> DiscordConfig:
        """The current ``discord`` section: allowlists follow a config reload (SIGHUP); the
        token and ``enabled`` need a restart."""
        return self.gateway.settings.discord

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        try:
            self._token()
            if importlib.util.find_spec("discord") is None:
                raise AdapterError(
                    "discord: the discord.py library is not installed; install it with "
                    "pip install 'netclaw[discord]'"
                )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return []

    async def start(self) -> None:
        if self._injected:
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
        self._port = ClientPort(client)
        self._running = True
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

    async def stop(self) -> None:
        self._running = False
        renderers = list(self._renderers.values())
        self._renderers.clear()
        for renderer in renderers:
            renderer.release()
        if renderers:
            await asyncio.gather(*(r.task for r in renderers), return_exceptions=True)
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 10)
            except Exception as exc:
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
        for renderer in list(self._renderers.values()):
            renderer.ensure_listening()

    def disconnected(self) -> None:
        """The gateway connection dropped; discord.py reconnects by itself."""
        if self._running and self._status.state == "running":
            self._status = AdapterStatus("starting", "reconnecting to Discord")

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
        if not self._running or message.from_self:
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
        reason = denial_reason(self.config, event)
        if reason is not None:
            log.debug("discord: message %s ignored: %s", message.message_id, reason)
            return None
        if not message.text.strip():
            log.debug("discord: message %s has no text; ignored", message.message_id)
            return None
        port = self._require_port()
        if target is None:
            try:
                target = await with_retry(
                    "create a thread",
                    partial(
                        port.create_thread, message.channel_id, message.message_id, thread_name(message.text)
                    ),
                )
            except DiscordApiError as exc:
                log.warning("discord: could not start a thread in %s: %s", message.channel_id, exc)
                await self.notify(message.channel_id, f"Sorry, I could not start a thread here: {exc}")
                return None
        session_id = session_id_for(target)
        try:
            renderer = self._renderer_for(session_id, target)
        except NetclawError as exc:
            log.warning("discord: cannot follow %s: %s", session_id, exc)
            return None
        ack = renderer.expect(message.channel_id, message.message_id)
        inbound = Inbound(
            session_id, message.text, user=message.author_id, identity=f"discord:{message.message_id}"
        )
        try:
            admission = await self.gateway.submit_chat(event, self.config, inbound)
        except NetclawError as exc:
            renderer.forget(ack)
            log.warning("discord: message %s not admitted to %s: %s", message.message_id, session_id, exc)
            await self.notify(target, lifecycle_note("error", {"message": str(exc)}) or str(exc))
            return None
        if admission is None or admission.duplicate:  # denied, or a redelivery already handled
            renderer.forget(ack)
            return None
        await renderer.acknowledged(ack)
        return session_id

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

    async def notify(self, channel_id: str, text: str) -> None:
        """Post a note for people; failures are logged, never raised."""
        port = self._require_port()
        for piece in split_message(text, MESSAGE_LIMIT):
            try:
                await with_retry("send a note", partial(port.send, channel_id, piece, nonce=new_nonce()))
            except DiscordApiError as exc:
                log.warning("discord: could not post a note in %s: %s", channel_id, exc)
                return

    # -- renderers ------------------------------------------------------------------------------

    def _renderer_for(self, session_id: str, channel_id: str) -> _Renderer:
        renderer = self._renderers.get(session_id)
        if renderer is None or renderer.released:
            renderer = _Renderer(self, session_id, channel_id)
            self._renderers[session_id] = renderer
        else:
            renderer.ensure_listening()
        return renderer

    def _renderer_gone(self, renderer: _Renderer) -> None:
        if self._renderers.get(renderer.session_id) is renderer:
            del self._renderers[renderer.session_id]

    async def _knows(self, session_id: str) -> bool:
        try:
            return await self.gateway.knows(session_id)
        except NetclawError as exc:
            log.warning("discord: cannot tell whether %s is a session: %s", session_id, exc)
            return False

    def _require_port(self) -> DiscordPort:
        if self._port is None:
            raise AdapterError("discord: the adapter is not started")
        return self._port

    def _token(self) -> str:
        env = self.token_env
        token = os.environ.get(env, "").strip()
        if not token:
            raise AdapterError(
                f"discord: the bot token variable {env} is not set (discord.token_env); "
                f"export {env}=<your bot token> (see docs/channels/discord.md)"
            )
        return token


class _Renderer:
    """One session's subscription, and how its outputs appear in one Discord channel."""

    def __init__(self, adapter: DiscordAdapter, session_id: str, channel_id: str) -> None:
        self.adapter = adapter
        self.session_id = session_id
        self.channel_id = channel_id
        self.acks: deque[_Ack] = deque()
        self.stream = _Stream()
        self.released = False
        self.revives = 0
        self.last_activity = time.monotonic()
        self.queue, self.sub_id = self._subscribe()
        self.task = asyncio.create_task(self._run(), name=f"discord-render-{session_id}")

    def _subscribe(self) -> tuple[OutputQueue, str]:
        queue = OutputQueue(asyncio.get_running_loop())
        sub_id = self.adapter.gateway.subscribe(self.session_id, RENDER_FILTER, queue)
        return queue, sub_id

    # -- life cycle -----------------------------------------------------------------------------

    def ensure_listening(self) -> None:
        """Subscribe again if the stream ended under us (a reconnect check, a new message)."""
        if self.released or not self.task.done():
            return
        self.revives = 0
        try:
            self.queue, self.sub_id = self._subscribe()
        except NetclawError as exc:
            log.warning("discord: cannot re-subscribe to %s: %s", self.session_id, exc)
            return
        self.adapter._renderers[self.session_id] = self
        self.task = asyncio.create_task(self._run(), name=f"discord-render-{self.session_id}")

    def release(self) -> None:
        """Let go of the subscription now (idle, or the adapter stops). Synchronous, so no
        new message can pick this renderer up half-released."""
        if self.released:
            return
        self.released = True
        self.adapter._renderer_gone(self)
        with contextlib.suppress(NetclawError):
            self.adapter.gateway.unsubscribe(self.session_id, self.sub_id)
        self.queue.close()
        if not self.task.done() and self.task is not asyncio.current_task():
            self.task.cancel()

    def expect(self, channel_id: str, message_id: str) -> _Ack:
        self.last_activity = time.monotonic()
        ack = _Ack(channel_id, message_id)
        self.acks.append(ack)
        return ack

    def forget(self, ack: _Ack) -> None:
        with contextlib.suppress(ValueError):
            self.acks.remove(ack)

    async def acknowledged(self, ack: _Ack) -> None:
        """The message is durable and its turn queued: show that we are on it (best effort)."""
        port = self.adapter._require_port()
        if not self.stream.active:
            await _quietly("show typing", port.typing(self.channel_id))
        if ack.done:
            return
        ack.reacted = await _quietly(
            "add a reaction", port.add_reaction(ack.channel_id, ack.message_id, SEEN_EMOJI)
        )
        if ack.done and ack.reacted:  # the turn ended while we were reacting
            await self._unreact(ack)

    def _pending(self) -> bool:
        return bool(self.acks) or self.stream.active

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                try:
                    output = await asyncio.wait_for(self.queue.get(), self._wait_time())
                except TimeoutError:
                    if self.stream.dirty:
                        await self._sync()
                    elif self._may_release():
                        log.debug("discord: %s idle; releasing its subscription", self.session_id)
                        self.release()
                        return
                    continue
                if output is None:
                    if await self._revive():
                        continue
                    break
                self.last_activity = time.monotonic()
                if output.event in PROGRESS_EVENTS:
                    self.revives = 0
                try:
                    await self._render(output)
                except Exception:
                    log.exception("discord: rendering %s for %s failed", output.event, self.session_id)
        except Exception:
            log.exception("discord: the renderer for %s failed", self.session_id)
        # The stream is over. With a turn pending, stay known: the next message or a gateway
        # reconnect subscribes again (ensure_listening); otherwise we are done.
        if not self._pending() and not self.released:
            self.released = True
            self.adapter._renderer_gone(self)

    def _wait_time(self) -> float:
        now = time.monotonic()
        if self.stream.dirty:
            return max(0.0, self.stream.last_sync + self.adapter.edit_interval_s - now)
        hold = self.adapter.stale_after_s if self._pending() else self.adapter.release_after_s
        return max(0.05, self.last_activity + hold - now)

    def _may_release(self) -> bool:
        idle = time.monotonic() - self.last_activity
        if idle < self.adapter.release_after_s:
            return False
        return not self._pending() or idle >= self.adapter.stale_after_s

    async def _revive(self) -> bool:
        """The session ended our stream. With a turn pending, subscribe again (the session
        restarts from its journal and finishes the turn); otherwise let go."""
        if self.released or not self.adapter._running or not self._pending():
            return False
        if self.revives >= MAX_REVIVES:
            log.warning(
                "discord: %s keeps closing its stream; giving up until the next message", self.session_id
            )
            return False
        self.revives += 1
        log.info("discord: %s closed our stream with a turn pending; subscribing again", self.session_id)
        await asyncio.sleep(REVIVE_DELAY_S)
        if self.released or not self.adapter._running:
            return False
        try:
            self.queue, self.sub_id = self._subscribe()
        except NetclawError as exc:
            log.warning("discord: cannot re-subscribe to %s: %s", self.session_id, exc)
            return False
        return True

    # -- rendering ------------------------------------------------------------------------------

    async def _render(self, output: Output) -> None:
        data = output.data
        match output.event:
            case "text_delta":
                stream = self.stream
                if stream.turn != data.get("turn"):
                    self.stream = stream = _Stream(turn=data.get("turn"))
                stream.buffer += str(data.get("delta", ""))
                stream.dirty = True
                # The first delta shows at once; later ones (and a retry after a failed first
                # send) wait for the interval, while the queue coalesces what arrives meanwhile.
                if time.monotonic() - stream.last_sync >= self.adapter.edit_interval_s:
                    await self._sync()
            case "text":
                await self._finish(str(data.get("text") or ""))
            case "turn_completed":
                if self.stream.dirty:  # the reply never came as `text`: show what streamed
                    await self._sync(final=True)
                self.stream = _Stream()
                await self._turn_ended()
            case "error":
                if self.stream.dirty:
                    await self._sync()
                self.stream = _Stream()
                await self._note(output)
            case "compaction" | "history_trimmed":
                await self._note(output)
            case _:
                pass

    async def _note(self, output: Output) -> None:
        note = lifecycle_note(output.event, output.data)
        if note:
            await self.adapter.notify(self.channel_id, note)

    async def _sync(self, *, final: bool = False) -> None:
        """Show the streamed text so far (one attempt; the next interval tries again)."""
        stream = self.stream
        pieces = split_message(stream.buffer, MESSAGE_LIMIT) if stream.buffer.strip() else []
        stream.dirty = False
        stream.last_sync = time.monotonic()
        try:
            await self._show(pieces, final=final)
        except DiscordApiError as exc:
            if final:
                log.error("discord: could not show the reply in %s: %s", self.channel_id, exc)
            else:
                log.info("discord: streaming update in %s skipped: %s", self.channel_id, exc)
                stream.dirty = True

    async def _finish(self, text: str) -> None:
        """The assembled reply: it replaces whatever was streamed (retrying rate limits)."""
        pieces = split_message(text, MESSAGE_LIMIT) if text.strip() else []
        if pieces:
            try:
                await self._show(pieces, final=True)
            except DiscordApiError as exc:
                log.error("discord: could not post the reply in %s: %s", self.channel_id, exc)
        self.stream = _Stream()

    async def _show(self, pieces: list[str], *, final: bool) -> None:
        """Make the posted messages read ``pieces``: edit what changed, send what is new and,
        for the final text, delete what is left over. Final calls retry transient errors."""
        port = self.adapter._require_port()
        stream = self.stream
        posted = stream.posted
        channel = self.channel_id
        attempts = 4 if final else 1
        for index, piece in enumerate(pieces):
            if index >= len(posted):
                # One nonce per piece for the whole turn: Discord answers a repeated nonce with
                # the message it already made (its text is the first one sent with that nonce).
                nonce, first = stream.nonces.setdefault(index, (new_nonce(), piece))
                message_id = await with_retry(
                    "send a reply", partial(port.send, channel, piece, nonce=nonce), attempts=attempts
                )
                posted.append(_Posted(message_id, first))
            shown = posted[index]
            if shown.text == piece:
                continue
            try:
                await with_retry(
                    "edit a reply", partial(port.edit, channel, shown.message_id, piece), attempts=attempts
                )
            except DiscordApiError as exc:
                if exc.status != 404:
                    raise
                # Someone deleted our message: post the piece anew rather than lose it.
                stream.nonces[index] = (nonce := new_nonce(), piece)
                shown.message_id = await with_retry(
                    "send a reply", partial(port.send, channel, piece, nonce=nonce), attempts=attempts
                )
            shown.text = piece
        if final:
            while len(posted) > len(pieces):
                extra = posted.pop()
                await _quietly("delete a stale piece", port.delete(channel, extra.message_id))

    async def _turn_ended(self) -> None:
        if not self.acks:
            return
        ack = self.acks.popleft()
        ack.done = True
        if ack.reacted:
            await self._unreact(ack)

    async def _unreact(self, ack: _Ack) -> None:
        port = self.adapter._require_port()
        if await _quietly(
            "remove a reaction", port.remove_reaction(ack.channel_id, ack.message_id, SEEN_EMOJI)
        ):
            ack.reacted = False


async def _quietly(what: str, call: Awaitable[object]) -> bool:
    """Await a best-effort port call: True if it worked; a failure is logged, not raised."""
    try:
        await call
    except DiscordApiError as exc:
        log.info("discord: could not %s: %s", what, exc)
        return False
    return True
