"""The Teams adapter: activities in on the messaging endpoint, chats and reply chains ↔
sessions.

Nothing here imports the SDK: calls go through a :class:`TeamsPort` and activities arrive
normalised as :class:`TeamsMessage` (see ``_client.py``). How replies appear (streaming
edits, splitting, approval cards, files, the outbox) is the shared
:class:`~adapters.chat.ChatRenderer`'s.

- ``POST /teams/messages`` is the bot's messaging endpoint (on the webhook listener). A
  request is read only once its token proves it comes from the Bot Framework for this bot
  (the SDK's validator); otherwise it is answered 401 and nothing is started or stored.
- A personal chat is the session ``teams:<key>`` (when ``allow_dms``), a group chat too;
  a reply chain in a channel is ``teams:<key>:<root message id>``. ``<key>`` names the chat
  or channel (:func:`~adapters.teams._port.conversation_key`), whose reference — service
  URL, id, tenant — is stored before anything from it is admitted, so replies, reminders and
  a sub-agent's report reach it after a restart too. Memories stay in the chat or channel;
  a person is ``teams:<Entra object id>`` to roles.
- In a channel or group chat the bot answers an @mention, a netclaw command, and — in a
  reply chain that is already a session — everything said there (a bot sees a channel's
  messages without a mention when its app grants it ``ChannelMessage.Read.Group``). What
  people say to each other in a group chat that is a session is read by the next turn
  there (with ``ChatMessage.Read.Chat``).
- An activity is answered 200 only once the gateway took it; Teams' redelivery of the same
  activity is admitted once (the identity ``teams:<key>:<activity id>``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import re
from functools import partial
from typing import TYPE_CHECKING

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
    session_known,
)
from adapters.teams._config import TeamsConfig
from adapters.teams._port import TeamsApiError, TeamsMessage
from adapters.teams._store import TeamsStore
from netclaw.commands import parse_command, parse_prompt
from netclaw.config import Settings
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.security.policy import ChatEvent, Place, dm_audience

if TYPE_CHECKING:
    from adapters.teams._client import ConnectorPort, InboundTokens

log = logging.getLogger("adapters.teams")

EDIT_INTERVAL_S = 1.5  # Teams throttles a conversation's updates; one edit per 1.5 s stays clear
MESSAGES_PATH = "/teams/messages"
_SESSION = re.compile(r"teams:([0-9a-f]{16})(?::([0-9A-Za-z._-]+))?")


def session_id_of(to: Conversation) -> str:
    """``teams:<key>`` for a chat, ``teams:<key>:<root>`` for a channel's reply chain."""
    return f"teams:{to.channel}:{to.thread}" if to.thread else f"teams:{to.channel}"


def session_id_for(message: TeamsMessage) -> str:
    return session_id_of(message.conversation)


def _is_command(text: str) -> bool:
    try:
        return parse_command(text) is not None or parse_prompt(text) is not None
    except ValueError:  # a /prompt with an unclosed quote: still meant for us
        return True


def _refused(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


class TeamsAdapter:
    """See the module docstring."""

    name = "teams"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        start_up = TeamsConfig.of(settings)
        self.app_id = start_up.app_id
        self.tenant_id = start_up.tenant_id
        self.password_env = start_up.app_password_env
        self.token_url = start_up.token_endpoint()
        self.options = RenderOptions.of(
            settings, edit_interval_s=edit_interval_s, reaction="", release_after_s=release_after_s
        )  # a bot cannot react in Teams; "typing" shows instead
        self.store = TeamsStore(settings.data_dir / "teams" / "teams.db")
        self._port: ConnectorPort | None = None
        self._tokens: InboundTokens | None = None
        self.renderer: ChatRenderer | None = None
        self._asides: Asides[TeamsMessage] = Asides()
        self._owed: asyncio.Future[None] | None = None
        self._running = False
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> TeamsConfig:
        """The current ``teams`` section (follows a reload); the registration needs a restart."""
        return TeamsConfig.of(self.gateway.settings)

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        try:
            if not self.app_id:
                raise AdapterError("teams: teams.app_id is not set (see docs/channels/teams.md)")
            self._password()
            if importlib.util.find_spec("microsoft_agents") is None:
                raise AdapterError(
                    "teams: the Microsoft 365 Agents SDK is not installed; install it with "
                    "pip install 'netclaw[teams]'"
                )
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return [web.post(MESSAGES_PATH, self.messages)]

    async def probe(self) -> str:
        self.check()
        from adapters.teams._client import BotToken, probe

        return await probe(
            self.app_id, BotToken(self.app_id, self._password(), self.token_url, self.password_env)
        )

    async def start(self) -> None:
        self.check()
        from adapters.teams._client import BotToken, ConnectorPort, InboundTokens

        self._status = AdapterStatus("starting", f"getting a token from {self.token_url}")
        token = BotToken(self.app_id, self._password(), self.token_url, self.password_env)
        try:
            await token.get()  # the credentials work before anything is promised
        except TeamsApiError as exc:
            await token.close()
            self._status = AdapterStatus("failed", str(exc))
            raise
        await self.store.open()
        self._tokens = InboundTokens(self.app_id, self.tenant_id)
        self._port = port = ConnectorPort(token, self.store)
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        self.gateway.offer_threads("teams", self._open_thread)
        self._owed = asyncio.ensure_future(self.renderer.resume(self.conversation_of))
        detail = f"app {self.app_id}, messaging endpoint {MESSAGES_PATH}"
        self._status = AdapterStatus("running", detail)
        log.info("teams: running as %s", detail)

    def conversation_of(self, session_id: str) -> Conversation | None:
        """Where a session's replies go, if this node knows the chat or channel."""
        found = _SESSION.fullmatch(session_id)
        if found is None or self.store.reference(found.group(1)) is None:
            return None
        return Conversation(found.group(1), found.group(2))

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``): a Teams channel
        id (a new post there) or a chat id."""
        assert self.renderer is not None
        return await self.renderer.open_thread(channel, text, session_id_of, key=key, since=since)

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("teams", None)
        if self.renderer is not None:
            await self.renderer.stop()
        port, self._port = self._port, None
        if port is not None:
            from adapters.teams._client import close_port

            await close_port(port)
        await self.store.close()
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- activities in --------------------------------------------------------------------------

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """``POST /teams/messages``: an activity from the Bot Framework, proven by its token.
        200 once it is admitted; 401 (nothing read, nothing started) without a valid token."""
        tokens, port = self._tokens, self._port
        if not self._running or tokens is None or port is None:
            return _refused(503, "unavailable", "the Teams channel is not running")
        from adapters.teams._client import Unauthorized, normalise, parse_activity, reference_of

        try:
            claims = await tokens.claims(request.headers.get("Authorization"))
        except Unauthorized as exc:
            log.warning("teams: refused an activity from %s: %s", request.remote, exc)
            return _refused(401, "unauthorized", str(exc))
        try:
            activity = parse_activity(await request.json(), claims)
        except PermissionError as exc:
            log.warning("teams: refused an activity: %s", exc)
            return _refused(401, "unauthorized", str(exc))
        except ValueError as exc:
            return _refused(400, "invalid_activity", str(exc))
        reference = reference_of(activity)
        await self.store.remember_reference(reference)  # replies and reminders find it from now on
        message = normalise(activity, reference)
        if message is not None:
            try:
                if message.action is not None:
                    self.clicked(message)
                else:
                    await self.handle(message)
            except Exception:  # logged; Teams must not resend what we cannot handle
                log.exception("teams: activity %s could not be handled", activity.id)
        return web.json_response({})

    def clicked(self, message: TeamsMessage) -> None:
        """A press on an approval card's button (an Action.Submit)."""
        renderer, port = self.renderer, self._port
        if not self._running or renderer is None or port is None or message.action is None:
            return
        action, value = message.action
        conversation = message.conversation
        renderer.clicked(
            ButtonClick(
                action_id=action,
                value=value,
                user_id=message.user_id,
                message=MessageRef(conversation.channel, message.reply_to) if message.reply_to else None,
                user_name=message.user_name or message.user_id,
                respond=partial(port.tell, conversation, message.account_id),
            )
        )

    async def handle(self, message: TeamsMessage) -> str | None:
        """One incoming message. Returns the session id it was admitted to, or None."""
        renderer, port = self.renderer, self._port
        if not self._running or renderer is None or port is None or message.from_bot:
            return None
        reference = message.reference
        session_id = session_id_for(message)
        is_dm = reference.kind == "personal"
        addressed = message.mentioned or (not is_dm and _is_command(message.text))
        # A reply chain that is a session goes on without a mention.
        thread_known = reference.kind == "channel" and not addressed and await self._knows(session_id)
        event = ChatEvent(
            platform="teams",
            channel_id=reference.conversation_id,
            user_id=message.user_id,
            is_dm=is_dm,
            mentioned=addressed,
            thread_known=thread_known,
            from_bot=message.from_bot,
        )
        permit = self.gateway.permit(event)
        if permit is None:
            if (
                reference.kind == "groupChat"
                and not message.from_bot
                and reference.conversation_id in self.config.channels
                and message.text.strip()
                and await self._knows(session_id)
            ):
                self._asides.add(session_id, message)  # said in a followed group chat, not to us
            return None
        if not message.text.strip() and not message.files:
            return None
        files, refused = await fetch_files(
            [SharedFile(f.name, f.mime_type, None, partial(port.download, f)) for f in message.files], "teams"
        )
        target = message.conversation
        if refused:
            await renderer.note(target, refused)
        if not message.text.strip() and not files:
            return None
        # What was said meanwhile goes with the next message to the model (a command keeps it).
        earlier = [] if parse_command(message.text) is not None else self._asides.take(session_id)
        inbound = Inbound(
            session_id,
            message.text,
            user=message.user_id,
            identity=f"teams:{reference.key}:{message.activity_id}",
            user_name=message.user_name or None,
            prior=[PriorMessage(m.user_id, m.user_name, m.text) for m in earlier],
            files=files,
            # Memories stay in the chat or channel; a personal chat is one person's, "team"
            # only when a user allowlist vetted who may write.
            place=Place(f"teams:{reference.key}", dm_audience(self.config) if is_dm else None),
        )
        # None: refused (noted), a redelivery already handled, or not followed (shutting down).
        return (
            session_id
            if await renderer.taken(permit, inbound, target, MessageRef(reference.key, message.activity_id))
            else None
        )

    def following(self) -> list[str]:
        return self.renderer.following() if self.renderer is not None else []

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "teams")

    def _password(self) -> str:
        return required_secret(
            self.password_env,
            what="app password",
            key="teams.app_password_env",
            docs="docs/channels/teams.md",
        )
