"""Everything that touches matrix-nio: the connection, the real port and the translation
of errors into netclaw's (imported only when the adapter starts, so a daemon without
matrix-nio installed still runs; ``check()`` reports it).

nio gives the logged-in client and its aiohttp session, whoami and the profile, sending
(``room_send`` with our transaction id), redactions, joins and typing. The sync is read as
the homeserver's JSON, over nio's session: nio's parsed events drop parts of what they were
parsed from (an invite's member event loses its content, so ``is_direct`` with it), and
``_events.py`` normalises the JSON itself. Account data (the sync position, m.direct),
leaving with a reason, thread and message listings and media go straight to the
client-server API as well (nio's download uses the unauthenticated media path Synapse no
longer serves by default, and reads a file of any size).

nio retries neither rate limits nor timeouts here (``max_limit_exceeded=0``,
``max_timeouts=0``): a 429 reaches the renderer as a transient :class:`MatrixApiError`
carrying the homeserver's ``retry_after_ms``, which its retries (:mod:`netclaw.retry`) honour.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import urllib.parse
from collections.abc import Sequence
from functools import partial
from typing import Any

import aiohttp
import nio

from adapters.chat import Button, Conversation, MessageRef
from adapters.matrix._events import (
    APPROVAL_FIELD,
    KEY_FIELD,
    RoomNames,
    encrypted_room,
    invite_of,
    joined_now,
    message_of,
    reaction_key,
    room_events,
)
from adapters.matrix._port import (
    APPROVAL_REACTIONS,
    MESSAGE_LIMIT,
    SEEN_REACTION,
    MatrixApiError,
    MatrixMessage,
    SyncBatch,
)

log = logging.getLogger("adapters.matrix")

REQUEST_TIMEOUT_S = 30.0
SINCE_TYPE = "org.netclaw.sync"  # account data: {"since": <next_batch>}
TIMELINE_LIMIT = 50  # events per room in one sync; more leave a gap (reported, logged)
SYNC_FILTER: dict[str, Any] = {
    "presence": {"types": []},
    "account_data": {"types": []},
    # Lazy-loaded members: each batch carries the member events of its senders (their names).
    "room": {
        "timeline": {"limit": TIMELINE_LIMIT},
        "state": {"lazy_load_members": True},
        "ephemeral": {"types": []},
    },
}
FIND_PAGES = 5  # pages of 100 events the outbox looks through for a post of ours
TYPING_MS = 20_000
NO_MENTIONS: dict[str, Any] = {}  # m.mentions with no one in it: model output pings nobody


def quoted(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def translate_error(error: object, what: str, *, token_env: str | None = None) -> MatrixApiError:
    """An nio error response or exception as netclaw's: what to do, and whether a retry helps."""
    if isinstance(error, MatrixApiError):
        return error
    if isinstance(error, nio.ErrorResponse):
        errcode = error.status_code or ""
        status = getattr(error.transport_response, "status", None)
        detail = f"{errcode} {error.message}".strip()
        if errcode == "M_LIMIT_EXCEEDED" or status == 429:
            wait = (error.retry_after_ms or 1000) / 1000
            return MatrixApiError(
                f"the homeserver rate-limited {what}; retry in {wait:.2f}s",
                status=429,
                retry_after=wait,
                transient=True,
                errcode=errcode,
            )
        if errcode in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN") or status == 401:
            where = f" in {token_env}" if token_env else ""
            return MatrixApiError(
                f"the homeserver rejected the access token{where} ({detail}); log the bot in again "
                "and export the new token (docs/channels/matrix.md)",
                status=401,
                errcode=errcode,
            )
        if errcode == "M_FORBIDDEN" or status == 403:
            return MatrixApiError(f"the homeserver refused to {what} ({detail})", status=403, errcode=errcode)
        if errcode == "M_NOT_FOUND" or status == 404:
            return MatrixApiError(f"could not {what}: not found ({detail})", status=404, errcode=errcode)
        return MatrixApiError(
            f"could not {what}: the homeserver answered {status or '?'} ({detail or 'no details'})",
            status=status,
            transient=status is None or status >= 500,
            errcode=errcode,
        )
    if isinstance(error, aiohttp.ClientError | OSError | TimeoutError | asyncio.TimeoutError):
        return MatrixApiError(
            f"could not {what}: cannot reach the homeserver ({type(error).__name__}: {error})", transient=True
        )
    return MatrixApiError(f"could not {what}: {type(error).__name__}: {error}")


def _thread_relation(to: Conversation) -> dict[str, Any]:
    if to.thread is None:
        return {}
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": to.thread,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": to.thread},
        }
    }


class ClientPort:
    """:class:`~adapters.matrix._port.MatrixPort` over a logged-in nio client."""

    platform = "matrix"
    message_limit = MESSAGE_LIMIT

    def __init__(
        self, client: nio.AsyncClient, display_name: str = "", direct: set[str] | None = None
    ) -> None:
        self._client = client
        self._display_name = display_name
        self._direct: set[str] = set(direct or ())
        self._reactions: dict[tuple[str, str, str], str] = {}  # (room, event, key) -> our reaction
        self._names = RoomNames()

    @property
    def user_id(self) -> str:
        return str(self._client.user_id)

    def escape(self, text: str) -> str:
        return text  # plain text bodies: nothing is interpreted, nobody is pinged (empty m.mentions)

    async def close(self) -> None:
        await self._client.close()

    # -- raw calls: what nio has no call for --------------------------------------------------

    async def _raw(
        self,
        method: str,
        path: str,
        what: str,
        body: object = None,
        *,
        params: dict[str, str] | None = None,
        wait_s: float | None = None,
    ) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        headers = {"Authorization": f"Bearer {self._client.access_token}", "Content-Type": "application/json"}
        try:
            response = await self._client.send(
                method, path + query, json.dumps(body) if body is not None else None, headers, timeout=wait_s
            )
            async with response:
                data = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise translate_error(exc, what) from exc
        if status >= 400:
            data = data if isinstance(data, dict) else {}
            error = nio.ErrorResponse(data.get("error", ""), data.get("errcode"), data.get("retry_after_ms"))
            error.transport_response = response
            raise translate_error(error, what)
        return data

    @staticmethod
    def _checked(response: object, what: str) -> Any:
        if isinstance(response, nio.ErrorResponse):
            raise translate_error(response, what)
        return response

    # -- sync and rooms ------------------------------------------------------------------------

    async def sync(self, since: str | None, timeout_ms: int) -> SyncBatch:
        params = {"timeout": str(timeout_ms), "filter": json.dumps(SYNC_FILTER)}
        if since is not None:
            params["since"] = since
        else:
            params["full_state"] = "true"
        data = await self._raw(
            "GET",
            "/_matrix/client/v3/sync",
            "sync",
            params=params,
            wait_s=timeout_ms / 1000 + REQUEST_TIMEOUT_S,
        )
        me = self.user_id
        rooms = data.get("rooms") or {}
        batch = SyncBatch(str(data.get("next_batch") or since or ""))
        for room_id, invited in (rooms.get("invite") or {}).items():
            invite = invite_of(room_id, (invited.get("invite_state") or {}).get("events") or [], me)
            if invite is not None:
                batch.invites.append(invite)
        for room_id, joined in (rooms.get("join") or {}).items():
            timeline = (joined.get("timeline") or {}).get("events") or []
            state = (joined.get("state") or {}).get("events") or []
            if encrypted_room([*state, *timeline]):
                batch.encrypted.append(room_id)
                continue
            just_joined = any(joined_now(e, me) for e in timeline)  # history came along: no gap
            if (joined.get("timeline") or {}).get("limited") and since is not None and not just_joined:
                batch.limited.append(room_id)
            self._names.learn(room_id, [*state, *timeline])
            known = self._names.known(room_id)
            for user in {str(e.get("sender")) for e in timeline if e.get("sender")} - known:
                await self._look_up_name(room_id, user)
            names = [self._display_name, self._names.name(room_id, me) or ""]
            batch.events.extend(
                room_events(
                    timeline,
                    room_id,
                    me,
                    names,
                    is_dm=room_id in self._direct,
                    name_of=partial(self._names.shown, room_id),
                )
            )
        return batch

    async def _look_up_name(self, room_id: str, user: str) -> None:
        """A sender whose member event this sync did not carry (after a restart): ask once."""
        try:
            data = await self._raw(
                "GET",
                f"/_matrix/client/v3/rooms/{quoted(room_id)}/state/m.room.member/{quoted(user)}",
                "read a member",
            )
        except MatrixApiError:
            data = {}
        self._names.remember(room_id, user, data.get("displayname") if isinstance(data, dict) else None)

    async def load_since(self) -> str | None:
        try:
            data = await self._raw(
                "GET",
                f"/_matrix/client/v3/user/{quoted(self.user_id)}/account_data/{SINCE_TYPE}",
                "read the sync position",
            )
        except MatrixApiError as exc:
            if exc.status == 404:
                return None
            raise
        since = data.get("since") if isinstance(data, dict) else None
        return since if isinstance(since, str) and since else None

    async def save_since(self, since: str) -> None:
        await self._raw(
            "PUT",
            f"/_matrix/client/v3/user/{quoted(self.user_id)}/account_data/{SINCE_TYPE}",
            "save the sync position",
            {"since": since},
        )

    async def load_direct(self) -> None:
        """The bot's direct chats (m.direct), read once at start."""
        try:
            data = await self._raw(
                "GET",
                f"/_matrix/client/v3/user/{quoted(self.user_id)}/account_data/m.direct",
                "read m.direct",
            )
        except MatrixApiError as exc:
            if exc.status == 404:
                return
            raise
        for rooms in (data or {}).values():
            if isinstance(rooms, list):
                self._direct.update(r for r in rooms if isinstance(r, str))

    async def mark_direct(self, room_id: str, user_id: str) -> None:
        self._direct.add(room_id)
        path = f"/_matrix/client/v3/user/{quoted(self.user_id)}/account_data/m.direct"
        try:
            data = await self._raw("GET", path, "read m.direct")
        except MatrixApiError as exc:
            if exc.status != 404:
                raise
            data = {}
        rooms = data.get(user_id) if isinstance(data.get(user_id), list) else []
        if room_id not in rooms:
            await self._raw("PUT", path, "record a direct chat", {**data, user_id: [*rooms, room_id]})

    async def join(self, room_id: str) -> None:
        self._checked(await self._client.join(room_id), "join the room")

    async def leave(self, room_id: str, reason: str) -> None:
        await self._raw(
            "POST", f"/_matrix/client/v3/rooms/{quoted(room_id)}/leave", "leave the room", {"reason": reason}
        )

    async def event(self, room_id: str, event_id: str) -> dict[str, object] | None:
        try:
            data = await self._raw(
                "GET", f"/_matrix/client/v3/rooms/{quoted(room_id)}/event/{quoted(event_id)}", "read an event"
            )
        except MatrixApiError as exc:
            if exc.status in (403, 404):
                return None
            raise
        return data if isinstance(data, dict) else None

    async def thread(self, room_id: str, root: str, before: str, limit: int) -> list[MatrixMessage]:
        if limit <= 0:
            return []
        me = self.user_id
        name_of = partial(self._names.shown, room_id)
        data = await self._raw(
            "GET",
            f"/_matrix/client/v1/rooms/{quoted(room_id)}/relations/{quoted(root)}/m.thread",
            "read the thread",
            params={"limit": str(limit + 1), "dir": "b"},
        )
        events = list(reversed(data.get("chunk") or []))
        root_event = await self.event(room_id, root)
        if root_event is not None:
            events.insert(0, root_event)
        found: list[MatrixMessage] = []
        for event in events:
            if event.get("event_id") == before:
                break
            message = message_of(event, room_id, me, [self._display_name], name_of=name_of)
            if message is not None:
                found.append(message)
        return found[-limit:]

    async def download(self, url: str, max_bytes: int) -> bytes:
        server, _, media = url.removeprefix("mxc://").partition("/")
        path = f"/_matrix/client/v1/media/download/{quoted(server)}/{quoted(media)}"
        headers = {"Authorization": f"Bearer {self._client.access_token}"}
        try:
            response = await self._client.send("GET", path, None, headers)
            async with response:
                if response.status >= 400:
                    raise MatrixApiError(
                        f"could not download {url}: the homeserver answered {response.status}",
                        status=response.status,
                        transient=response.status >= 500 or response.status == 429,
                    )
                data = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    data.extend(chunk)
                    if len(data) > max_bytes:
                        raise MatrixApiError(f"the file is larger than {max_bytes:,} bytes")
                return bytes(data)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise translate_error(exc, "download a file") from exc

    # -- the chat port -------------------------------------------------------------------------

    async def _send(self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str) -> str:
        try:
            response = await self._client.room_send(room_id, event_type, content, tx_id=txn)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise translate_error(exc, what) from exc
        sent: nio.RoomSendResponse = self._checked(response, what)
        return str(sent.event_id)

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        # The key is the transaction id: the homeserver answers a repeat with the event it
        # already made (a retry never posts twice); it is in the content too, for find_posted.
        content = {
            "msgtype": "m.text",
            "body": text[:MESSAGE_LIMIT],
            "m.mentions": NO_MENTIONS,
            KEY_FIELD: key,
        }
        return await self._send(
            to.channel, "m.room.message", {**content, **_thread_relation(to)}, key, "send a message"
        )

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        new = {"msgtype": "m.text", "body": text[:MESSAGE_LIMIT], "m.mentions": NO_MENTIONS}
        content = {
            "msgtype": "m.text",
            "body": f"* {text[:MESSAGE_LIMIT]}",
            "m.new_content": new,
            "m.mentions": NO_MENTIONS,
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
        }
        await self._send(to.channel, "m.room.message", content, secrets.token_hex(10), "edit a message")

    async def delete(self, to: Conversation, message_id: str) -> None:
        try:
            self._checked(await self._client.room_redact(to.channel, message_id), "delete a message")
        except MatrixApiError as exc:
            if exc.status != 404:
                raise

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        if reaction == SEEN_REACTION:
            # "Seen, working on it" is a read receipt here (typing shows the work): a receipt
            # is ephemeral, while a reaction is a room event — the homeserver persists it in
            # the room's order, so the reply waits behind it (about half of a reply's time on
            # a small Synapse: bench/channels.py), and its removal leaves a redaction in
            # everyone's history. A receipt stays; it only says the message was read.
            if add:
                path = f"/_matrix/client/v3/rooms/{quoted(message.channel)}/receipt/m.read/{quoted(message.message_id)}"
                await self._raw("POST", path, "mark a message read", {})
            return
        slot = (message.channel, message.message_id, reaction)
        if add:
            if slot in self._reactions:
                return
            content = {
                "m.relates_to": {"rel_type": "m.annotation", "event_id": message.message_id, "key": reaction}
            }
            self._reactions[slot] = await self._send(
                message.channel, "m.reaction", content, secrets.token_hex(10), "add a reaction"
            )
            return
        ours = self._reactions.pop(slot, None)
        found = [ours] if ours is not None else await self._our_reactions(message, reaction)
        for event_id in found:
            await self.delete(Conversation(message.channel), event_id)

    async def _our_reactions(self, message: MessageRef, reaction: str) -> list[str]:
        """Our reactions with this key on a message (after a restart we no longer hold their ids)."""
        data = await self._raw(
            "GET",
            f"/_matrix/client/v1/rooms/{quoted(message.channel)}/relations/{quoted(message.message_id)}"
            "/m.annotation/m.reaction",
            "read reactions",
            params={"limit": "100"},
        )
        me, key = self.user_id, reaction_key(reaction)
        return [
            e["event_id"]
            for e in data.get("chunk") or []
            if e.get("sender") == me
            and reaction_key(((e.get("content") or {}).get("m.relates_to") or {}).get("key", "")) == key
        ]

    async def typing(self, to: Conversation) -> None:
        try:
            response = await self._client.room_typing(to.channel, typing_state=True, timeout=TYPING_MS)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise translate_error(exc, "show typing") from exc
        self._checked(response, "show typing")

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        try:
            response = await self._client.send(
                "POST",
                f"/_matrix/media/v3/upload?{urllib.parse.urlencode({'filename': name})}",
                data,
                {"Authorization": f"Bearer {self._client.access_token}", "Content-Type": mime_type},
            )
            async with response:
                body = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise translate_error(exc, "upload a file") from exc
        if status >= 400 or not isinstance(body, dict) or "content_uri" not in body:
            raise MatrixApiError(
                f"could not upload {name}: the homeserver answered {status} ({body})",
                status=status,
                transient=status >= 500 or status == 429,
            )
        msgtype = "m.image" if mime_type.startswith("image/") else "m.file"
        content = {
            "msgtype": msgtype,
            "body": name,
            "filename": name,
            "url": body["content_uri"],
            "info": {"mimetype": mime_type, "size": len(data)},
            "m.mentions": NO_MENTIONS,
        }
        return await self._send(
            to.channel,
            "m.room.message",
            {**content, **_thread_relation(to)},
            secrets.token_hex(10),
            "share a file",
        )

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        """Matrix has no buttons: the prompt says which reaction means what, carries the
        approval in its content (so a reaction decides after a restart too), and wears the
        reactions itself, so people need only click them."""
        choices = {
            APPROVAL_REACTIONS[b.action_id]: b.action_id for b in buttons if b.action_id in APPROVAL_REACTIONS
        }
        how = ", ".join(f"{emoji} to {action}" for emoji, action in choices.items())
        words = " / ".join(choices.values())
        body = f"{text}\n\nReact {how} (or reply {words})."
        content = {
            "msgtype": "m.text",
            "body": body[:MESSAGE_LIMIT],
            "m.mentions": NO_MENTIONS,
            KEY_FIELD: key,
            APPROVAL_FIELD: {"id": buttons[0].value if buttons else "", "choices": choices},
        }
        event_id = await self._send(
            to.channel, "m.room.message", {**content, **_thread_relation(to)}, key, "ask for approval"
        )
        for emoji in choices:
            try:
                await self.react(MessageRef(to.channel, event_id), emoji, add=True)
            except MatrixApiError as exc:
                log.info("matrix: could not put %s on an approval prompt: %s", emoji, exc)
        return event_id

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        # The key is the transaction id: a repeat returns the same event, so the same thread.
        message_id = await self.post(Conversation(channel), text, key=key)
        return Conversation(channel, message_id)

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        """Our message carrying ``key`` (in its content), posted since ``since``: the recent
        timeline, newest first, a few pages at most."""
        event_filter = json.dumps({"senders": [self.user_id], "types": ["m.room.message"]})
        token: str | None = None
        for _ in range(FIND_PAGES):
            params = {"dir": "b", "limit": "100", "filter": event_filter}
            if token:
                params["from"] = token
            data = await self._raw(
                "GET",
                f"/_matrix/client/v3/rooms/{quoted(to.channel)}/messages",
                "look for a posted reply",
                params=params,
            )
            for event in data.get("chunk") or []:
                if (event.get("content") or {}).get(KEY_FIELD) == key:
                    return str(event["event_id"])
                if int(event.get("origin_server_ts") or 0) < since * 1000:
                    return None
            token = data.get("end")
            if not token:
                return None
        return None


async def connect(homeserver: str, token: str, token_env: str) -> ClientPort:
    """A client logged in with ``token`` (whoami says as whom), its direct chats read."""
    config = nio.AsyncClientConfig(max_limit_exceeded=0, max_timeouts=0, request_timeout=REQUEST_TIMEOUT_S)
    client = nio.AsyncClient(homeserver, config=config)
    client.access_token = token
    try:
        whoami = await client.whoami()
        if isinstance(whoami, nio.ErrorResponse):
            raise translate_error(whoami, "log in", token_env=token_env)
        client.restore_login(whoami.user_id, whoami.device_id or "", token)
        name = await client.get_displayname(whoami.user_id)
        display = name.displayname if isinstance(name, nio.ProfileGetDisplayNameResponse) else None
        port = ClientPort(client, display or "")
        await port.load_direct()
    except MatrixApiError:
        await client.close()
        raise
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        await client.close()
        raise translate_error(exc, f"reach the homeserver at {homeserver}") from exc
    return port


async def probe_whoami(homeserver: str, token: str, token_env: str) -> str:
    """Whoami with the token: ``netclaw doctor``'s check that it is valid and the server reachable."""
    port = await connect(homeserver, token, token_env)
    try:
        return f"logged in to {homeserver} as {port.user_id}"
    finally:
        await port.close()
