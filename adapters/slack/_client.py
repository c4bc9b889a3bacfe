"""The Socket Mode connection (slack-bolt): log in, connect, deliver events and button
presses; and the ``netclaw doctor`` probe. Imported only when the adapter starts, so a
daemon without the Slack extra still runs (``check()`` reports it).

The Web API is in ``_web`` (calls, errors, rate limits), the chat port in ``_port``, the
reading of conversations in ``_reading``: together they are everything that touches
slack-bolt and slack-sdk, whose exceptions never leave ``adapters/slack/``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat import ButtonClick, ChatApiError, MessageRef
from adapters.slack._format import slack_escape
from adapters.slack._port import ACTION_PREFIX, SlackPort
from adapters.slack._reading import SlackReader
from adapters.slack._web import DEFAULT_API_URL, SlackApi, SlackCallFailed, field_of
from netclaw.errors import AdapterError

log = logging.getLogger("adapters.slack")

CONNECT_TIMEOUT_S = 20.0
PING_INTERVAL_S = 10.0  # slack-sdk's liveness ping, and how often it retries a lost connection
STOP_TIMEOUT_S = 5.0

EventHandler = Callable[[str, dict[str, Any], dict[str, Any]], Awaitable[None]]


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
            raise SlackCallFailed(
                "chat.postEphemeral", str(field_of(exc.response, "error") or "failed")
            ) from exc
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
        self.reader: SlackReader | None = None

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
        api = SlackApi(client)
        self.port, self.reader = SlackPort(api), SlackReader(api)
        try:
            auth = await api.call_retrying("auth.test", client.auth_test)
        except SlackCallFailed as exc:
            raise AdapterError(f"Slack rejected the bot token in {bot_env} ({exc.error})") from exc
        identity = BotIdentity(str(auth["user_id"]), str(field_of(auth, "bot_id") or "") or None)

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
            opened = await api.call_retrying(
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
            auth = await SlackApi(client).call("auth.test", client.auth_test)
        except SlackCallFailed as exc:
            raise AdapterError(f"Slack rejected the bot token in {bot_env} ({exc.error})") from exc
        except ChatApiError as exc:
            raise AdapterError(f"cannot reach Slack: {exc}") from exc
    return (
        f"authenticated as {field_of(auth, 'user')} ({field_of(auth, 'user_id')}) in {field_of(auth, 'team')}"
    )
