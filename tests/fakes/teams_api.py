"""A local fake of the Bot Framework as a Teams bot meets it, for the real Microsoft 365
Agents SDK to talk to (:class:`FakeTeams`, an aiohttp server on 127.0.0.1):

- **the token endpoint** (``POST /<tenant>/oauth2/v2.0/token``): the client-credentials
  grant, answering the app's id and password with a bearer token (401 ``invalid_client``
  otherwise) that the conversations API then requires;
- **the Bot Framework's OpenID metadata and JWKS** (``/v1/.well-known/openidconfiguration``,
  ``/v1/.well-known/keys``): the public half of the fake's own RSA key, which signs the
  token of every activity it delivers (``iss`` the Bot Framework's, ``aud`` the app id,
  ``serviceurl`` its own URL). The SDK takes the JWKS location from the token's issuer, so
  tests point the issuer's entry at this fake (the Teams driver's ``in_process``, and
  ``tests/e2e/netclaw_with_fake_teams.py`` for a subprocess);
- **the conversations API** (``/v3/conversations…``): send, reply to, update and delete an
  activity (``isTargetedActivity=true``: shown to its recipient alone), create a
  conversation (a new post in a channel), and a file download URL (``/files/<id>``).

It keeps every conversation's messages, so posts, edits and deletes agree, with every text
a bot message showed and when. Tests play people: :meth:`FakeTeams.say` delivers a message
activity (a mention, files as Teams' download info) to the bot's messaging endpoint,
:meth:`FakeTeams.press` an Adaptive Card's Action.Submit, :meth:`FakeTeams.deliver` any
activity (again, or with another token: :meth:`FakeTeams.token_for`). An activity the bot
could not be reached for is delivered again once :meth:`FakeTeams.reach` names where it
listens. :class:`FakeTeamsThread` runs one on its own loop for sync tests.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.fakes._loop_thread import LoopThread

T = TypeVar("T")

APP_ID = "00000000-0000-4000-8000-00000000b07a"
APP_PASSWORD = "fake-teams-app-password"
TENANT = "11111111-1111-4111-8111-111111111111"
BOT_ID = f"28:{APP_ID}"
BOT_NAME = "Netclaw"
ISSUER = "https://api.botframework.com"  # the Bot Framework's tokens' issuer
KID = "fake-teams-key-1"
CARD_TYPE = "application/vnd.microsoft.card.adaptive"

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_STRANGER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Posted:
    """One message in a conversation (a person's, or the bot's with what it showed)."""

    id: str
    conversation: str  # the full conversation id (a channel reply chain with ;messageid=)
    activity: dict[str, Any]
    from_bot: bool
    targeted_to: str | None = None  # shown to this account alone
    shown: list[tuple[float, str]] = field(default_factory=list)
    deleted: bool = False

    @property
    def text(self) -> str:
        return text_of(self.activity)


def text_of(activity: dict[str, Any]) -> str:
    """The text a message shows: its text, or its Adaptive Card's text blocks."""
    if activity.get("text"):
        return str(activity["text"])
    for attachment in activity.get("attachments") or []:
        if attachment.get("contentType") == CARD_TYPE:
            body = (attachment.get("content") or {}).get("body") or []
            return "\n".join(str(b.get("text", "")) for b in body if b.get("type") == "TextBlock")
    return ""


class FakeTeams:
    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ids = itertools.count(1_700_000_000_000)
        self.tokens: set[str] = set()
        self.token_requests: list[dict[str, str]] = []
        self.messages: list[Posted] = []
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, int]] = []  # (method, path, status)
        self.deliveries: list[tuple[str, int]] = []  # (activity id, status; 0: unreachable)
        self.endpoint: str | None = None  # where the bot's messaging endpoint is
        self._pending: list[dict[str, Any]] = []
        self._redeliveries: set[asyncio.Future[int]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:
        return f"{self.url}/"

    @property
    def token_url(self) -> str:
        return f"{self.url}/{TENANT}/oauth2/v2.0/token"

    @property
    def keys_url(self) -> str:
        return f"{self.url}/v1/.well-known/keys"

    async def start(self) -> str:
        app = web.Application(middlewares=[self._record])
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_get("/v1/.well-known/openidconfiguration", self._metadata)
        app.router.add_get("/v1/.well-known/keys", self._keys)
        app.router.add_post("/v3/conversations", self._create)
        app.router.add_post("/v3/conversations/{cid}/activities", self._send)
        app.router.add_post("/v3/conversations/{cid}/activities/{aid}", self._send)
        app.router.add_put("/v3/conversations/{cid}/activities/{aid}", self._update)
        app.router.add_delete("/v3/conversations/{cid}/activities/{aid}", self._delete)
        app.router.add_get("/files/{fid}", self._file)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self.url

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        self.calls.append((request.method, request.path, response.status))
        return response

    # -- tokens -------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.token_requests.append({k: str(v) for k, v in form.items()})
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != APP_ID
            or form.get("client_secret") != APP_PASSWORD
        ):
            return web.json_response(
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.",
                },
                status=401,
            )
        token = f"fake-bot-token-{next(self._ids)}"
        self.tokens.add(token)
        return web.json_response({"token_type": "Bearer", "expires_in": 3599, "access_token": token})

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"issuer": ISSUER, "jwks_uri": self.keys_url, "id_token_signing_alg_values_supported": ["RS256"]}
        )

    async def _keys(self, request: web.Request) -> web.Response:
        key = json.loads(RSAAlgorithm.to_jwk(_KEY.public_key()))
        return web.json_response({"keys": [{**key, "kid": KID, "use": "sig", "alg": "RS256"}]})

    def token_for(
        self, *, key: Any = None, audience: str = APP_ID, issuer: str = ISSUER, expires_in: float = 3600
    ) -> str:
        """An activity's bearer token as the Bot Framework signs it (``key``: another key,
        with the same key id, to forge one)."""
        now = int(time.time())
        claims = {"iss": issuer, "aud": audience, "nbf": now - 5, "exp": now + int(expires_in)}
        claims["serviceurl"] = self.service_url
        return jwt.encode(claims, key or _KEY, algorithm="RS256", headers={"kid": KID})

    @staticmethod
    def stranger_key() -> Any:
        return _STRANGER_KEY

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return scheme == "Bearer" and token in self.tokens

    # -- the conversations API ------------------------------------------------------------------

    def _post_bot(self, conversation: str, activity: dict[str, Any], targeted: bool) -> Posted:
        posted = Posted(
            str(next(self._ids)),
            conversation,
            activity,
            from_bot=True,
            targeted_to=(activity.get("recipient") or {}).get("id") if targeted else None,
        )
        posted.shown.append((time.monotonic(), posted.text))
        self.messages.append(posted)
        return posted

    async def _send(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        activity = await request.json()
        if activity.get("type") != "message":
            return web.json_response({})  # typing: nothing to keep
        targeted = request.query.get("isTargetedActivity") == "true"
        posted = self._post_bot(request.match_info["cid"], activity, targeted)
        return web.json_response({"id": posted.id})

    def _find(self, conversation: str, activity_id: str) -> Posted | None:
        return next(
            (
                m
                for m in self.messages
                if m.id == activity_id and m.conversation == conversation and not m.deleted
            ),
            None,
        )

    async def _update(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        posted = self._find(request.match_info["cid"], request.match_info["aid"])
        if posted is None or not posted.from_bot:
            return web.json_response({"error": {"code": "NotFound"}}, status=404)
        posted.activity = {**(await request.json())}
        posted.shown.append((time.monotonic(), posted.text))
        return web.json_response({"id": posted.id})

    async def _delete(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        posted = self._find(request.match_info["cid"], request.match_info["aid"])
        if posted is not None:
            posted.deleted = True
        return web.Response(status=200)

    async def _create(self, request: web.Request) -> web.Response:
        """A bot starts a conversation: in a channel (``channelData.channel.id``), a new
        post with its own reply chain."""
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        body = await request.json()
        channel = ((body.get("channelData") or {}).get("channel") or {}).get("id")
        if not channel or not body.get("activity"):
            return web.json_response({"error": {"code": "BadArgument"}}, status=400)
        root = str(next(self._ids))
        conversation = f"{channel};messageid={root}"
        posted = Posted(root, conversation, body["activity"], from_bot=True)
        posted.shown.append((time.monotonic(), posted.text))
        self.messages.append(posted)
        return web.json_response({"id": conversation, "activityId": root})

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["fid"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    # -- people -------------------------------------------------------------------------------

    def message(
        self,
        conversation: str,
        kind: str,
        person: dict[str, str],
        text: str,
        *,
        mention: bool = False,
        files: list[tuple[str, str, bytes]] | None = None,
        value: dict[str, Any] | None = None,
        reply_to: str | None = None,
        activity_id: str | None = None,
    ) -> dict[str, Any]:
        """A message activity as Teams sends it, kept as the person's message."""
        base = conversation.split(";messageid=")[0]
        activity: dict[str, Any] = {
            "type": "message",
            "id": activity_id or str(next(self._ids)),
            "timestamp": "2026-11-29T00:00:00.000Z",
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": {
                "id": f"29:{person['name']}",
                "name": person["name"].title(),
                "aadObjectId": person["aad"],
            },
            "conversation": {
                "id": conversation,
                "conversationType": kind,
                "tenantId": TENANT,
                **({"isGroup": True} if kind != "personal" else {}),
            },
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "textFormat": "plain",
            "text": f"<at>{BOT_NAME}</at> {text}" if mention else text,
            "channelData": {
                "tenant": {"id": TENANT},
                **({"channel": {"id": base}} if kind == "channel" else {}),
            },
        }
        if mention:
            activity["entities"] = [
                {
                    "type": "mention",
                    "mentioned": {"id": BOT_ID, "name": BOT_NAME},
                    "text": f"<at>{BOT_NAME}</at>",
                }
            ]
        if files:
            attachments = []
            for name, _mime, data in files:
                fid = str(next(self._ids))
                self.files[fid] = data
                attachments.append(
                    {
                        "contentType": "application/vnd.microsoft.teams.file.download.info",
                        "name": name,
                        "content": {
                            "downloadUrl": f"{self.url}/files/{fid}",
                            "uniqueId": fid,
                            "fileType": name.rpartition(".")[2],
                        },
                    }
                )
            activity["attachments"] = attachments
        if value is not None:
            activity["value"] = value
            activity["text"] = ""
        if reply_to is not None:
            activity["replyToId"] = reply_to
        self.messages.append(Posted(activity["id"], conversation, activity, from_bot=False))
        return activity

    def reach(self, endpoint: str) -> None:
        """The bot's messaging endpoint is here now: what could not be delivered goes there."""
        self.endpoint = endpoint
        pending, self._pending = self._pending, []
        for activity in pending:
            task = asyncio.ensure_future(self.deliver(activity))
            self._redeliveries.add(task)
            task.add_done_callback(self._redeliveries.discard)

    async def deliver(self, activity: dict[str, Any], token: str | None = "") -> int:
        """POST ``activity`` to the bot with a valid token (``token``: this one instead;
        None: no Authorization header). Returns the status (0: the bot was unreachable,
        and the activity is delivered again at the next :meth:`reach`)."""
        assert self._session is not None
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.token_for()}"
        status = 0
        if self.endpoint is not None:
            try:
                async with self._session.post(self.endpoint, json=activity, headers=headers) as response:
                    status = response.status
            except aiohttp.ClientError:
                status = 0
        self.deliveries.append((str(activity.get("id")), status))
        if status == 0 or status >= 500:
            self._pending.append(activity)
        return status

    # -- what people see ------------------------------------------------------------------------

    def bot_messages(self, conversation: str | None = None) -> list[Posted]:
        return [
            m
            for m in self.messages
            if m.from_bot
            and not m.deleted
            and m.targeted_to is None
            and (conversation is None or m.conversation == conversation)
        ]

    def targeted(self, account_id: str) -> list[Posted]:
        return [m for m in self.messages if m.from_bot and m.targeted_to == account_id]


def files_of(posted: Posted) -> list[tuple[str, bytes]]:
    """The inline files (data URLs) a bot message carries."""
    found = []
    for attachment in posted.activity.get("attachments") or []:
        url = str(attachment.get("contentUrl") or "")
        if url.startswith("data:"):
            found.append((str(attachment.get("name")), base64.b64decode(url.partition(",")[2])))
    return found


class FakeTeamsThread(LoopThread[FakeTeams]):
    """A :class:`FakeTeams` on its own event loop in a daemon thread, for sync tests."""

    def __init__(self) -> None:
        super().__init__(FakeTeams(), "fake-teams")
