"""Everything that touches slack-bolt and slack-sdk: the Socket Mode connection, the Web
API behind the :class:`~adapters.chat.ChatPort`, and the translation of their exceptions
into netclaw's (imported only when the adapter starts, so a daemon without the Slack
extra still runs; ``check()`` reports it).

- Rate limits: a ``429``/``ratelimited`` answer becomes a transient
  :class:`~adapters.chat.ChatApiError` carrying Slack's ``Retry-After``, which the
  caller's retries (:mod:`netclaw.retry`) honour; meanwhile further calls of the same
  method wait out the window here, so concurrent renderers do not hammer it.
- Lost answers: a ``chat.postMessage`` whose answer was lost is not re-posted blindly.
  Each post carries message metadata with its idempotency key as a marker; after a lost
  answer the thread is searched for it (``conversations.replies``) and a found message
  is the post's result.
- slack_sdk/slack_bolt/aiohttp exceptions never leave this module.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.chat import (
    Button,
    ButtonClick,
    ChatApiError,
    Conversation,
    MessageRef,
    StreamingUnsupported,
    retry_verdict,
)
from adapters.slack._format import no_pings, slack_escape, to_mrkdwn
from netclaw.errors import AdapterError
from netclaw.retry import RetryPolicy, with_retries

log = logging.getLogger("adapters.slack")

DEFAULT_API_URL = "https://slack.com/api/"
MESSAGE_LIMIT = 4000  # Slack's recommended maximum for one message's text
CONNECT_TIMEOUT_S = 20.0
PING_INTERVAL_S = 10.0  # slack-sdk's liveness ping, and how often it retries a lost connection
STOP_TIMEOUT_S = 5.0
MAX_RETRY_AFTER_S = 300.0
MARKER_EVENT_TYPE = "netclaw_reply"
MARKER_LOOKBACK_S = 120.0  # generous for clock skew between us and Slack
START_POLICY = RetryPolicy(
    max_retries=3, base_delay_s=0.5, max_delay_s=5.0, max_retry_after_s=MAX_RETRY_AFTER_S
)
# Error codes that mean "already so": adding a reaction twice, removing one that is gone.
_ALREADY = frozenset({"already_reacted", "no_reaction", "message_not_found"})
# assistant.threads.setStatus in a workspace, app or conversation that is no AI app thread.
_NOT_AN_ASSISTANT = frozenset(
    {
        "unknown_method",
        "missing_scope",
        "not_allowed_token_type",
        "invalid_thread",
        "method_deprecated",
        "not_allowed",
        "channel_not_found",
        "thread_not_found",
        "no_permission",
    }
)
# chat.startStream in a workspace or app without it: post and edit instead, for good.
_NO_STREAMING = frozenset(
    {
        "unknown_method",
        "missing_scope",
        "not_allowed_token_type",
        "method_deprecated",
        "not_allowed",
        "feature_not_enabled",
        "invalid_arguments",
        "not_in_channel",
        "team_not_found",
        "user_not_found",
    }
)
NAME_TTL_S = 3600.0
MAX_NAMES = 5000

EventHandler = Callable[[str, dict[str, Any], dict[str, Any]], Awaitable[None]]
ACTION_PREFIX = "netclaw_"  # our buttons' action_ids: netclaw_approve, netclaw_deny, ...


class SlackCallFailed(ChatApiError):
    """A Web API call answered ``ok: false``; ``error`` is Slack's error code."""

    code = "slack_api_error"

    def __init__(
        self, method: str, error: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        rate_limited = status == 429 or error == "ratelimited"
        super().__init__(
            f"Slack {method} failed: {error}",
            status=404 if error in ("message_not_found", "thread_not_found") else status,
            retry_after=retry_after,
            transient=rate_limited or (status is not None and status >= 500),
        )
        self.method = method
        self.error = error


class ResponseLost(ChatApiError):
    """The request may have reached Slack, but its answer did not reach us."""


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            try:
                return max(float(value), 0.0)
            except (TypeError, ValueError):
                break
    return 1.0


def _get(response: Any, key: str) -> Any:
    try:
        return response.get(key)
    except (AttributeError, TypeError, ValueError):  # a response without a JSON body
        return None


class SlackPort:
    """:class:`~adapters.chat.ChatPort` over Slack's Web API. A conversation is a channel
    and a thread ``ts``; a message id is a ``ts``."""

    platform = "slack"
    message_limit = MESSAGE_LIMIT

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self._not_before: dict[str, float] = {}  # method -> monotonic time its rate limit ends
        self._with_buttons: set[str] = set()  # messages whose blocks an edit must replace
        self._names: dict[str, tuple[str, float]] = {}  # user id -> (display name, expires at)
        self._no_status: bool = False  # the workspace refused assistant thread status once
        self._no_streaming: bool = False  # ... or chat.startStream
        self._askers: dict[tuple[str, str | None], tuple[str, str]] = {}  # conversation -> (team, user)

    def asked_by(self, to: Conversation, team: str | None, user: str) -> None:
        """Who is waiting for the answer in ``to``: a stream into a channel names them."""
        if team:
            self._askers.pop((to.channel, to.thread), None)
            self._askers[(to.channel, to.thread)] = (team, user)
            while len(self._askers) > MAX_NAMES:
                self._askers.pop(next(iter(self._askers)))

    def escape(self, text: str) -> str:
        return to_mrkdwn(text)

    async def call(
        self,
        method: str,
        send: Callable[..., Awaitable[AsyncSlackResponse]],
        *,
        idempotent: bool = True,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """One Web API call, translated: SlackCallFailed (transient for rate limits and
        5xx), ResponseLost when a non-idempotent request may have landed, a transient
        ChatApiError for a failure that sent nothing (or harmlessly)."""
        wait = self._not_before.get(method, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            return await send(**kwargs)
        except SlackApiError as exc:
            response: Any = exc.response
            status = getattr(response, "status_code", None)
            error = str(_get(response, "error") or f"HTTP {status}")
            retry_after = None
            if status == 429 or error == "ratelimited":
                retry_after = _retry_after(getattr(response, "headers", None))
                self._not_before[method] = time.monotonic() + min(retry_after, MAX_RETRY_AFTER_S)
                log.info("slack: %s rate limited for %.1fs", method, retry_after)
            raise SlackCallFailed(method, error, status=status, retry_after=retry_after) from exc
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            raise ChatApiError(f"cannot reach Slack for {method}: {exc}", transient=True) from exc
        except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
            if not idempotent:
                raise ResponseLost(f"Slack {method}: the answer was lost ({type(exc).__name__})") from exc
            raise ChatApiError(f"Slack {method} failed: {type(exc).__name__}: {exc}", transient=True) from exc

    async def call_retrying(
        self, method: str, send: Callable[..., Awaitable[AsyncSlackResponse]], **kwargs: Any
    ) -> AsyncSlackResponse:
        """An idempotent call, retried like every platform call (start-up, lookups)."""
        return await with_retries(
            partial(self.call, method, send, **kwargs),
            classify=retry_verdict,
            policy=START_POLICY,
            what=f"slack: {method}",
            logger=log,
        )

    # -- the chat port --------------------------------------------------------------------------

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        return await self._post(to, key, text=text)

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": b.label},
                        "action_id": f"{ACTION_PREFIX}{b.action_id}",
                        "value": b.value,
                        **({"style": b.style} if b.style != "default" else {}),
                    }
                    for b in buttons
                ],
            },
        ]
        ts = await self._post(to, key, text=text, blocks=blocks)
        self._with_buttons.add(ts)
        return ts

    async def _post(self, to: Conversation, key: str, **content: Any) -> str:
        """Post in the conversation; if the answer is lost, the post counts as made when
        the thread holds a message with our marker."""
        metadata = _marker(key)
        since = time.time() - MARKER_LOOKBACK_S
        try:
            response = await self.call(
                "chat.postMessage",
                self.client.chat_postMessage,
                idempotent=False,
                channel=to.channel,
                thread_ts=to.thread,
                metadata=metadata,
                unfurl_links=False,
                unfurl_media=False,
                **content,
            )
            return str(response["ts"])
        except ResponseLost as exc:
            found = await self.find_marker(to, key, since)
            if found is not None:
                log.info("slack: the answer to a post was lost, but the message is there (%s)", found)
                return found
            raise ChatApiError(f"{exc}; the thread does not have it", transient=True) from exc

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        return await self.find_marker(to, key, since)

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        top = Conversation(channel, None)
        found = await self.find_marker(top, key, since)
        ts = found if found is not None else await self._post(top, key, text=text)
        return Conversation(channel, ts)

    async def find_marker(self, to: Conversation, marker: str, since: float) -> str | None:
        """The ts of the thread's (or, without a thread, the channel's) message carrying
        ``marker`` in its metadata, if any."""
        cursor: str | None = None
        for _page in range(10):
            if to.thread is None:
                response = await self.call_retrying(
                    "conversations.history",
                    self.client.conversations_history,
                    channel=to.channel,
                    oldest=f"{since:.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            else:
                response = await self.call_retrying(
                    "conversations.replies",
                    self.client.conversations_replies,
                    channel=to.channel,
                    ts=to.thread,
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

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        extra: dict[str, Any] = {}
        if message_id in self._with_buttons:  # the new text replaces the buttons too
            extra["blocks"] = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]
        await self.call(
            "chat.update", self.client.chat_update, channel=to.channel, ts=message_id, text=text, **extra
        )
        self._with_buttons.discard(message_id)

    async def delete(self, to: Conversation, message_id: str) -> None:
        try:
            await self.call("chat.delete", self.client.chat_delete, channel=to.channel, ts=message_id)
        except SlackCallFailed as exc:
            if exc.error != "message_not_found":
                raise

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        method = "reactions.add" if add else "reactions.remove"
        send = self.client.reactions_add if add else self.client.reactions_remove
        try:
            await self.call(
                method, send, channel=message.channel, timestamp=message.message_id, name=reaction
            )
        except SlackCallFailed as exc:
            if exc.error not in _ALREADY:
                raise

    async def typing(self, to: Conversation) -> None:
        """The assistant thread status ("is thinking…"), where the app is an AI app and the
        conversation a thread; elsewhere Slack has no typing indicator for bots. Cleared by
        Slack when the bot replies."""
        if self._no_status or to.thread is None:
            return
        try:
            await self.call(
                "assistant.threads.setStatus",
                self.client.assistant_threads_setStatus,
                channel_id=to.channel,
                thread_ts=to.thread,
                status="is thinking…",
            )
        except SlackCallFailed as exc:
            if exc.error in _NOT_AN_ASSISTANT:
                self._no_status = True  # not an AI app here: stop asking
                log.info("slack: no assistant thread status in this workspace (%s)", exc.error)
                return
            raise

    # -- native streaming (chat.startStream / appendStream / stopStream) ----------------------

    async def stream_start(self, to: Conversation, text: str) -> str:
        if self._no_streaming or to.thread is None:
            raise StreamingUnsupported(
                "Slack streams only into threads" if to.thread is None else "no streaming in this workspace"
            )
        asker = self._askers.get((to.channel, to.thread))
        recipient = {"recipient_team_id": asker[0], "recipient_user_id": asker[1]} if asker else {}
        try:
            response = await self.call(
                "chat.startStream",
                self.client.chat_startStream,
                idempotent=False,
                channel=to.channel,
                thread_ts=to.thread,
                markdown_text=no_pings(text),
                **recipient,
            )
        except SlackCallFailed as exc:
            if exc.error in _NO_STREAMING:
                self._no_streaming = True
                raise StreamingUnsupported(f"chat.startStream: {exc.error}") from exc
            raise
        return str(response["ts"])

    async def stream_append(self, to: Conversation, message_id: str, text: str) -> None:
        await self.call(
            "chat.appendStream",
            self.client.chat_appendStream,
            channel=to.channel,
            ts=message_id,
            markdown_text=text,
        )

    async def stream_stop(self, to: Conversation, message_id: str, text: str, *, key: str) -> None:
        metadata = _marker(key)
        try:
            await self.call(
                "chat.stopStream",
                self.client.chat_stopStream,
                channel=to.channel,
                ts=message_id,
                markdown_text=no_pings(text) or None,
                metadata=metadata,
            )
        except SlackCallFailed as exc:
            if exc.error not in ("message_not_in_streaming_state", "streaming_state_conflict"):
                raise  # else: already stopped (a retry after a lost answer), or Slack timed it out

    # -- reading the conversation (people, earlier messages, files) -----------------------------

    async def user_name(self, user_id: str) -> str:
        """How people in the workspace see ``user_id`` (``users.info``, cached for an hour);
        the id itself when Slack will not say."""
        now = time.monotonic()
        hit = self._names.get(user_id)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            response = await self.call_retrying("users.info", self.client.users_info, user=user_id)
        except ChatApiError as exc:
            log.info("slack: no name for %s (%s)", user_id, exc)
            return hit[0] if hit is not None else user_id
        user = _get(response, "user") or {}
        profile = user.get("profile") or {}
        name = str(
            profile.get("display_name")
            or profile.get("real_name")
            or user.get("real_name")
            or user.get("name")
            or user_id
        )
        self._names[user_id] = (name, now + NAME_TTL_S)
        if len(self._names) > MAX_NAMES:
            self._names.pop(next(iter(self._names)))
        return name

    async def earlier_messages(
        self, channel: str, thread: str | None, before: str, limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` messages before ``before`` (a ts), oldest first: the thread's
        replies (with its root) when ``thread``, else the channel's top-level messages."""
        if limit <= 0:
            return []
        if thread is not None:
            found: list[dict[str, Any]] = []
            cursor: str | None = None
            for _page in range(10):  # the thread's oldest first: page to the end, keep the last
                response = await self.call_retrying(
                    "conversations.replies",
                    self.client.conversations_replies,
                    channel=channel,
                    ts=thread,
                    limit=200,
                    cursor=cursor,
                )
                found += [m for m in _get(response, "messages") or [] if _before(m, before)]
                cursor = (_get(response, "response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    break
            return found[-limit:]
        response = await self.call_retrying(
            "conversations.history",
            self.client.conversations_history,
            channel=channel,
            latest=before,
            inclusive=False,
            limit=limit,
        )
        newest_first = [m for m in _get(response, "messages") or [] if _before(m, before)]
        return list(reversed(newest_first[:limit]))

    async def download(self, url: str, max_bytes: int) -> bytes:
        """A file Slack holds (``url_private_download``), with the bot token; ChatApiError
        past ``max_bytes`` or when Slack will not give it."""
        session = self.client.session
        if session is None:
            raise ChatApiError("no HTTP session for Slack downloads")
        headers = {"Authorization": f"Bearer {self.client.token}"}
        try:
            async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=60)) as response:
                if response.status != 200:
                    raise ChatApiError(
                        f"Slack file download failed: HTTP {response.status}",
                        status=response.status,
                        transient=response.status >= 500 or response.status == 429,
                    )
                if "text/html" in response.headers.get("Content-Type", ""):
                    # Slack answers a download without files:read with its login page.
                    raise ChatApiError(
                        "Slack answered the file download with a web page: is files:read granted?"
                    )
                data = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    data += chunk
                    if len(data) > max_bytes:
                        raise ChatApiError(f"the file is larger than {max_bytes:,} bytes")
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ChatApiError(
                f"Slack file download failed: {type(exc).__name__}: {exc}", transient=True
            ) from exc

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        # files_upload_v2: get an upload URL, send the bytes, complete into the thread.
        try:
            response = await self.client.files_upload_v2(
                channel=to.channel, thread_ts=to.thread, filename=name, content=data, title=name
            )
        except SlackApiError as exc:
            raise SlackCallFailed("files.upload", str(_get(exc.response, "error") or "failed")) from exc
        except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
            raise ChatApiError(
                f"Slack file upload failed: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        files = _get(response, "files") or [_get(response, "file") or {}]
        return str(files[0].get("id", "")) if files else ""


def _marker(key: str) -> dict[str, Any]:
    """Message metadata carrying a post's idempotency key (looked for after a lost answer
    or a crash: :meth:`SlackPort.find_marker`)."""
    return {"event_type": MARKER_EVENT_TYPE, "event_payload": {"marker": key}}


def _before(message: Mapping[str, Any], ts: str) -> bool:
    try:
        return float(message.get("ts") or 0) < float(ts)
    except ValueError:
        return False


def click_of(
    body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient | None = None
) -> ButtonClick:
    """A ``block_actions`` payload and the action in it, as the renderer sees a click;
    with ``client``, an ephemeral answer to the person who clicked."""
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    message = body.get("message") or {}
    ts = message.get("ts") or container.get("message_ts")
    thread = message.get("thread_ts") or container.get("thread_ts")
    user = body.get("user") or {}
    user_id = str(user.get("id") or "")

    async def respond(text: str) -> None:
        assert client is not None
        try:
            await client.chat_postEphemeral(
                channel=str(channel), user=user_id, text=slack_escape(text), thread_ts=thread
            )
        except SlackApiError as exc:
            raise SlackCallFailed("chat.postEphemeral", str(_get(exc.response, "error") or "failed")) from exc
        except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
            raise ChatApiError(f"Slack chat.postEphemeral failed: {exc}", transient=True) from exc

    return ButtonClick(
        action_id=str(action.get("action_id") or "").removeprefix(ACTION_PREFIX),
        value=str(action.get("value") or ""),
        user_id=user_id,
        message=MessageRef(str(channel), str(ts)) if channel and ts else None,
        user_name=str(user.get("username") or user.get("name") or user_id),
        respond=respond if client is not None and channel and user_id else None,
    )


# -- the connection ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BotIdentity:
    user_id: str
    bot_id: str | None


class SlackConnection:
    """A logged-in Web API client and a Socket Mode connection delivering events."""

    def __init__(
        self, on_event: EventHandler, on_hello: Callable[[], None], on_click: Callable[[ButtonClick], None]
    ) -> None:
        self._on_event = on_event
        self._on_hello = on_hello
        self._on_click = on_click
        self._http: aiohttp.ClientSession | None = None
        self._handler: AsyncSocketModeHandler | None = None
        self.port: SlackPort | None = None

    async def open(
        self, *, bot_token: str, app_token: str, api_url: str | None, bot_env: str, app_env: str
    ) -> BotIdentity:
        """Log in and connect; raises AdapterError naming what a person must fix."""
        self._http = aiohttp.ClientSession()
        client = AsyncWebClient(
            token=bot_token,
            base_url=api_url or DEFAULT_API_URL,
            session=self._http,
            timeout=30,
            retry_handlers=[],  # retries are ours: a lost chat.postMessage must not be re-sent blindly
            logger=logging.getLogger("adapters.slack.web"),
        )
        self.port = port = SlackPort(client)
        try:
            auth = await port.call_retrying("auth.test", client.auth_test)
        except SlackCallFailed as exc:
            raise AdapterError(f"Slack rejected the bot token in {bot_env} ({exc.error})") from exc
        identity = BotIdentity(str(auth["user_id"]), str(_get(auth, "bot_id") or "") or None)

        bolt_log = logging.getLogger("adapters.slack.bolt")
        if not any(isinstance(f, _TokenWarningFilter) for f in bolt_log.filters):
            bolt_log.addFilter(_TokenWarningFilter())
        app = AsyncApp(client=client, name="netclaw", logger=bolt_log, request_verification_enabled=False)

        async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event("app_mention", body, event)

        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event("message", body, event)

        async def on_button(
            ack: Callable[[], Awaitable[Any]], body: dict[str, Any], action: dict[str, Any]
        ) -> None:
            await ack()  # within Slack's 3 s, whatever the click leads to
            self._on_click(click_of(body, action, client))

        app.event("app_mention")(on_mention)
        app.event("message")(on_message)
        app.action(re.compile(f"^{re.escape(ACTION_PREFIX)}"))(on_button)
        handler = AsyncSocketModeHandler(
            app, app_token, logger=logging.getLogger("adapters.slack.socket"), ping_interval=PING_INTERVAL_S
        )
        self._handler = handler
        handler.client.message_listeners.append(self._on_socket_message)
        # Ask for the first WebSocket URL ourselves: the SDK would retry a rejected app token
        # forever, where we want to report it (later reconnects are the SDK's).
        try:
            opened = await port.call_retrying(
                "apps.connections.open", client.apps_connections_open, app_token=app_token
            )
        except SlackCallFailed as exc:
            raise AdapterError(
                f"Slack refused a Socket Mode connection for the token in {app_env} ({exc.error}); "
                "is Socket Mode on, and does the token have connections:write?"
            ) from exc
        handler.client.wss_uri = str(opened["url"])
        try:
            await asyncio.wait_for(handler.connect_async(), CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except TimeoutError as exc:
            raise AdapterError(
                f"the Socket Mode WebSocket did not open within {CONNECT_TIMEOUT_S:g}s"
            ) from exc
        return identity

    @property
    def connected(self) -> bool:
        """The Socket Mode WebSocket is open (slack-sdk reconnects by itself when not)."""
        handler = self._handler
        session = handler.client.current_session if handler is not None else None
        return session is not None and not session.closed

    async def _on_socket_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
    ) -> None:
        if message.get("type") == "hello":
            self._on_hello()

    async def close(self) -> None:
        handler, self._handler = self._handler, None
        if handler is not None:
            try:
                await asyncio.wait_for(handler.close_async(), STOP_TIMEOUT_S)  # type: ignore[no-untyped-call]
            except (TimeoutError, aiohttp.ClientError, SlackClientError, OSError) as exc:
                log.warning("slack: closing the Socket Mode connection failed: %s", exc)
        http, self._http = self._http, None
        if http is not None:
            await http.close()


class _TokenWarningFilter(logging.Filter):
    """AsyncApp reads SLACK_BOT_TOKEN from the environment even when given a client, then
    warns that it ignores it; the client does carry that very token."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("As you gave `client` as well")


async def probe_auth(bot_token: str, api_url: str | None, bot_env: str) -> str:
    """``auth.test`` with the bot token, and nothing else: ``netclaw doctor``."""
    async with aiohttp.ClientSession() as http:
        client = AsyncWebClient(
            token=bot_token, base_url=api_url or DEFAULT_API_URL, session=http, timeout=15, retry_handlers=[]
        )
        try:
            auth = await SlackPort(client).call("auth.test", client.auth_test)
        except SlackCallFailed as exc:
            raise AdapterError(f"Slack rejected the bot token in {bot_env} ({exc.error})") from exc
        except ChatApiError as exc:
            raise AdapterError(f"cannot reach Slack: {exc}") from exc
    return f"authenticated as {_get(auth, 'user')} ({_get(auth, 'user_id')}) in {_get(auth, 'team')}"
