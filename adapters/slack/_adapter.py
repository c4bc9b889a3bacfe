"""The Slack adapter: event mapping and thread ↔ session. No slack-bolt or slack-sdk here
(``_client``, ``_web``, ``_port`` and ``_reading`` have them); replies are rendered by the
shared :class:`~adapters.chat.ChatRenderer`.

A mention of the bot in an allowed channel starts the session
``slack:<channel_id>:<thread_ts>`` (the mention's ``ts`` when it is not yet in a thread);
later messages in that thread continue it without a mention. Who may talk is the
gateway's chat policy (``permit``), read from the live settings.

Slack redelivers an envelope whose ack was slow; a small in-memory set of recent event
ids skips the obvious repeat, and the event id doubles as the message's replay identity
(``slack:<event_id>``), so a repeat that gets past the set (after a restart, say) is
recognised by the session and starts no second turn. After a Socket Mode reconnect every
session that owes a reply listens again. A press on one of our buttons goes to the
renderer (:meth:`~adapters.chat.ChatRenderer.clicked`).
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections import OrderedDict
from functools import partial
from typing import TYPE_CHECKING, Any

from aiohttp import web

from adapters.base import AdapterState, AdapterStatus
from adapters.chat import (
    Asides,
    ButtonClick,
    ChatApiError,
    ChatRenderer,
    Conversation,
    MessageRef,
    RenderOptions,
    SharedFile,
    fetch_files,
    session_known,
)
from adapters.slack._config import SlackConfig
from adapters.slack._format import slack_unescape
from netclaw.config import Settings
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.security.policy import ChatEvent, Place, dm_audience

if TYPE_CHECKING:
    from adapters.slack._client import SlackConnection
    from adapters.slack._port import SlackPort
    from adapters.slack._reading import SlackReader

log = logging.getLogger("adapters.slack")

EDIT_INTERVAL_S = 1.0  # at most one chat.update per message per second while streaming
RELEASE_AFTER_S = 30.0  # let a quiet session's subscription go after this long
PROCESSING_REACTION = "eyes"
RECENT_EVENTS = 4096
# Message subtypes that are still a person writing; every other subtype (edits,
# deletions, joins, bot messages, ...) is not a message to answer.
USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
EMPTY_MENTION_TEXT = "(The user mentioned you without writing anything else.)"


def _downloadable(f: dict[str, Any]) -> bool:
    """A shared file we can fetch (not a tombstone, nor one Slack Connect hides)."""
    return bool(f.get("url_private_download")) and f.get("mode") not in ("tombstone", "hidden_by_limit")


def conversation_of(session_id: str) -> Conversation | None:
    """``slack:<channel>:<thread_ts>`` → where its replies go."""
    parts = session_id.split(":")
    if len(parts) != 3 or parts[0] != "slack" or not parts[1] or not parts[2]:
        return None
    return Conversation(parts[1], parts[2])


class SlackAdapter:
    name = "slack"

    def __init__(
        self, settings: Settings, gateway: ChatInput, *, release_after_s: float = RELEASE_AFTER_S
    ) -> None:
        self.settings = settings  # start-up values: tokens and the API URL
        self.gateway = gateway
        self.options = RenderOptions(
            edit_interval_s=EDIT_INTERVAL_S,
            release_after_s=release_after_s,
            stale_after_s=settings.session.turn_timeout_s + 60.0,
            reaction=PROCESSING_REACTION,
        )
        self.renderer: ChatRenderer | None = None
        self._connection: SlackConnection | None = None
        self._state: AdapterState = "stopped"
        self._detail = ""
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._stopping = False
        self._hellos = 0
        self.bot_user_id: str | None = None
        self._mention: re.Pattern[str] | None = None
        self._asides: Asides[dict[str, str]] = Asides()  # said in followed threads, not to us
        self._port: SlackPort | None = None
        self._reader: SlackReader | None = None

    @property
    def config(self) -> SlackConfig:
        """The current ``slack`` section (allowlists follow a reload)."""
        return SlackConfig.of(self.gateway.settings)

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        self._tokens()
        for library in ("slack_bolt", "slack_sdk"):
            if importlib.util.find_spec(library) is None:
                raise AdapterError(
                    f"the Slack adapter needs slack-bolt and slack-sdk ({library} is missing); install "
                    "them with pip install '.[slack]' in the netclaw checkout"
                )
        if not self.config.channels and not self.config.allow_dms:
            log.warning("slack: no channels are allowed and DMs are off, so nobody can talk to the bot")

    def routes(self) -> list[web.RouteDef]:
        return []

    async def probe(self) -> str:
        bot_token, _ = self._tokens()
        from adapters.slack._client import probe_auth

        config = SlackConfig.of(self.settings)
        return await probe_auth(bot_token, config.api_url, config.bot_token_env)

    async def start(self) -> None:
        from adapters.slack._client import SlackConnection

        self._stopping = False
        self._hellos = 0
        self._state, self._detail = "starting", ""
        bot_token, app_token = self._tokens()
        connection = SlackConnection(self._on_event, self._on_hello, self._on_click)
        self._connection = connection
        start_up = SlackConfig.of(self.settings)
        try:
            identity = await connection.open(
                bot_token=bot_token,
                app_token=app_token,
                api_url=start_up.api_url,
                bot_env=start_up.bot_token_env,
                app_env=start_up.app_token_env,
            )
        except BaseException as exc:
            self._state = "failed"
            self._detail = str(exc) if isinstance(exc, AdapterError) else f"{type(exc).__name__}: {exc}"
            await connection.close()
            if isinstance(exc, Exception) and not isinstance(exc, AdapterError):
                raise AdapterError(f"Slack adapter failed to start: {self._detail}") from exc
            raise
        self.bot_user_id = identity.user_id
        self._mention = re.compile(rf"<@{re.escape(identity.user_id)}(?:\|[^>]*)?>")
        assert connection.port is not None and connection.reader is not None
        self._port, self._reader = connection.port, connection.reader
        self.renderer = ChatRenderer(self.gateway, connection.port, self.options)
        await self.renderer.resume(conversation_of)  # turns a restart interrupted answer here
        self.gateway.offer_threads("slack", self._open_thread)
        self._state = "running"
        self._detail = f"connected as <@{self.bot_user_id}>"
        log.info("slack: connected via Socket Mode as %s", self.bot_user_id)

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``)."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: f"slack:{c.channel}:{c.thread}", key=key, since=since
        )

    async def stop(self) -> None:
        self._stopping = True
        self.gateway.offer_threads("slack", None)
        if self.renderer is not None:
            await self.renderer.stop()
        if self._connection is not None:
            await self._connection.close()
        if self._state != "failed":
            self._state, self._detail = "stopped", ""

    def status(self) -> AdapterStatus:
        connection = self._connection
        if self._state == "running" and connection is not None and not connection.connected:
            return AdapterStatus("reconnecting", "the Socket Mode connection dropped; slack-sdk reconnects")
        return AdapterStatus(self._state, self._detail)

    def following(self) -> list[str]:
        """Sessions whose replies are being rendered (status, tests)."""
        return self.renderer.following() if self.renderer is not None else []

    def forget_recent_events(self) -> None:
        """Forget which events were seen (what a restart does; tests)."""
        self._recent.clear()

    def _tokens(self) -> tuple[str, str]:
        config = SlackConfig.of(self.settings)
        bot = read_secret(config.bot_token_env)
        if not bot:
            raise AdapterError(
                f"Slack bot token missing: {where_to_put(config.bot_token_env)} "
                "(the xoxb-… Bot User OAuth Token)"
            )
        app = read_secret(config.app_token_env)
        if not app:
            raise AdapterError(
                f"Slack app-level token missing: {where_to_put(config.app_token_env)} "
                "(an xapp-… token with connections:write, for Socket Mode)"
            )
        if not app.startswith("xapp-"):
            raise AdapterError(
                f"{config.app_token_env} does not hold an app-level token (xapp-…); Socket Mode "
                "needs one with the connections:write scope"
            )
        if not bot.startswith("xoxb-"):
            log.warning("slack: %s does not look like a bot token (xoxb-…)", config.bot_token_env)
        return bot, app

    # -- Socket Mode --------------------------------------------------------------------------

    def _on_hello(self) -> None:
        self._hellos += 1
        if self._hellos > 1 and self.renderer is not None:
            log.info("slack: Socket Mode reconnected")
            self.renderer.reconnected()
        if self._state == "running":
            self._detail = f"connected as <@{self.bot_user_id}>"

    async def _on_event(self, kind: str, body: dict[str, Any], event: dict[str, Any]) -> None:
        try:
            await self._handle_event(kind, body, event)
        except Exception:
            log.exception("slack: handling a %s event failed", kind)

    def _on_click(self, click: ButtonClick) -> None:
        if self.renderer is not None:
            self.renderer.clicked(click)

    def _seen(self, *keys: str) -> bool:
        """Was any of these seen recently? Remembers them all either way."""
        hit = any(key in self._recent for key in keys)
        for key in keys:
            self._recent[key] = None
            self._recent.move_to_end(key)
        while len(self._recent) > RECENT_EVENTS:
            self._recent.popitem(last=False)
        return hit

    async def _handle_event(self, kind: str, body: dict[str, Any], event: dict[str, Any]) -> None:
        renderer = self.renderer
        if self._stopping or renderer is None:
            return
        channel, user, ts = event.get("channel"), event.get("user"), event.get("ts")
        if not isinstance(channel, str) or not isinstance(user, str) or not isinstance(ts, str):
            return
        if event.get("subtype") not in USER_SUBTYPES or event.get("bot_id") or user == self.bot_user_id:
            return
        text = str(event.get("text") or "")
        channel_type = event.get("channel_type")
        is_dm = channel_type == "im" or (channel_type is None and channel.startswith("D"))
        mentioned = self._mention is not None and self._mention.search(text) is not None
        if kind == "message" and mentioned and not is_dm:
            return  # the app_mention event for this same message is the one we act on
        event_id = str(body.get("event_id") or "")
        if self._seen(*(k for k in (event_id, f"{channel}:{ts}") if k)):
            log.info("slack: event %s (%s %s) already handled; skipped", event_id, channel, ts)
            return
        thread_ts = event.get("thread_ts")
        root = thread_ts if isinstance(thread_ts, str) and thread_ts else ts
        session_id = f"slack:{channel}:{root}"
        thread_known = root != ts and await self._knows(session_id)
        chat = ChatEvent(
            platform="slack",
            channel_id=channel,
            user_id=user,
            is_dm=is_dm,
            mentioned=mentioned,
            thread_known=thread_known,
        )
        clean = self._clean(text)
        shared = [f for f in event.get("files") or [] if isinstance(f, dict) and _downloadable(f)]
        permit = self.gateway.permit(chat)
        if permit is None:
            if thread_known and (clean or shared):  # said in a followed thread, not to the bot
                self._asides.add(session_id, {"user": user, "text": clean or "(shared a file)"})
            return
        if not clean and not mentioned and not shared:
            return  # nothing to answer
        port, reader = self._port, self._reader
        if port is None or reader is None:
            return
        name = await reader.user_name(user)
        prior = self._asides.take(session_id)
        if not thread_known and (root != ts or is_dm):
            # A session starts mid-conversation (a mention mid-thread, a DM): first, what was
            # said before. A new thread under a channel message starts from nothing.
            prior = await self._earlier(reader, channel, root if root != ts else None, ts) + prior
        files, refused = await fetch_files(
            [
                SharedFile(
                    str(f.get("name") or f.get("title") or "file"),
                    str(f.get("mimetype") or "application/octet-stream"),
                    f["size"] if isinstance(f.get("size"), int) else None,
                    partial(reader.download, str(f["url_private_download"])),
                )
                for f in shared
            ],
            "slack",
        )
        inbound = Inbound(
            session_id=session_id,
            text=clean or (EMPTY_MENTION_TEXT if mentioned and not files else ""),
            user=user,
            identity=f"slack:{event_id}" if event_id else f"slack:{channel}:{ts}",
            user_name=name,
            prior=[await self._prior_of(reader, m) for m in prior],
            files=files,
            # Memories stay in the channel (a DM channel is one person's); a DM is only
            # "team" when a user allowlist vetted who may write.
            place=Place(f"slack:{channel}", dm_audience(self.config) if is_dm else None),
        )
        port.asked_by(Conversation(channel, root), str(body.get("team_id") or event.get("team") or ""), user)
        if refused:
            await renderer.note(Conversation(channel, root), refused)
        if not inbound.text and not inbound.files:
            return
        await renderer.submit(permit, inbound, Conversation(channel, root), MessageRef(channel, ts))

    def _clean(self, text: str) -> str:
        return slack_unescape(self._mention.sub("", text) if self._mention else text).strip()

    async def _earlier(
        self, reader: SlackReader, channel: str, thread: str | None, before: str
    ) -> list[dict[str, Any]]:
        """People's messages before ``before`` in the thread (or the channel), as Slack has them."""
        limit = self.config.thread_context_messages
        try:
            found = await reader.earlier_messages(channel, thread, before, limit)
        except ChatApiError as exc:
            log.warning("slack: earlier messages of %s not read (%s); the turn goes without", channel, exc)
            return []
        out = []
        for m in found:
            if m.get("user") == self.bot_user_id or not isinstance(m.get("user"), str):
                continue  # our own replies are not part of a new session's conversation
            if m.get("subtype") not in USER_SUBTYPES:
                continue  # joins, edits, other apps' posts
            text = self._clean(str(m.get("text") or ""))
            names = ", ".join(str(f.get("name")) for f in m.get("files") or [] if isinstance(f, dict))
            if names:
                text = f"{text}\n(shared {names})".strip()
            if text:
                out.append({"user": str(m["user"]), "text": text})
        return out

    async def _prior_of(self, reader: SlackReader, message: dict[str, Any]) -> PriorMessage:
        return PriorMessage(message["user"], await reader.user_name(message["user"]), message["text"])

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "slack")
