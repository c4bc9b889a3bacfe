"""Everything that touches the Microsoft 365 Agents SDK (``microsoft-agents-*``): the
inbound token check, the activity schema, the Bot Connector client, and the translation of
their errors into netclaw's (imported only when the adapter starts or probes, so a daemon
without the SDK still runs; ``check()`` reports it).

What the SDK does here, and what it does not:

- **Inbound tokens**: the SDK's :class:`JwtTokenValidator` checks every request to the
  messaging endpoint — an RS256 signature by a key the Bot Framework publishes (its JWKS,
  chosen by the token's issuer), the audience (this bot's app id), expiry, the tenant
  binding, the issuer (the allow-list on). A missing, unsigned or wrongly signed token is
  refused before anything reads the activity; the token's ``serviceurl`` must name the
  activity's own service host (replies, and the bot's token, go there).
- **Activities** are the SDK's :class:`Activity` model both ways; the **Bot Connector REST
  API** is its :class:`ConnectorClient` (send, update, delete, create a conversation).
- **The bot's own token** is not MSAL's (``microsoft-agents-authentication-msal``): MSAL
  accepts only https authorities and asks ``login.microsoftonline.com`` to vouch for any
  host it does not know, so it can neither be pointed at a sovereign cloud's endpoint by a
  URL nor at a test double. The client-credentials grant is one form POST
  (:class:`BotToken`), against ``teams.token_url``.

Rate limits: the Bot Connector answers 429 with ``Retry-After``; that becomes a transient
:class:`TeamsApiError` carrying it, which the renderer's retries honour. Streaming edits
are paced by the renderer (``edit_interval_s``) well under Teams' per-conversation limit.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx
from jwt import PyJWTError
from microsoft_agents.activity import Activity, Attachment, ChannelAccount, ConversationParameters
from microsoft_agents.hosting.core import AgentAuthConfiguration, JwtTokenValidator
from microsoft_agents.hosting.core.connector.client import ConnectorClient

from adapters.chat import Button, Conversation, MessageRef
from adapters.teams._port import (
    ACTION_KEY,
    FILE_LIMIT,
    MESSAGE_LIMIT,
    THREAD_MARK,
    Kind,
    Reference,
    TeamsApiError,
    TeamsFile,
    TeamsMessage,
)
from adapters.teams._store import TeamsStore

log = logging.getLogger("adapters.teams")

T = TypeVar("T")

BOT_FRAMEWORK_SCOPE = "https://api.botframework.com/.default"
CARD_TYPE = "application/vnd.microsoft.card.adaptive"
TEAMS = "msteams"  # the Bot Framework's channel id of Teams (targeted messages exist only there)
DOWNLOAD_INFO_TYPE = "application/vnd.microsoft.teams.file.download.info"
TOKEN_MARGIN_S = 300.0  # a token is renewed this long before it expires
RETIRED_CLIENTS = 4  # connector clients of older tokens kept open (per node, a few service URLs)
HTTP_TIMEOUT = httpx.Timeout(20.0, connect=10.0)
_TAGS = re.compile(r"<[^>]+>")
_BREAKS = re.compile(r"<br\s*/?>|</p>|</div>", re.IGNORECASE)  # Teams' HTML line ends


# -- the bot's token ----------------------------------------------------------------------------


class BotToken:
    """The bot's client-credentials token for the Bot Connector, renewed before it expires."""

    def __init__(self, app_id: str, password: str, token_url: str, password_env: str) -> None:
        self.app_id = app_id
        self._password = password
        self.token_url = token_url
        self._password_env = password_env
        self._token = ""
        self._expires = 0.0
        self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT)
        self._lock = asyncio.Lock()  # one request for a new token, however many calls wait

    async def get(self) -> str:
        async with self._lock:
            if self._token and time.monotonic() < self._expires - TOKEN_MARGIN_S:
                return self._token
            return await self._fetch()

    async def _fetch(self) -> str:
        data = {
            "grant_type": "client_credentials",
            "client_id": self.app_id,
            "client_secret": self._password,
            "scope": BOT_FRAMEWORK_SCOPE,
        }
        try:
            response = await self._http.post(self.token_url, data=data)
        except httpx.HTTPError as exc:
            raise TeamsApiError(
                f"cannot reach the token endpoint {self.token_url}: {type(exc).__name__}: {exc}",
                transient=True,
            ) from exc
        body = _json(response)
        if response.status_code in (400, 401):
            said = body.get("error_description") or body.get("error") or response.text[:200]
            raise TeamsApiError(
                f"the token endpoint {self.token_url} refused app {self.app_id} ({said}); check "
                f"teams.app_id, teams.tenant_id and the client secret in {self._password_env}",
                status=401,
            )
        if response.status_code >= 300 or not isinstance(body.get("access_token"), str):
            raise TeamsApiError(
                f"the token endpoint {self.token_url} answered {response.status_code}: {response.text[:200]}",
                status=response.status_code,
                transient=response.status_code >= 500 or response.status_code == 429,
            )
        self._token = body["access_token"]
        self._expires = time.monotonic() + float(body.get("expires_in", 3600))
        return self._token

    async def close(self) -> None:
        await self._http.aclose()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# -- inbound ------------------------------------------------------------------------------------


class Unauthorized(Exception):
    """An activity's request did not prove it came from the Bot Framework for this bot."""


class InboundTokens:
    """The messaging endpoint's guard: the SDK's validator, configured for this bot."""

    def __init__(self, app_id: str, tenant_id: str) -> None:
        self._validator = JwtTokenValidator(
            # The issuer allow-list on (the SDK leaves it off for older deployments): the Bot
            # Framework's, the bot's tenant's and Microsoft's own first-party issuers.
            AgentAuthConfiguration(
                client_id=app_id, tenant_id=tenant_id or None, anonymous_allowed=False, validate_issuer=True
            )
        )

    async def claims(self, authorization: str | None) -> dict[str, Any]:
        """The token's claims, or :class:`Unauthorized` saying what is wrong."""
        if not authorization:
            raise Unauthorized("no Authorization header: the Bot Framework signs every activity")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip() or " " in token.strip():
            raise Unauthorized("the Authorization header is not 'Bearer <token>'")
        try:
            identity = await self._validator.validate_token(token.strip())
        except (PyJWTError, ValueError, KeyError) as exc:
            raise Unauthorized(f"the token is not valid for this bot ({type(exc).__name__})") from exc
        return dict(identity.claims)


def parse_activity(data: Any, claims: dict[str, Any]) -> Activity:
    """The activity in a request whose token was valid; ValueError when it is not one, or
    when it names another service URL than the token vouches for."""
    if not isinstance(data, dict):
        raise ValueError("the body is not an activity (a JSON object)")
    activity = Activity.model_validate(data)
    if not activity.type or activity.conversation is None or not activity.conversation.id:
        raise ValueError("an activity needs a type and a conversation id")
    if not activity.service_url or not activity.service_url.startswith(("https://", "http://")):
        raise ValueError("an activity needs its serviceUrl")
    vouched = str(claims.get("serviceurl") or "")
    if vouched and _host(vouched) != _host(activity.service_url):
        raise PermissionError(f"the token vouches for {vouched}, the activity names {activity.service_url}")
    return activity


def reference_of(activity: Activity) -> Reference:
    assert activity.conversation is not None and activity.service_url is not None
    conversation = activity.conversation
    raw_kind = (conversation.conversation_type or "personal").strip()
    kind: Kind = raw_kind if raw_kind in ("personal", "groupChat", "channel") else "personal"  # type: ignore[assignment]
    base = conversation.id.split(THREAD_MARK, 1)[0] if kind == "channel" else conversation.id
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    tenant = conversation.tenant_id or str((data.get("tenant") or {}).get("id") or "")
    bot = activity.recipient.id if activity.recipient is not None else ""
    return Reference(base, activity.service_url, tenant, kind, bot)


def normalise(activity: Activity, reference: Reference) -> TeamsMessage | None:
    """A message activity as the adapter sees it; None for anything else."""
    if activity.type != "message" or activity.conversation is None:
        return None
    author = activity.from_property or ChannelAccount(id="")
    bot = activity.recipient.id if activity.recipient is not None else ""
    thread = None
    if reference.kind == "channel":
        _, _, root = activity.conversation.id.partition(THREAD_MARK)
        thread = root or activity.id
    text = activity.text or ""
    mentioned = False
    for entity in activity.entities or []:
        account = getattr(entity, "mentioned", None)
        is_mention = str(getattr(entity, "type", "")).lower().endswith("mention")
        if is_mention and account is not None and account.id == bot:
            mentioned = True
            tag = getattr(entity, "text", None)
            if tag:
                text = text.replace(tag, "")
    text = html.unescape(_TAGS.sub("", _BREAKS.sub("\n", text)))
    action = None
    value = activity.value
    if isinstance(value, dict) and isinstance(value.get(ACTION_KEY), str):
        action = (str(value[ACTION_KEY]), str(value.get("value", "")))
    files = []
    for attachment in activity.attachments or []:
        content = attachment.content if isinstance(attachment.content, dict) else {}
        if attachment.content_type == DOWNLOAD_INFO_TYPE and isinstance(content.get("downloadUrl"), str):
            name = attachment.name or "file"
            files.append(TeamsFile(name, _mime_of(name), content["downloadUrl"], authorized=False))
        elif (
            attachment.content_url
            and attachment.content_type
            and not attachment.content_type.startswith(("text/html", "application/vnd.microsoft.card"))
        ):
            name = attachment.name or f"file-{len(files) + 1}"
            # The bot's token goes only to the service the activity came from.
            authorized = _host(attachment.content_url) == _host(reference.service_url)
            files.append(TeamsFile(name, attachment.content_type, attachment.content_url, authorized))
    return TeamsMessage(
        activity_id=activity.id or "",
        reference=reference,
        thread=thread,
        user_id=author.aad_object_id or author.id or "",
        user_name=author.name or "",
        account_id=author.id or "",
        text=text.strip(),
        mentioned=mentioned,
        from_bot=author.id == bot or (author.role or "") == "bot" or author.id.startswith("28:"),
        files=tuple(files),
        action=action,
        reply_to=activity.reply_to_id,
    )


_MIME = {
    "txt": "text/plain",
    "md": "text/markdown",
    "csv": "text/csv",
    "json": "application/json",
    "pdf": "application/pdf",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
}


def _host(url: str) -> str:
    return (urlsplit(url).netloc or "").lower()


def _mime_of(name: str) -> str:
    return _MIME.get(name.rpartition(".")[2].lower(), "application/octet-stream")


# -- errors -------------------------------------------------------------------------------------


def translate_error(exc: BaseException, what: str) -> TeamsApiError:
    if isinstance(exc, TeamsApiError):
        return exc
    if isinstance(exc, aiohttp.ClientResponseError):
        status = exc.status
        if status == 429:
            retry = _seconds(exc.headers.get("Retry-After") if exc.headers is not None else None)
            return TeamsApiError(
                f"Teams rate-limited the request to {what}; retry in {retry:g}s",
                status=429,
                retry_after=retry,
                transient=True,
            )
        if status in (401, 403):
            return TeamsApiError(
                f"Teams refused to {what} ({status}): the bot may not post there (removed from the "
                "team or chat), or its token is not accepted",
                status=status,
            )
        if status == 404:
            return TeamsApiError(f"could not {what}: not found (404)", status=404)
        return TeamsApiError(
            f"could not {what}: Teams answered {status} ({str(exc.message)[:200]})",
            status=status,
            transient=status >= 500,
        )
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return TeamsApiError(
            f"could not {what}: cannot reach Teams ({type(exc).__name__}: {exc})", transient=True
        )
    return TeamsApiError(f"could not {what}: {type(exc).__name__}: {exc}")


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0


# -- the real port ------------------------------------------------------------------------------


def _card(text: str, buttons: Sequence[Button]) -> dict[str, Any]:
    """An Adaptive Card: the request's text, one Action.Submit per button."""
    return {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.4",
        "body": [{"type": "TextBlock", "text": text, "wrap": True}],
        "actions": [
            {
                "type": "Action.Submit",
                "title": button.label,
                "style": {"primary": "positive", "danger": "destructive"}.get(button.style, "default"),
                "data": {ACTION_KEY: button.action_id, "value": button.value},
            }
            for button in buttons
        ],
    }


class ConnectorPort:
    """:class:`~adapters.teams._port.TeamsPort` over the SDK's Bot Connector client."""

    platform = "teams"
    message_limit = MESSAGE_LIMIT

    def __init__(self, token: BotToken, store: TeamsStore) -> None:
        self.token = token
        self._store = store
        self._clients: dict[str, tuple[str, ConnectorClient]] = {}  # service URL → (token, client)
        self._retired: list[ConnectorClient] = []  # clients of an older token, calls may still use
        self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=True)

    def escape(self, text: str) -> str:
        return text  # sent as Markdown, which Teams renders; it runs no HTML a model writes

    async def close(self) -> None:
        for client in [*(c for _, c in self._clients.values()), *self._retired]:
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()
        self._retired.clear()
        await self._http.aclose()

    # -- calls ------------------------------------------------------------------------------------

    def _reference(self, to: Conversation | str) -> Reference:
        key = to.channel if isinstance(to, Conversation) else to
        reference = self._store.reference(key)
        if reference is None:
            raise TeamsApiError(
                f"no Teams conversation {key} is known here: the bot learns where a chat or channel "
                "is from an activity people send there",
                status=404,
            )
        return reference

    async def _client(self, service_url: str) -> ConnectorClient:
        token = await self.token.get()
        known = self._clients.get(service_url)
        if known is not None and known[0] == token:
            return known[1]
        client = ConnectorClient(service_url, token)
        self._clients[service_url] = (token, client)
        if known is not None:  # closed a token later: a call under way keeps its client till then
            self._retired.append(known[1])
            while len(self._retired) > RETIRED_CLIENTS:
                with contextlib.suppress(Exception):
                    await self._retired.pop(0).close()
        return client

    async def _call(
        self, what: str, reference: Reference, call: Callable[[ConnectorClient], Awaitable[T]]
    ) -> T:
        try:
            return await call(await self._client(reference.service_url))
        except Exception as exc:  # every failure reaches the renderer as a TeamsApiError
            raise translate_error(exc, what) from exc

    def _message(self, text: str, attachments: list[Attachment] | None = None) -> Activity:
        activity = Activity(
            type="message", text=text[:MESSAGE_LIMIT], text_format="markdown", channel_id=TEAMS
        )
        if attachments is not None:
            activity.attachments = attachments
        return activity

    # -- the chat port ----------------------------------------------------------------------------

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        return await self._post(to, self._message(text), key)

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        card = Attachment(content_type=CARD_TYPE, content=_card(text, buttons))
        # The card carries the text; the summary is what a notification shows of it.
        activity = Activity(type="message", attachments=[card], summary=text[:200], channel_id=TEAMS)
        return await self._post(to, activity, key)

    async def _post(self, to: Conversation, activity: Activity, key: str) -> str:
        reference = self._reference(to)
        conversation_id = reference.conversation_id_of(to)
        known = await self._store.posted.find(key, conversation_id)
        if known is not None:  # posted before (a retry, a resumed turn): that message, shown anew
            try:
                await self._update(reference, conversation_id, known, activity)
                return known
            except TeamsApiError as exc:
                if exc.status != 404:
                    raise
        sent = await self._call(
            "send a message",
            reference,
            lambda c: c.conversations.send_to_conversation(conversation_id, activity),
        )
        if not sent.id:
            raise TeamsApiError("Teams took the message but gave no id for it")
        await self._store.posted.remember(key, conversation_id, sent.id)
        return sent.id

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        reference = self._reference(to)
        return await self._store.posted.find(key, reference.conversation_id_of(to), since)

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        """A delivery target: a channel gets a new post (a reply chain of its own, made with
        ``createConversation``); a chat gets the message, and its session goes on there.
        ``channel`` is a chat or channel id the bot has heard from."""
        known = next((r for r in self._store.references() if channel in (r.conversation_id, r.key)), None)
        if known is None:
            raise TeamsApiError(
                f"the bot has not heard from Teams conversation {channel} yet: add it to the team or "
                "chat and say something there first (Teams sends where a conversation is only with "
                "an activity from it)",
                status=404,
            )
        if known.kind != "channel":
            to = Conversation(known.key)
            await self.post(to, text, key=key)
            return to
        posted = await self._store.posted.find(key, known.conversation_id, since)
        if posted is not None:
            return Conversation(known.key, posted)
        parameters = ConversationParameters(
            is_group=True,
            channel_data={"channel": {"id": known.conversation_id}},
            activity=self._message(text),
            tenant_id=known.tenant_id or None,
        )
        made = await self._call(
            "start a conversation in the channel",
            known,
            lambda c: c.conversations.create_conversation(parameters),
        )
        root = made.activity_id or (made.id or "").partition(THREAD_MARK)[2]
        if not root:
            raise TeamsApiError("Teams started the conversation but gave no message id for it")
        await self._store.posted.remember(key, known.conversation_id, root)
        return Conversation(known.key, root)

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        reference = self._reference(to)
        # No attachments: a decided approval's card becomes its decision as plain text.
        await self._update(reference, reference.conversation_id_of(to), message_id, self._message(text, []))

    async def _update(
        self, reference: Reference, conversation_id: str, message_id: str, activity: Activity
    ) -> None:
        activity.id = message_id
        await self._call(
            "edit a message",
            reference,
            lambda c: c.conversations.update_activity(conversation_id, message_id, activity),
        )

    async def delete(self, to: Conversation, message_id: str) -> None:
        reference = self._reference(to)
        try:
            await self._call(
                "delete a message",
                reference,
                lambda c: c.conversations.delete_activity(reference.conversation_id_of(to), message_id),
            )
        except TeamsApiError as exc:
            if exc.status != 404:
                raise

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        return None  # a bot cannot react in Teams: "typing" is its "working on it"

    async def typing(self, to: Conversation) -> None:
        reference = self._reference(to)
        conversation_id = reference.conversation_id_of(to)
        await self._call(
            "show typing",
            reference,
            lambda c: c.conversations.send_to_conversation(conversation_id, Activity(type="typing")),
        )

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        """A file goes inline, as a data URL attachment of its own message: a bot can post
        no file to a channel's SharePoint folder or a chat's OneDrive without Microsoft
        Graph permissions, and an activity is limited to about 100 KB."""
        if len(data) > FILE_LIMIT:
            raise TeamsApiError(
                f"{name} is {len(data):,} bytes; Teams takes at most {FILE_LIMIT:,} inline "
                "(find it in the control room's session page)",
                status=413,
            )
        url = f"data:{mime_type};base64,{base64.b64encode(data).decode()}"
        attachment = Attachment(content_type=mime_type, content_url=url, name=name)
        activity = Activity(type="message", attachments=[attachment])
        reference = self._reference(to)
        conversation_id = reference.conversation_id_of(to)
        sent = await self._call(
            "post a file",
            reference,
            lambda c: c.conversations.send_to_conversation(conversation_id, activity),
        )
        return sent.id or ""

    # -- Teams' own -------------------------------------------------------------------------------

    async def tell(self, to: Conversation, user_id: str, text: str) -> None:
        reference = self._reference(to)
        conversation_id = reference.conversation_id_of(to)
        activity = self._message(text).with_targeted_recipient(user_id)
        await self._call(
            "tell one person",
            reference,
            lambda c: c.conversations.send_to_conversation(conversation_id, activity),
        )

    async def download(self, file: TeamsFile, max_bytes: int) -> bytes:
        headers = {"Authorization": f"Bearer {await self.token.get()}"} if file.authorized else {}
        try:
            async with self._http.stream("GET", file.url, headers=headers) as response:
                if response.status_code >= 300:
                    raise TeamsApiError(f"downloading {file.name} failed ({response.status_code})")
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise TeamsApiError(f"the file is larger than {max_bytes:,} bytes")
        except httpx.HTTPError as exc:
            raise TeamsApiError(
                f"downloading {file.name} failed: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        return bytes(data)


async def probe(app_id: str, token: BotToken) -> str:
    """``netclaw doctor``: the token endpoint is reachable and takes the app's credentials."""
    try:
        await token.get()
    finally:
        await token.close()
    return f"app {app_id} got a Bot Framework token from {token.token_url}"


async def close_port(port: ConnectorPort) -> None:
    await port.close()
    await port.token.close()
