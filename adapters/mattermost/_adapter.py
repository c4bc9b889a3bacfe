"""The Mattermost adapter: channels and threads ↔ sessions, the websocket, button presses.

Nothing here imports httpx or aiohttp's client: platform calls go through a
:class:`MattermostPort` and what the server sends is normalised by ``_events.py``. How
replies appear (streaming by edits, splitting, the 👀 reaction, approval buttons, files,
the outbox) is the shared :class:`~adapters.chat.ChatRenderer`'s.

- A post in an allowed channel that mentions the bot starts a thread under it; the thread
  is the session ``mattermost:<channel>:<root>``. A reply in a thread that is already a
  session goes on without a mention; a mention in a thread people started without the bot
  makes it a session (reading what was said there first). A direct message channel
  (``allow_dms``) is one session, ``mattermost:<channel>``.
- Posts arrive over the websocket (``posted`` events). After every (re)connect the posts
  made since the position — the newest post handled, saved in the bot's preferences —
  are read back over REST, so nothing said while the socket was down (or the daemon
  was) is lost; a post is admitted once whichever way it came
  (``identity=mattermost:<post id>``). The websocket is reconnected with the shared
  backoff (:class:`~netclaw.retry.Backoff`); a gap in its ``seq`` also reads back.
- Approvals are interactive message buttons whose presses the server posts to
  ``<actions_url>/mattermost/actions`` (:meth:`MattermostAdapter.action`), verified by the
  signature in their context (``_actions.py``); the person who pressed is answered alone
  (the action's ``ephemeral_text``), and the prompt is edited to show the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from functools import partial
from typing import Any

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
    with_file_names,
)
from adapters.mattermost._actions import BadPress, action_key, verify
from adapters.mattermost._config import MattermostConfig
from adapters.mattermost._events import ids_of, mentions_of, post_of, posted_of, session_id_for
from adapters.mattermost._port import (
    ACTIONS_PATH,
    EDIT_INTERVAL_S,
    SEEN_EMOJI,
    EventStream,
    MattermostApiError,
    MattermostPort,
    MattermostPost,
)
from netclaw.config import Settings
from netclaw.errors import AdapterError
from netclaw.gateway import ChatInput, Inbound
from netclaw.messages import PriorMessage
from netclaw.retry import Backoff
from netclaw.security.policy import ChatEvent, Place, dm_audience

log = logging.getLogger("adapters.mattermost")

DOCS = "docs/channels/mattermost.md"
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 30.0
CATCH_UP_MARGIN_MS = 5_000  # posts broadcast out of order by a few ms are still read back
ANSWER_PRESS_WITHIN_S = 5.0  # the server waits for the action's answer (its own timeout is longer)
# The position is saved at most this often (a burst of posts is one save, not a request per
# post on the listener's path); a crash loses at most this much of it, and what is read back
# again is answered once all the same (the post id is its inbound identity).
POSITION_SAVE_S = 2.0
SEEN_POSTS = 5_000  # post ids remembered, so a post read back and also delivered is handled once


def conversation_of(session_id: str) -> Conversation | None:
    ids = ids_of(session_id)
    return Conversation(ids[0], ids[1]) if ids is not None else None


class MattermostAdapter:
    """See the module docstring. ``port`` replaces the HTTP client (tests)."""

    name = "mattermost"

    def __init__(
        self,
        settings: Settings,
        gateway: ChatInput,
        port: MattermostPort | None = None,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        release_after_s: float | None = None,
        reconnect_first_s: float = RECONNECT_FIRST_S,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        section = MattermostConfig.of(settings)
        self.url = section.url
        self.token_env = section.token_env
        self.actions_url = section.actions_url
        self.options = RenderOptions.of(
            settings, edit_interval_s=edit_interval_s, reaction=SEEN_EMOJI, release_after_s=release_after_s
        )
        self.backoff = Backoff(reconnect_first_s, RECONNECT_MAX_S, jitter=0.2)
        self._port: MattermostPort | None = port
        self._injected = port is not None
        self.renderer: ChatRenderer | None = None
        self._asides: Asides[MattermostPost] = Asides()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._listener: asyncio.Task[None] | None = None
        self._owed: asyncio.Future[None] | None = None
        self._running = False
        self.position: int | None = None  # ms: the newest post handled
        self._saving: asyncio.Task[None] | None = None  # the position's next save
        self.reconnects = 0
        self._status = AdapterStatus("stopped", "not started")

    @property
    def config(self) -> MattermostConfig:
        """The current ``mattermost`` section (follows a reload); how it connects needs a restart."""
        return MattermostConfig.of(self.gateway.settings)

    # -- the Adapter protocol -------------------------------------------------------------------

    def check(self) -> None:
        try:
            if not self.url:
                raise AdapterError(
                    f"mattermost: no server is set (mattermost.url, e.g. https://chat.example.org); see {DOCS}"
                )
            if not self.actions_url:
                raise AdapterError(
                    "mattermost: mattermost.actions_url is not set: the URL at which the Mattermost "
                    f"server reaches this daemon, for approval buttons ({ACTIONS_PATH}); see {DOCS}"
                )
            self._token()
        except AdapterError as exc:
            self._status = AdapterStatus("disabled", str(exc))
            raise

    def routes(self) -> list[web.RouteDef]:
        return [web.post(ACTIONS_PATH, self.action)]

    async def probe(self) -> str:
        self.check()
        from adapters.mattermost._client import probe

        return await probe(self.url, self._token(), self.token_env)

    async def start(self) -> None:
        self.check()
        if not self._injected:
            from adapters.mattermost._client import connect_port

            self._status = AdapterStatus("starting", f"connecting to {self.url}")
            try:
                self._port = await connect_port(self.url, self._token(), self.token_env, self.actions_url)
            except MattermostApiError as exc:
                self._status = AdapterStatus("failed", str(exc))
                raise
        port = self._require_port()
        self.renderer = ChatRenderer(self.gateway, port, self.options)
        self._running = True
        try:
            self.position = await port.load_position()
            stream = await port.connect()
            if self.position is None:
                # The first start: answer none of the history; from here on nothing is missed.
                # The margin a read-back looks behind the position is added here, so it
                # never reaches back into that history.
                newest = max((c.last_post_at for c in await port.channels()), default=0)
                self.position = newest + CATCH_UP_MARGIN_MS
                await port.save_position(self.position)
            await self._catch_up()
        except MattermostApiError as exc:
            await self.stop()
            self._status = AdapterStatus("failed", str(exc))
            raise
        self.gateway.offer_threads("mattermost", self._open_thread)
        self._owed = asyncio.ensure_future(self.renderer.resume(conversation_of))
        self._listener = asyncio.create_task(self._listen(stream), name="mattermost-websocket")
        self._listener.add_done_callback(self._listening_ended)
        self._status = AdapterStatus("running", f"@{port.username}")
        log.info("mattermost: connected to %s as @%s", self.url, port.username)

    async def stop(self) -> None:
        self._running = False
        self.gateway.offer_threads("mattermost", None)
        task, self._listener = self._listener, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        saving, self._saving = self._saving, None
        if saving is not None and not saving.done():  # what it would have saved, now
            saving.cancel()
            with contextlib.suppress(BaseException):
                await saving
            await self._save_position()
        if self.renderer is not None:
            await self.renderer.stop()
        if not self._injected and self._port is not None:
            port, self._port = self._port, None
            with contextlib.suppress(Exception):
                await port.close()
        if self._status.state != "failed":
            self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- the websocket --------------------------------------------------------------------------

    async def _listen(self, stream: EventStream | None) -> None:
        """Events in order, for as long as the adapter runs; a lost connection is opened
        again with backoff, and what was posted meanwhile read back."""
        port = self._require_port()
        failures = 0
        while self._running:
            if stream is None:
                try:
                    stream = await port.connect()
                    await self._catch_up()
                except MattermostApiError as exc:
                    stream = None
                    if not exc.transient:
                        log.error("mattermost: cannot connect again: %s", exc)
                        self._status = AdapterStatus("failed", str(exc))
                        return
                    wait = exc.retry_after or self.backoff.delay(failures)
                    failures += 1
                    self._status = AdapterStatus("reconnecting", f"{exc}; again in {wait:.1f}s")
                    log.warning("mattermost: %s; connecting again in %.1fs", exc, wait)
                    await asyncio.sleep(wait)
                    continue
                failures = 0
                self.reconnects += 1
                self._status = AdapterStatus("running", f"@{port.username}")
                log.info("mattermost: connected again as @%s", port.username)
                if self.renderer is not None:
                    self.renderer.reconnected()
            try:
                event = await stream.receive()
            except MattermostApiError as exc:
                log.warning("mattermost: the websocket was lost (%s); connecting again", exc)
                self._status = AdapterStatus("reconnecting", str(exc))
                with contextlib.suppress(Exception):
                    await stream.close()
                stream = None
                continue
            if stream.missed():
                log.warning("mattermost: the websocket skipped events; reading back what was posted")
                await self._quietly_catch_up()
            try:
                await self._event(event)
            except Exception:  # one bad event must not stop the ones after it
                log.exception("mattermost: an event could not be handled: %s", str(event)[:300])

    def _listening_ended(self, task: asyncio.Task[None]) -> None:
        """A listener that died of an error leaves the channel failed: the supervisor starts
        it afresh (rather than a status saying "reconnecting" with nobody reconnecting)."""
        if task.cancelled() or not self._running:
            return
        exc = task.exception()
        if exc is not None:
            log.error("mattermost: the websocket listener failed: %r", exc)
            self._status = AdapterStatus(
                "failed", f"the websocket listener failed: {type(exc).__name__}: {exc}"
            )

    async def _event(self, event: dict[str, Any]) -> None:
        found = posted_of(event)
        if found is None:
            return
        raw, data = found
        port = self._require_port()
        kind = str(data.get("channel_type") or "")
        port.note_channel_type(str(raw.get("channel_id") or ""), kind)
        post = post_of(
            raw,
            bot_id=port.user_id,
            username=port.username,
            channel_type=kind,
            mentions=mentions_of(data),
            sender_name=str(data.get("sender_name") or ""),
        )
        if post is not None:
            await self._arrived(post)

    async def _quietly_catch_up(self) -> None:
        try:
            await self._catch_up()
        except MattermostApiError as exc:
            log.warning("mattermost: could not read back missed posts: %s", exc)

    async def _catch_up(self) -> None:
        """Handle the posts made since the position in the channels the bot answers in."""
        port, config = self._require_port(), self.config
        since = max((self.position or 0) - CATCH_UP_MARGIN_MS, 0)
        missed: list[MattermostPost] = []
        for channel in await port.channels():
            wanted = channel.channel_id in config.channels or (channel.type == "D" and config.allow_dms)
            if not wanted or channel.last_post_at <= since:
                continue
            for raw in await port.posts_since(channel.channel_id, since):
                post = post_of(raw, bot_id=port.user_id, username=port.username, channel_type=channel.type)
                if post is not None and post.create_at > since and post.post_id not in self._seen:
                    missed.append(post)
        for post in sorted(missed, key=lambda p: p.create_at):
            log.info("mattermost: reading back post %s in %s", post.post_id, post.channel_id)
            await self._arrived(post)

    async def _arrived(self, post: MattermostPost) -> None:
        """One post, from the websocket or read back: handled once, then the position saved."""
        if post.post_id in self._seen:
            return
        self._seen[post.post_id] = None
        while len(self._seen) > SEEN_POSTS:
            self._seen.popitem(last=False)
        if not post.from_self:
            try:
                await self.handle(post)
            except MattermostApiError as exc:
                log.warning("mattermost: post %s in %s not handled: %s", post.post_id, post.channel_id, exc)
        if post.create_at > (self.position or 0):
            self.position = post.create_at
            if not post.from_self and (self._saving is None or self._saving.done()):
                self._saving = asyncio.create_task(self._save_position(POSITION_SAVE_S))

    async def _save_position(self, after_s: float = 0.0) -> None:
        """Save the position (after ``after_s``, taking in the posts handled meanwhile)."""
        await asyncio.sleep(after_s)
        port, position = self._port, self.position
        if port is None or position is None:
            return
        try:
            await port.save_position(position)
        except MattermostApiError as exc:
            log.warning("mattermost: could not save the position: %s", exc)

    # -- posts --------------------------------------------------------------------------------

    async def handle(self, post: MattermostPost) -> str | None:
        """One incoming post. Returns the session id it was admitted to, or None."""
        renderer, port = self.renderer, self._require_port()
        if not self._running or renderer is None or post.from_self:
            return None
        kind = post.channel_type or await port.channel_type(post.channel_id)
        dm = kind == "D"
        try:
            if dm:
                session_id, target = session_id_for(post.channel_id), Conversation(post.channel_id)
            else:
                root = post.root_id or post.post_id
                session_id, target = (
                    session_id_for(post.channel_id, root),
                    Conversation(post.channel_id, root),
                )
        except ValueError as exc:
            log.warning("mattermost: post %s cannot be a session: %s", post.post_id, exc)
            return None
        known = not post.from_bot and post.root_id is not None and not dm and await self._knows(session_id)
        event = ChatEvent(
            platform="mattermost",
            channel_id=post.channel_id,
            user_id=post.user_id,
            is_dm=dm,
            mentioned=post.mentioned,
            thread_known=known,
            from_bot=post.from_bot,
        )
        permit = self.gateway.permit(event)
        if permit is None:
            if known and (post.text.strip() or post.files):
                self._asides.add(session_id, post)
            return None
        if not post.text.strip() and not post.files:
            return None
        earlier: list[MattermostPost] = []
        if post.root_id is not None and not known and not dm:
            earlier = await self._earlier(post)
        earlier += self._asides.take(session_id)
        files, refused = await fetch_files(
            [SharedFile(f.name, f.mime_type, f.size, partial(port.download, f.file_id)) for f in post.files],
            "mattermost",
        )
        if refused:
            await renderer.note(target, refused)
        if not post.text.strip() and not files:
            return None
        name = post.sender_name or await port.user_name(post.user_id)
        names = {m.user_id: m.sender_name or await port.user_name(m.user_id) for m in earlier}
        inbound = Inbound(
            session_id,
            post.text,
            user=post.user_id,
            identity=f"mattermost:{post.post_id}",
            user_name=name or None,
            prior=[
                PriorMessage(m.user_id, names[m.user_id], with_file_names(m.text, m.files)) for m in earlier
            ],
            files=files,
            # Memories stay in the channel its threads are in; a direct message channel is
            # only "team" when a user allowlist vetted who may write.
            place=Place(f"mattermost:{post.channel_id}", dm_audience(self.config) if dm else None),
        )
        # None: refused (noted), a redelivery already handled, or not followed (shutting down).
        return (
            session_id
            if await renderer.taken(permit, inbound, target, MessageRef(post.channel_id, post.post_id))
            else None
        )

    async def _earlier(self, post: MattermostPost) -> list[MattermostPost]:
        """What was said in the thread before the bot was called into it."""
        port = self._require_port()
        assert post.root_id is not None
        try:
            found = await port.thread(post.root_id)
        except MattermostApiError as exc:
            log.warning(
                "mattermost: the thread before %s not read (%s); the turn goes without", post.post_id, exc
            )
            return []
        earlier = []
        for raw in found:
            other = post_of(raw, bot_id=port.user_id, username=port.username)
            if other is None or other.post_id == post.post_id or other.create_at > post.create_at:
                continue
            if not other.from_self and (other.text.strip() or other.files):
                earlier.append(other)
        return earlier[-self.config.thread_context_messages :]

    # -- approvals ------------------------------------------------------------------------------

    async def action(self, request: web.Request) -> web.StreamResponse:
        """``POST /mattermost/actions``: a press on one of our buttons, forwarded by the
        server. Refused unless its context verifies; answered once decided, with what the
        presser alone should read."""
        renderer, port = self.renderer, self._port
        if not self._running or renderer is None or port is None:
            return web.json_response(
                {"error": "unavailable", "message": "the Mattermost channel is not running"}, status=503
            )
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(
                {"error": "invalid_request", "message": "the body is not JSON"}, status=400
            )
        try:
            press = verify(action_key(self._token()), body)
        except BadPress as exc:
            log.warning("mattermost: refused a button press: %s", exc)
            return web.json_response({"error": "forbidden", "message": str(exc)}, status=403)
        told: list[str] = []

        async def respond(text: str) -> None:
            told.append(text)

        port.mark_prompt(press.post_id)
        click = ButtonClick(
            action_id=press.action,
            value=press.value,
            user_id=press.user_id,
            message=MessageRef(press.channel_id, press.post_id),
            user_name=press.user_name,
            respond=respond,
        )
        deciding = asyncio.ensure_future(renderer.decide(click))
        try:
            await asyncio.wait_for(asyncio.shield(deciding), ANSWER_PRESS_WITHIN_S)
        except TimeoutError:
            log.warning("mattermost: deciding %s takes long; answered the press without waiting", press.value)
        return web.json_response({"ephemeral_text": "\n".join(told)} if told else {})

    # -- helpers --------------------------------------------------------------------------------

    async def _open_thread(self, channel: str, text: str, key: str, since: float) -> str:
        """A delivery target (a schedule's or a webhook route's ``deliver``): a channel id."""
        assert self.renderer is not None
        return await self.renderer.open_thread(
            channel, text, lambda c: session_id_for(c.channel, c.thread), key=key, since=since
        )

    def following(self) -> list[str]:
        return self.renderer.following() if self.renderer is not None else []

    async def _knows(self, session_id: str) -> bool:
        return await session_known(self.gateway, session_id, "mattermost")

    def _require_port(self) -> MattermostPort:
        if self._port is None:
            raise AdapterError("mattermost: the adapter is not started")
        return self._port

    def _token(self) -> str:
        return required_secret(self.token_env, what="bot token", key="mattermost.token_env", docs=DOCS)
