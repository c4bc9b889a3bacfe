"""Slack: each thread is one session, over Socket Mode (slack-bolt on the I/O loop).

A mention of the bot in an allowed channel starts the session
``slack:<channel_id>:<thread_ts>`` (the mention's ``ts`` when it is not yet in a
thread); later messages in that thread continue it without a mention. The gateway
runs the channel/user/mention policy; this module maps events and renders outputs.

Inbound: bolt acknowledges every envelope at once and runs our listener in the
background. Slack redelivers an envelope whose ack was slow; a small in-memory set
of recent event ids skips the obvious repeat, and the event id doubles as the
message's replay identity (``slack:<event_id>``), so a repeat that gets past the
set (after a restart, say) is recognised by the session and starts no second turn.

Outbound: one renderer per session, subscribed with TEXT|TEXT_STREAMING. The first
``text_delta`` of a turn posts a message in the thread; later deltas edit it at
most once per :data:`EDIT_INTERVAL_S` (chat.update is a per-method rate-limit tier,
so edits are coalesced); the final ``text`` edits in the exact reply, split at
:data:`MESSAGE_LIMIT` characters on paragraph/code-fence boundaries, extra pieces
posted as further thread messages. Lifecycle outputs (trimmed history, compaction,
errors) become a short note in the thread. A reaction marks a message being worked
on. A renderer lets its subscription go once the session has been idle for
:data:`IDLE_UNSUBSCRIBE_S`, so it never keeps a session resident, and the next
message subscribes again.

Web API calls wait out ``429``/``ratelimited`` answers for ``Retry-After`` and
retry. A ``chat.postMessage`` whose answer was lost is not re-posted blindly: each
post carries message metadata with a unique marker, and before posting again we
look for that marker in the thread (``conversations.replies``).

slack_sdk/slack_bolt exceptions never leave this module: they become
:class:`~netclaw.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import re
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from adapters.base import AdapterState, AdapterStatus
from adapters.render import lifecycle_note, split_message
from netclaw.config import Settings, SlackConfig
from netclaw.errors import AdapterError, NetclawError
from netclaw.gateway import Gateway, Inbound
from netclaw.policy import ChatEvent, denial_reason
from netclaw.sessions._outputs import Output, OutputFilter
from netclaw.sessions._subscribers import OutputQueue

if TYPE_CHECKING:
    from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
    from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
    from slack_sdk.web.async_client import AsyncWebClient
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
MESSAGE_LIMIT = 4000  # Slack's recommended maximum for one message's text
EDIT_INTERVAL_S = 1.0  # at most one chat.update per message per second while streaming
IDLE_UNSUBSCRIBE_S = 30.0  # let a session's subscription go after this long idle
PROCESSING_REACTION = "eyes"
CONNECT_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
MAX_RATE_LIMIT_RETRIES = 5
MAX_RETRY_AFTER_S = 300.0
CONNECTION_RETRIES = 3
MAX_RESUBSCRIBES = 5  # a session that keeps closing our stream mid-turn is given up on
RECENT_EVENTS = 4096
MARKER_EVENT_TYPE = "netclaw_reply"
SUBSCRIPTION = OutputFilter.TEXT | OutputFilter.TEXT_STREAMING
# Message subtypes that are still a person writing; every other subtype (edits,
# deletions, joins, bot messages, ...) is not a message to answer.
USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
EMPTY_MENTION_TEXT = "(The user mentioned you without writing anything else.)"


class SlackCallFailed(AdapterError):
    """A Web API call answered ``ok: false``; ``error`` is Slack's error code."""

    def __init__(self, method: str, error: str, message: str | None = None) -> None:
        super().__init__(message or f"Slack {method} failed: {error}")
        self.method = method
        self.error = error


class ResponseLost(AdapterError):
    """The request may have reached Slack, but its answer did not reach us."""


# --------------------------------------------------------------------------- Web API calls


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            try:
                return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
            except (TypeError, ValueError):
                break
    return 1.0


def slack_escape(text: str) -> str:
    """Slack's three control characters, escaped as its message format requires."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class SlackApi:
    """The Web API calls the adapter makes, with rate-limit and lost-answer handling.

    Every slack_sdk exception is translated here: callers see AdapterError only."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._not_before: dict[str, float] = {}  # method -> monotonic time its rate limit ends

    async def call(
        self,
        method: str,
        send: Callable[..., Awaitable[AsyncSlackResponse]],
        *,
        idempotent: bool = True,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """``send(**kwargs)`` (a client method); waits out rate limits; retries a connection
        failure only when a repeat is harmless (``idempotent``, or nothing was sent)."""
        from slack_sdk.errors import SlackApiError, SlackClientError

        rate_limited = 0
        failures = 0
        while True:
            wait = self._not_before.get(method, 0.0) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                return await send(**kwargs)
            except SlackApiError as exc:
                response: Any = exc.response
                status = getattr(response, "status_code", None)
                error = str(_get(response, "error") or f"HTTP {status}")
                if status == 429 or error == "ratelimited":
                    rate_limited += 1
                    if rate_limited > MAX_RATE_LIMIT_RETRIES:
                        raise SlackCallFailed(
                            method,
                            "ratelimited",
                            f"Slack {method} still rate limited after {rate_limited} tries",
                        ) from exc
                    delay = _retry_after(getattr(response, "headers", None))
                    log.info("slack: %s rate limited; retrying in %.1fs", method, delay)
                    self._not_before[method] = time.monotonic() + delay
                    continue
                raise SlackCallFailed(method, error) from exc
            except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
                failures += 1
                if failures > CONNECTION_RETRIES:
                    raise AdapterError(f"cannot reach Slack for {method}: {exc}") from exc
                await asyncio.sleep(0.5 * 2 ** (failures - 1))
            except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
                if not idempotent:
                    raise ResponseLost(f"Slack {method}: the answer was lost ({type(exc).__name__})") from exc
                failures += 1
                if failures > CONNECTION_RETRIES:
                    raise AdapterError(f"Slack {method} failed: {type(exc).__name__}: {exc}") from exc
                await asyncio.sleep(0.5 * 2 ** (failures - 1))

    async def auth_test(self) -> AsyncSlackResponse:
        return await self.call("auth.test", self.client.auth_test)

    async def post(self, channel: str, thread_ts: str, text: str) -> str:
        """Post ``text`` in the thread; returns the message ts. If the answer to the post
        is lost, it is posted again only when the thread does not already hold it."""
        marker = uuid.uuid4().hex
        metadata = {"event_type": MARKER_EVENT_TYPE, "event_payload": {"marker": marker}}
        since = time.time() - 120  # generous for clock skew between us and Slack
        for _attempt in range(CONNECTION_RETRIES + 1):
            try:
                response = await self.call(
                    "chat.postMessage",
                    self.client.chat_postMessage,
                    idempotent=False,
                    channel=channel,
                    thread_ts=thread_ts,
                    text=text,
                    metadata=metadata,
                    unfurl_links=False,
                    unfurl_media=False,
                )
                return str(response["ts"])
            except ResponseLost as exc:
                found = await self.find_marker(channel, thread_ts, marker, since)
                if found is not None:
                    log.info("slack: the answer to a post was lost, but the message is there (%s)", found)
                    return found
                log.warning("slack: %s; the thread does not have it, posting again", exc)
        raise AdapterError(f"could not post to Slack channel {channel}: every answer was lost")

    async def find_marker(self, channel: str, thread_ts: str, marker: str, since: float) -> str | None:
        """The ts of the thread's message carrying ``marker`` in its metadata, if any."""
        cursor: str | None = None
        for _page in range(10):
            response = await self.call(
                "conversations.replies",
                self.client.conversations_replies,
                channel=channel,
                ts=thread_ts,
                oldest=f"{since:.6f}",
                include_all_metadata=True,
                limit=200,
                cursor=cursor,
            )
            for message in _get(response, "messages") or []:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if payload.get("marker") == marker:
                    return str(message["ts"])
            cursor = (_get(response, "response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return None
        return None

    async def update(self, channel: str, ts: str, text: str) -> None:
        await self.call("chat.update", self.client.chat_update, channel=channel, ts=ts, text=text)

    async def delete(self, channel: str, ts: str) -> None:
        with contextlib.suppress(SlackCallFailed):  # already gone is fine
            await self.call("chat.delete", self.client.chat_delete, channel=channel, ts=ts)

    async def react(self, channel: str, ts: str, name: str, *, add: bool) -> None:
        method = "reactions.add" if add else "reactions.remove"
        send = self.client.reactions_add if add else self.client.reactions_remove
        try:
            await self.call(method, send, channel=channel, timestamp=ts, name=name)
        except SlackCallFailed as exc:
            if exc.error not in ("already_reacted", "no_reaction", "message_not_found"):
                raise


def _get(response: Any, key: str) -> Any:
    try:
        return response.get(key)
    except Exception:  # a response without a JSON body
        return None


# --------------------------------------------------------------------------- rendering state


@dataclass
class _Pending:
    """A message of ours that is waiting for its turn (it carries the reaction)."""

    ts: str
    reacted: asyncio.Task[None] | None = None


@dataclass
class _Reply:
    """The Slack messages showing one turn's reply."""

    turn: int | None
    text: str = ""
    posted: list[str] = field(default_factory=list)  # message ts, one per piece
    shown: list[str] = field(default_factory=list)  # what each message shows now
    last_edit: float = 0.0  # monotonic
    dirty: bool = False


@dataclass
class _Link:
    """One session's subscription and renderer."""

    session_id: str
    channel: str
    thread_ts: str
    queue: OutputQueue | None = None
    sub_id: str | None = None
    task: asyncio.Task[None] | None = None
    pending: deque[_Pending] = field(default_factory=deque)
    holds: int = 0  # inbound messages being admitted right now
    phase: str = "ready"
    reply: _Reply | None = None
    idle_since: float = field(default_factory=time.monotonic)
    resubscribes: int = 0

    def idle(self) -> bool:
        return (
            self.phase in ("ready", "passivating")
            and not self.pending
            and self.holds == 0
            and self.reply is None
        )


def _thread_of(session_id: str) -> tuple[str, str] | None:
    parts = session_id.split(":")
    if len(parts) != 3 or parts[0] != "slack" or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


# --------------------------------------------------------------------------- the adapter


class SlackAdapter:
    name = "slack"

    def __init__(self, settings: Settings, gateway: Gateway) -> None:
        self.settings = settings
        self.config: SlackConfig = settings.slack
        self.gateway = gateway
        self._state: AdapterState = "stopped"
        self._detail = ""
        self._http: aiohttp.ClientSession | None = None
        self._api: SlackApi | None = None
        self._handler: AsyncSocketModeHandler | None = None
        self._links: dict[str, _Link] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._hellos = 0
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self._mention: re.Pattern[str] | None = None

    # -- the Adapter protocol -----------------------------------------------------------------

    def check(self) -> None:
        self._tokens()
        try:
            importlib.import_module("slack_bolt")
            importlib.import_module("slack_sdk")
        except ImportError as exc:
            raise AdapterError(
                f"the Slack adapter needs slack-bolt and slack-sdk ({exc}); install them with "
                "pip install 'netclaw[slack]'"
            ) from exc
        if not self.config.channels and not self.config.allow_dms:
            log.warning("slack: no channels are allowed and DMs are off, so nobody can talk to the bot")

    def routes(self) -> list[web.RouteDef]:
        return []

    async def start(self) -> None:
        self._stopping = False
        self._hellos = 0
        self._state, self._detail = "starting", ""
        try:
            await self._start()
        except BaseException as exc:
            self._state = "failed"
            self._detail = str(exc) if isinstance(exc, AdapterError) else f"{type(exc).__name__}: {exc}"
            await self._close_transport()
            if isinstance(exc, AdapterError):
                raise
            if isinstance(exc, Exception):
                raise AdapterError(f"Slack adapter failed to start: {self._detail}") from exc
            raise
        self._state = "running"
        self._detail = f"connected as <@{self.bot_user_id}>"
        log.info("slack: connected via Socket Mode as %s", self.bot_user_id)

    async def stop(self) -> None:
        self._stopping = True
        links = list(self._links.values())
        self._links.clear()
        for link in links:
            self._unsubscribe(link)
            if link.task is not None:
                link.task.cancel()
        for task in list(self._tasks):
            task.cancel()
        waiting = [t for t in (*self._tasks, *(link.task for link in links)) if t is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=STOP_TIMEOUT_S)
        # A turn cut short resumes after a restart; do not leave "working on it" behind.
        api = self._api
        if api is not None:
            removals = [
                api.react(link.channel, p.ts, PROCESSING_REACTION, add=False)
                for link in links
                for p in link.pending
            ]
            if removals:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.gather(*removals, return_exceptions=True), 2.0)
        await self._close_transport()
        if self._state != "failed":
            self._state, self._detail = "stopped", ""

    def status(self) -> AdapterStatus:
        return AdapterStatus(self._state, self._detail)

    # -- start-up -----------------------------------------------------------------------------

    def _tokens(self) -> tuple[str, str]:
        bot = os.environ.get(self.config.bot_token_env, "").strip()
        if not bot:
            raise AdapterError(
                f"Slack bot token missing: set the environment variable {self.config.bot_token_env} "
                "(the xoxb-… Bot User OAuth Token)"
            )
        app = os.environ.get(self.config.app_token_env, "").strip()
        if not app:
            raise AdapterError(
                f"Slack app-level token missing: set the environment variable {self.config.app_token_env} "
                "(an xapp-… token with connections:write, for Socket Mode)"
            )
        if not app.startswith("xapp-"):
            raise AdapterError(
                f"{self.config.app_token_env} does not hold an app-level token (xapp-…); Socket Mode "
                "needs one with the connections:write scope"
            )
        if not bot.startswith("xoxb-"):
            log.warning("slack: %s does not look like a bot token (xoxb-…)", self.config.bot_token_env)
        return bot, app

    async def _start(self) -> None:
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
        from slack_bolt.app.async_app import AsyncApp
        from slack_sdk.web.async_client import AsyncWebClient

        bot_token, app_token = self._tokens()
        self._http = aiohttp.ClientSession()
        client = AsyncWebClient(
            token=bot_token,
            base_url=self.config.api_url or DEFAULT_API_URL,
            session=self._http,
            timeout=30,
            retry_handlers=[],  # retries are ours: a lost chat.postMessage must not be re-sent blindly
            logger=logging.getLogger(f"{__name__}.web"),
        )
        self._api = api = SlackApi(client)
        try:
            auth = await api.auth_test()
        except SlackCallFailed as exc:
            raise AdapterError(
                f"Slack rejected the bot token in {self.config.bot_token_env} ({exc.error})"
            ) from exc
        self.bot_user_id = str(auth["user_id"])
        self.bot_id = str(_get(auth, "bot_id") or "") or None
        self._mention = re.compile(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>")

        bolt_log = logging.getLogger(f"{__name__}.bolt")
        if not any(isinstance(f, _TokenWarningFilter) for f in bolt_log.filters):
            bolt_log.addFilter(_TokenWarningFilter())
        app = AsyncApp(
            client=client,
            name="netclaw",
            logger=bolt_log,
            request_verification_enabled=False,  # Socket Mode: nothing to verify
        )

        async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event("app_mention", body, event)

        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event("message", body, event)

        app.event("app_mention")(on_mention)
        app.event("message")(on_message)

        handler = AsyncSocketModeHandler(app, app_token, logger=logging.getLogger(f"{__name__}.socket"))
        self._handler = handler
        handler.client.message_listeners.append(self._on_socket_message)
        # Ask for the first WebSocket URL ourselves: the SDK would retry a rejected app token
        # forever, where we want to report it (later reconnects are the SDK's).
        try:
            opened = await api.call(
                "apps.connections.open", client.apps_connections_open, app_token=app_token
            )
        except SlackCallFailed as exc:
            raise AdapterError(
                f"Slack refused a Socket Mode connection for the token in {self.config.app_token_env} "
                f"({exc.error}); is Socket Mode on, and does the token have connections:write?"
            ) from exc
        handler.client.wss_uri = str(opened["url"])
        try:
            await asyncio.wait_for(handler.connect_async(), CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except TimeoutError as exc:
            raise AdapterError(
                f"the Socket Mode WebSocket did not open within {CONNECT_TIMEOUT_S:g}s"
            ) from exc
        await self._resume_pending()

    async def _close_transport(self) -> None:
        handler, self._handler = self._handler, None
        if handler is not None:
            try:
                await asyncio.wait_for(handler.close_async(), STOP_TIMEOUT_S)  # type: ignore[no-untyped-call]
            except Exception as exc:
                log.warning("slack: closing the Socket Mode connection failed: %s", exc)
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def _resume_pending(self) -> None:
        """A Slack session whose turn a restart interrupted resumes now: watch it, so its
        reply reaches the thread."""
        try:
            pending = await self.gateway.sessions_with_pending_input()
        except Exception as exc:  # best effort: the next message subscribes anyway
            log.warning("slack: cannot list interrupted sessions: %s", exc)
            return
        for session_id in pending:
            if session_id.startswith("slack:"):
                self._link(session_id)

    # -- Socket Mode ------------------------------------------------------------------------------

    async def _on_socket_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
    ) -> None:
        if message.get("type") != "hello":
            return
        self._hellos += 1
        if self._hellos > 1:
            log.info("slack: Socket Mode reconnected")
            self._resubscribe_all()
        if self._state == "running":
            self._detail = f"connected as <@{self.bot_user_id}>"

    def _resubscribe_all(self) -> None:
        """After a reconnect: every live session gets a working subscription again."""
        for link in list(self._links.values()):
            queue = link.queue
            gone = queue is None or queue.closed or link.task is None or link.task.done()
            if not gone and self.gateway.is_resident(link.session_id):
                continue
            if link.idle():
                self._drop(link)  # the next message subscribes again
                continue
            self._unsubscribe(link)
            try:
                self._subscribe(link)
            except NetclawError as exc:
                log.warning("slack: cannot re-subscribe to %s: %s", link.session_id, exc)
                self._drop(link)

    # -- inbound --------------------------------------------------------------------------------

    async def _on_event(self, kind: str, body: dict[str, Any], event: dict[str, Any]) -> None:
        try:
            await self._handle_event(kind, body, event)
        except Exception:
            log.exception("slack: handling a %s event failed", kind)

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
        if self._stopping:
            return
        channel = event.get("channel")
        user = event.get("user")
        ts = event.get("ts")
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
        thread_known = root != ts and await self.gateway.knows(session_id)
        chat = ChatEvent(
            platform="slack",
            channel_id=channel,
            user_id=user,
            is_dm=is_dm,
            mentioned=mentioned,
            thread_known=thread_known,
        )
        reason = denial_reason(self.config, chat)
        if reason is not None:
            log.info("slack message from %s in %s gets no turn: %s", user, channel, reason)
            return
        clean = slack_unescape(self._mention.sub("", text) if self._mention else text).strip()
        if not clean and not mentioned:
            return  # nothing to answer (a file without a comment, say)
        inbound = Inbound(
            session_id=session_id,
            text=clean or EMPTY_MENTION_TEXT,
            user=user,
            identity=f"slack:{event_id}" if event_id else f"slack:{channel}:{ts}",
        )
        # Subscribe before admitting, so the renderer is in place before the turn speaks.
        link = self._link(session_id)
        if link is None:
            return
        link.holds += 1
        try:
            try:
                admission = await self.gateway.submit_chat(chat, self.config, inbound)
            except NetclawError as exc:
                log.warning("slack: message %s in %s was not accepted: %s", ts, session_id, exc)
                self._spawn(self._note(link, lifecycle_note("error", {"message": str(exc)})))
                return
            if admission is None or admission.duplicate:
                return
            pending = _Pending(ts)
            pending.reacted = self._spawn(self._react(link, ts, add=True))
            link.pending.append(pending)
        finally:
            link.holds -= 1
            link.idle_since = time.monotonic()

    async def _react(self, link: _Link, ts: str, *, add: bool) -> None:
        if self._api is None:
            return
        try:
            await self._api.react(link.channel, ts, PROCESSING_REACTION, add=add)
        except AdapterError as exc:
            log.warning("slack: reaction on %s in %s failed: %s", ts, link.channel, exc)

    async def _unreact(self, pending: _Pending, link: _Link) -> None:
        if pending.reacted is not None:
            with contextlib.suppress(Exception):
                await pending.reacted  # never remove before the add landed
        await self._react(link, pending.ts, add=False)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- subscriptions --------------------------------------------------------------------------

    def _link(self, session_id: str) -> _Link | None:
        """The session's link, subscribed; created (and subscribed) on demand."""
        link = self._links.get(session_id)
        if link is not None and link.task is not None and not link.task.done():
            if link.queue is None:  # between two subscriptions (its stream just closed)
                try:
                    self._subscribe(link)
                except NetclawError as exc:
                    log.warning("slack: cannot subscribe to %s: %s", session_id, exc)
                    return None
            return link
        where = _thread_of(session_id)
        if where is None:
            return None
        if link is None:
            link = _Link(session_id, *where)
        else:  # its renderer ended: start over
            self._unsubscribe(link)
        try:
            self._subscribe(link)
        except NetclawError as exc:
            log.warning("slack: cannot subscribe to %s: %s", session_id, exc)
            return None
        self._links[session_id] = link
        return link

    def _subscribe(self, link: _Link) -> None:
        queue = OutputQueue(asyncio.get_running_loop())
        link.sub_id = self.gateway.subscribe(link.session_id, SUBSCRIPTION, queue)
        link.queue = queue
        link.idle_since = time.monotonic()
        if link.task is None or link.task.done():
            link.task = asyncio.ensure_future(self._render_loop(link))

    def _unsubscribe(self, link: _Link) -> None:
        sub_id, link.sub_id = link.sub_id, None
        queue, link.queue = link.queue, None
        if queue is not None:
            queue.close()
        # A session that is not resident has no subscribers: routing to it would only wake it.
        if sub_id is not None and self.gateway.is_resident(link.session_id):
            try:
                self.gateway.unsubscribe(link.session_id, sub_id)
            except NetclawError as exc:  # shutting down: the session goes away anyway
                log.debug("slack: unsubscribe from %s: %s", link.session_id, exc)

    def subscribed_sessions(self) -> list[str]:
        """Sessions with a live subscription (for status and tests)."""
        return sorted(sid for sid, link in self._links.items() if link.sub_id is not None)

    # -- outbound -------------------------------------------------------------------------------

    async def _render_loop(self, link: _Link) -> None:
        try:
            while not self._stopping:
                queue = link.queue
                if queue is None:
                    return
                output = await self._next_output(link, queue)
                if output is _TICK:
                    continue
                if output is None:
                    if queue is not link.queue:  # replaced by a re-subscription
                        continue
                    if not await self._stream_closed(link):
                        return
                    continue
                assert isinstance(output, Output)
                try:
                    await self._render(link, output)
                except AdapterError as exc:
                    log.warning("slack: rendering %s for %s failed: %s", output.event, link.session_id, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("slack: the renderer for %s failed", link.session_id)
            self._drop(link)

    async def _next_output(self, link: _Link, queue: OutputQueue) -> Output | object | None:
        """The next output; :data:`_TICK` after flushing a throttled edit or when idle ends
        the subscription (then the link is gone and the loop ends at the next check)."""
        now = time.monotonic()
        reply = link.reply
        timeout: float | None = None
        if reply is not None and reply.dirty:
            timeout = max(0.0, reply.last_edit + EDIT_INTERVAL_S - now)
        elif link.idle():
            timeout = max(0.0, link.idle_since + IDLE_UNSUBSCRIBE_S - now)
        if timeout is None:
            return await queue.get()
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            if reply is not None and reply.dirty:
                await self._flush(link)
            elif link.idle() and time.monotonic() - link.idle_since >= IDLE_UNSUBSCRIBE_S:
                log.debug("slack: %s idle; letting its subscription go", link.session_id)
                self._drop(link)
            return _TICK

    async def _stream_closed(self, link: _Link) -> bool:
        """The session ended our stream (it stopped or was evicted). Subscribe again while
        it owes us a reply; True to keep rendering."""
        link.queue = None
        link.sub_id = None
        if link.idle() or link.resubscribes >= MAX_RESUBSCRIBES or self._stopping:
            if link.resubscribes >= MAX_RESUBSCRIBES:
                log.warning("slack: %s keeps closing its stream; giving up on it", link.session_id)
            self._drop(link)
            return False
        link.resubscribes += 1
        await asyncio.sleep(0.2 * link.resubscribes)
        if self._stopping or self._links.get(link.session_id) is not link:
            return False
        if link.queue is not None:  # a new message subscribed it meanwhile
            return True
        try:
            self._subscribe(link)
        except NetclawError as exc:
            log.warning("slack: cannot re-subscribe to %s: %s", link.session_id, exc)
            self._drop(link)
            return False
        return True

    def _drop(self, link: _Link) -> None:
        self._unsubscribe(link)
        if self._links.get(link.session_id) is link:
            del self._links[link.session_id]
        for pending in link.pending:
            self._spawn(self._unreact(pending, link))
        link.pending.clear()

    async def _render(self, link: _Link, output: Output) -> None:
        event, data = output.event, output.data
        if event == "joined":
            link.phase = str(data.get("phase", "ready"))
        elif event == "phase":
            link.phase = str(data.get("to", link.phase))
        elif event == "text_delta":
            reply = self._reply_for(link, data.get("turn"))
            reply.text += str(data.get("delta", ""))
            reply.dirty = True
            if not reply.posted or time.monotonic() - reply.last_edit >= EDIT_INTERVAL_S:
                await self._flush(link)
        elif event == "text":
            reply = self._reply_for(link, data.get("turn"))
            final = str(data.get("text", ""))
            if final.strip() or not reply.posted:  # an empty answer leaves what streamed
                reply.text = final
            reply.dirty = True
            await self._flush(link, final=True)
        elif event == "turn_completed":
            if link.reply is not None and link.reply.dirty:
                await self._flush(link)
            link.reply = None
            link.resubscribes = 0
            if link.pending:
                self._spawn(self._unreact(link.pending.popleft(), link))
            link.idle_since = time.monotonic()
        else:
            note = lifecycle_note(event, data)
            if note is not None:
                if link.reply is not None and link.reply.dirty:
                    await self._flush(link)
                await self._note(link, note)

    def _reply_for(self, link: _Link, turn: Any) -> _Reply:
        number = turn if isinstance(turn, int) else None
        reply = link.reply
        if reply is None or (number is not None and reply.turn is not None and reply.turn != number):
            reply = link.reply = _Reply(number)
        return reply

    async def _flush(self, link: _Link, *, final: bool = False) -> None:
        """Make the thread show the reply's text: edit what is posted, post what is new."""
        reply, api = link.reply, self._api
        if reply is None or api is None:
            return
        reply.dirty = False
        pieces = (
            [slack_escape(p) for p in split_message(reply.text, MESSAGE_LIMIT)] if reply.text.strip() else []
        )
        try:
            for index, piece in enumerate(pieces):
                if index < len(reply.posted):
                    if reply.shown[index] != piece:
                        await api.update(link.channel, reply.posted[index], piece)
                        reply.shown[index] = piece
                else:
                    reply.posted.append(await api.post(link.channel, link.thread_ts, piece))
                    reply.shown.append(piece)
            if final:
                while len(reply.posted) > len(pieces):  # the final reply is shorter than the stream
                    await api.delete(link.channel, reply.posted.pop())
                    reply.shown.pop()
        except AdapterError as exc:  # the next flush (or the final text) tries again
            log.warning("slack: showing the reply in %s failed: %s", link.session_id, exc)
        finally:
            reply.last_edit = time.monotonic()

    async def _note(self, link: _Link, note: str | None) -> None:
        if note is None or self._api is None:
            return
        try:
            await self._api.post(link.channel, link.thread_ts, note)
        except AdapterError as exc:
            log.warning("slack: posting a note in %s failed: %s", link.session_id, exc)


_TICK = object()


class _TokenWarningFilter(logging.Filter):
    """AsyncApp reads SLACK_BOT_TOKEN from the environment even when given a client, then
    warns that it ignores it; the client does carry that very token."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("As you gave `client` as well")
