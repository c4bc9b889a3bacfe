"""Everything that touches discord.py: the client, the real port, message normalisation and
the translation of discord.py's exceptions into netclaw's (imported only when the adapter
starts, so a daemon without discord.py installed still runs; ``check()`` reports it).

Rate limits: discord.py's HTTP client already honours Discord's rate-limit headers (it waits
pre-emptively when a bucket is exhausted) and, on an HTTP 429, sleeps ``retry_after`` and
retries the request itself (up to 5 tries). We cap that sleep with ``max_ratelimit_timeout``:
a longer limit raises :class:`discord.RateLimited` instead of blocking a renderer, and it
reaches the renderer as a transient :class:`DiscordApiError` carrying ``retry_after``, which
its retries (:mod:`netclaw.retry`) honour. 5xx answers are retried by discord.py as well and
arrive here only when they persist.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import aiohttp
import discord

from adapters.chat import Button, ButtonClick, Conversation, MessageRef
from adapters.discord_bot._port import (
    MESSAGE_LIMIT,
    THREAD_NAME_LIMIT,
    DiscordApiError,
    DiscordAttachment,
    DiscordMessage,
    rate_limited,
)

log = logging.getLogger("adapters.discord_bot")

MAX_RATELIMIT_WAIT_S = 30.0  # discord.py's minimum for max_ratelimit_timeout
USER_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
NO_PINGS = discord.AllowedMentions.none()  # model output never pings anyone (@everyone included)
CUSTOM_ID_PREFIX = "netclaw:"  # our buttons' custom_ids: netclaw:<action>:<value>
THREAD_EXISTS = 160004  # Discord's error code: "A thread has already been created for this message"


def intents() -> discord.Intents:
    """Server list and channels (guilds), messages in servers and DMs, and their text
    (message_content: privileged, enable it in the Developer Portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


class Handler(Protocol):
    """What the client needs of the adapter."""

    async def handle(self, message: DiscordMessage) -> str | None: ...

    def connected(self, *, resumed: bool) -> None: ...

    def disconnected(self) -> None: ...

    def clicked(self, click: ButtonClick) -> None: ...


class NetclawClient(discord.Client):
    """A discord.py client that hands every message to the adapter, normalised."""

    def __init__(self, handler: Handler) -> None:
        # netclaw never joins voice: skip discord.py's start-up warnings about voice libraries.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        super().__init__(
            intents=intents(),
            allowed_mentions=NO_PINGS,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
        )
        self.handler = handler

    async def on_message(self, message: discord.Message) -> None:
        me = self.user
        if me is None or message.author.id == me.id:
            return
        channel: Any = message.channel
        if isinstance(channel, discord.PartialMessageable) and channel.guild_id is not None:
            # A server channel that is not in the cache (an archived thread coming back, a
            # server still streaming in): ask Discord what it is, thread or channel.
            try:
                channel = await self.fetch_channel(channel.id)
            except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
                log.warning("discord: cannot look up channel %s: %s", message.channel.id, exc)
                return
        event = normalise(message, me.id, channel=channel)
        if event is not None:
            await self.handler.handle(event)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A press on one of our buttons (also after a restart: the custom_id says it all).
        Acknowledged at once, or Discord shows "This interaction failed"."""
        click = click_of(interaction)
        if click is None:
            return
        try:
            if not interaction.response.is_done():
                await interaction.response.defer()
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: could not acknowledge a button press: %s", translate_error(exc, "answer"))
        self.handler.clicked(click)

    async def on_ready(self) -> None:
        log.info(
            "discord: connected as %s (id %s) in %d server(s)",
            self.user,
            self.user and self.user.id,
            len(self.guilds),
        )

    async def on_connect(self) -> None:  # READY: a new gateway session (first or after a reconnect)
        self.handler.connected(resumed=False)

    async def on_resumed(self) -> None:  # RESUMED: the old session goes on, missed events replayed
        self.handler.connected(resumed=True)

    async def on_disconnect(self) -> None:
        self.handler.disconnected()

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        log.exception("discord: unhandled error in %s", event_method)


def normalise(message: discord.Message, bot_id: int, *, channel: Any = None) -> DiscordMessage | None:
    """A discord.py message as the adapter sees it; None for system messages (pins, joins,
    "started a thread", …). ``channel`` overrides ``message.channel`` when it was resolved."""
    if message.type not in USER_MESSAGE_TYPES:
        return None
    where = channel if channel is not None else message.channel
    if isinstance(where, discord.PartialMessageable):
        is_dm = where.guild_id is None
    else:
        is_dm = isinstance(where, discord.abc.PrivateChannel)
    author = message.author
    guild = message.guild
    role = guild.self_role if guild is not None else None
    mentioned = any(user.id == bot_id for user in message.mentions) or (
        role is not None and any(r.id == role.id for r in message.role_mentions)
    )
    parent_id = where.parent_id if isinstance(where, discord.Thread) else None
    return DiscordMessage(
        message_id=str(message.id),
        channel_id=str(where.id),
        author_id=str(author.id),
        text=message_text(message, bot_id, role.id if role is not None else None),
        parent_id=str(parent_id) if parent_id is not None else None,
        is_dm=is_dm,
        mentioned=mentioned,
        from_bot=author.bot or message.webhook_id is not None,
        from_self=author.id == bot_id,
        author_name=str(getattr(author, "display_name", "") or author.name),
        attachments=tuple(
            DiscordAttachment(a.filename, a.url, a.content_type or "application/octet-stream", a.size)
            for a in message.attachments
        ),
    )


def click_of(interaction: discord.Interaction) -> ButtonClick | None:
    """A component interaction on one of our buttons as the renderer sees a click; None
    for anything else (slash commands, other bots' components)."""
    data: Any = interaction.data or {}
    custom_id = str(data.get("custom_id") or "")
    if interaction.type is not discord.InteractionType.component or not custom_id.startswith(
        CUSTOM_ID_PREFIX
    ):
        return None
    action, _, value = custom_id.removeprefix(CUSTOM_ID_PREFIX).partition(":")
    message, channel_id = interaction.message, interaction.channel_id
    user = interaction.user

    async def respond(text: str) -> None:
        # The press was deferred at once; an ephemeral follow-up reaches only its author.
        try:
            await interaction.followup.send(text[:2000], ephemeral=True)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            raise translate_error(exc, "answer a button press") from exc

    return ButtonClick(
        action_id=action,
        value=value,
        user_id=str(user.id) if user else "",
        message=MessageRef(str(channel_id), str(message.id)) if message and channel_id else None,
        user_name=str(user.name) if user else "",
        respond=respond,
    )


def message_text(message: discord.Message, bot_id: int, bot_role_id: int | None = None) -> str:
    """The content with the bot's own mention removed and other people's mentions as
    @names (attachments travel as files, not text)."""
    text = re.sub(rf"<@!?{bot_id}>", "", message.content)
    if bot_role_id is not None:
        text = text.replace(f"<@&{bot_role_id}>", "")
    for user in message.mentions:
        if user.id != bot_id:
            text = re.sub(rf"<@!?{user.id}>", f"@{user.display_name}", text)
    return text.strip()


# -- errors -------------------------------------------------------------------------------------


def translate_error(exc: BaseException, what: str, *, token_env: str | None = None) -> DiscordApiError:
    """discord.py's (and aiohttp's) exceptions as netclaw's: a message a person can act on,
    and whether a retry may help."""
    if isinstance(exc, DiscordApiError):
        return exc
    if isinstance(exc, discord.RateLimited):
        return rate_limited(exc.retry_after, what)
    if isinstance(exc, discord.LoginFailure):
        where = f" in {token_env}" if token_env else ""
        return DiscordApiError(
            f"Discord rejected the bot token{where} ({str(exc).rstrip('.')}); copy it again from the "
            "Developer Portal (your application → Bot → Reset Token)",
            status=401,
        )
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return DiscordApiError(
            "Discord refused the connection because the Message Content intent is not enabled "
            "for this bot: Developer Portal → your application → Bot → Privileged Gateway Intents "
            "→ turn on Message Content Intent, then restart netclaw"
        )
    if isinstance(exc, discord.Forbidden):
        return DiscordApiError(
            f"Discord refused to {what} (403: {exc.text or 'missing permission'}); give the bot "
            "View Channel, Send Messages, Send Messages in Threads, Create Public Threads, "
            "Read Message History and Add Reactions in that channel",
            status=403,
        )
    if isinstance(exc, discord.NotFound):
        return DiscordApiError(
            f"could not {what}: Discord says it does not exist (404: {exc.text})", status=404
        )
    if isinstance(exc, discord.HTTPException) and exc.code == THREAD_EXISTS:
        return DiscordApiError(f"could not {what}: the message already has a thread", status=409)
    if isinstance(exc, discord.HTTPException):
        status = exc.status
        return DiscordApiError(
            f"could not {what}: Discord answered {status} ({exc.text or 'no details'})",
            status=status,
            transient=status == 429 or status >= 500,
        )
    if isinstance(exc, discord.ConnectionClosed):
        return DiscordApiError(
            f"could not {what}: the Discord gateway closed the connection (code {exc.code}: "
            f"{exc.reason or 'no reason'})",
            transient=exc.code not in (4004, 4010, 4011, 4012, 4013, 4014),
        )
    if isinstance(exc, discord.GatewayNotFound | aiohttp.ClientError | OSError | TimeoutError):
        return DiscordApiError(
            f"could not {what}: cannot reach Discord ({type(exc).__name__}: {exc})", transient=True
        )
    return DiscordApiError(f"could not {what}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    try:
        yield
    except DiscordApiError:
        raise
    except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise translate_error(exc, what) from exc


# -- the real port ------------------------------------------------------------------------------


_BUTTON_STYLES = {
    "primary": discord.ButtonStyle.primary,
    "danger": discord.ButtonStyle.danger,
    "default": discord.ButtonStyle.secondary,
}


class ClientPort:
    """:class:`~adapters.discord_bot._port.DiscordPort` over a logged-in discord.py client. Uses
    partial objects (no fetch before each call): one REST request per call."""

    platform = "discord"
    message_limit = MESSAGE_LIMIT

    def __init__(self, client: discord.Client) -> None:
        self._client = client

    def escape(self, text: str) -> str:
        return text  # mentions never ping (NO_PINGS); markdown is the model's to use

    def _channel(self, channel_id: str) -> discord.PartialMessageable:
        return self._client.get_partial_messageable(int(channel_id))

    def _message(self, channel_id: str, message_id: str) -> discord.PartialMessage:
        return self._channel(channel_id).get_partial_message(int(message_id))

    async def create_thread(self, channel_id: str, message_id: str, name: str) -> str:
        with translated("create a thread"):
            channel: Any = self._client.get_channel(int(channel_id))
            if channel is None:
                channel = await self._client.fetch_channel(int(channel_id))
            if not isinstance(channel, discord.TextChannel):
                raise DiscordApiError(
                    f"channel {channel_id} is a {type(channel).__name__}; netclaw starts threads "
                    "only in text channels (list text channels in discord.channels)"
                )
            thread = await channel.get_partial_message(int(message_id)).create_thread(
                name=name[:THREAD_NAME_LIMIT]
            )
            return str(thread.id)

    async def history(self, channel_id: str, before: str, limit: int) -> list[DiscordMessage]:
        me = self._client.user
        if limit <= 0 or me is None:
            return []
        found = []
        with translated("read the channel's history"):
            channel = self._channel(channel_id)
            async for message in channel.history(limit=limit, before=discord.Object(int(before))):
                normalised = normalise(message, me.id, channel=channel)
                if normalised is not None:
                    found.append(normalised)
        found.reverse()  # Discord pages newest first
        return found

    async def download(self, url: str, max_bytes: int) -> bytes:
        with translated("download an attachment"):
            data = await self._client.http.get_from_cdn(url)
        if len(data) > max_bytes:
            raise DiscordApiError(f"the attachment is larger than {max_bytes:,} bytes")
        return data

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        # discord.py sends the nonce with enforce_nonce=true: Discord answers a repeated
        # nonce with the message it already made, so a retry never posts twice.
        with translated("send a message"):
            message = await self._channel(to.channel).send(
                text[:MESSAGE_LIMIT], allowed_mentions=NO_PINGS, nonce=key
            )
            return str(message.id)

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        # The nonce makes a repeat within Discord's window return the same message; a thread
        # made from a message has the message's id, so a repeat finds the same thread.
        message_id = await self.post(Conversation(channel), text, key=key)
        try:
            return Conversation(
                await self.create_thread(channel, message_id, text.splitlines()[0][:90] or "netclaw")
            )
        except DiscordApiError as exc:
            if exc.status not in (400, 409):  # 409: a thread already exists for it (160004)
                raise
            return Conversation(message_id)

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        # Discord keeps no key on a message we could look up later; posting again with the
        # same nonce (enforce_nonce) returns the message already made, for a few minutes.
        return None

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        with translated("edit a message"):
            await self._message(to.channel, message_id).edit(
                content=text[:MESSAGE_LIMIT], allowed_mentions=NO_PINGS, view=None
            )

    async def delete(self, to: Conversation, message_id: str) -> None:
        with translated("delete a message"), contextlib.suppress(discord.NotFound):
            await self._message(to.channel, message_id).delete()

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        target = self._message(message.channel, message.message_id)
        if add:
            with translated("add a reaction"):
                await target.add_reaction(reaction)
            return
        me = self._client.user
        if me is None:
            raise DiscordApiError("could not remove a reaction: not logged in")
        with translated("remove a reaction"), contextlib.suppress(discord.NotFound):
            await target.remove_reaction(reaction, me)

    async def typing(self, to: Conversation) -> None:
        with translated("show typing"):
            await self._channel(to.channel).typing()

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        with translated("upload a file"):
            message = await self._channel(to.channel).send(file=discord.File(io.BytesIO(data), filename=name))
            return str(message.id)

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        view = discord.ui.View(timeout=None)
        for button in buttons:
            view.add_item(
                discord.ui.Button(
                    label=button.label,
                    style=_BUTTON_STYLES[button.style],
                    custom_id=f"{CUSTOM_ID_PREFIX}{button.action_id}:{button.value}"[:100],
                )
            )
        with translated("send a message"):
            message = await self._channel(to.channel).send(
                text[:MESSAGE_LIMIT], allowed_mentions=NO_PINGS, nonce=key, view=view
            )
            return str(message.id)


async def probe_login(token: str, token_env: str) -> str:
    """Log in over REST only (no gateway connection) and say as whom: ``netclaw doctor``."""
    client = discord.Client(intents=intents())
    try:
        await client.login(token)
        me = client.user
        return f"logged in as {me} (id {me.id})" if me is not None else "logged in"
    except Exception as exc:
        raise translate_error(exc, "log in", token_env=token_env) from exc
    finally:
        await client.close()
