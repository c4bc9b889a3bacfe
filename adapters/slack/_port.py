"""The :class:`~adapters.chat.ChatPort` over Slack's Web API (:class:`SlackPort`).

- Lost answers: a ``chat.postMessage`` whose answer was lost is not re-posted blindly.
  Each post carries message metadata with its idempotency key as a marker; after a lost
  answer the thread is searched for it (``conversations.replies``) and a found message
  is the post's result. The outbox finds a reply a crash may have posted the same way.
- Native streaming (``chat.startStream``) where the workspace has it; "typing" is the
  assistant thread status where the app is an AI app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from adapters.chat import Button, ChatApiError, Conversation, MessageRef, StreamingUnsupported
from adapters.slack._format import no_pings, to_mrkdwn
from adapters.slack._web import ResponseLost, SlackApi, SlackCallFailed, field_of

log = logging.getLogger("adapters.slack")

MESSAGE_LIMIT = 4000  # Slack's recommended maximum for one message's text
MARKER_EVENT_TYPE = "netclaw_reply"
MARKER_LOOKBACK_S = 120.0  # generous for clock skew between us and Slack
MAX_ASKERS = 5000
ACTION_PREFIX = "netclaw_"  # our buttons' action_ids: netclaw_approve, netclaw_deny, ...
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


class SlackPort:
    """:class:`~adapters.chat.ChatPort` over Slack's Web API. A conversation is a channel
    and a thread ``ts``; a message id is a ``ts``."""

    platform = "slack"
    message_limit = MESSAGE_LIMIT

    def __init__(self, api: SlackApi) -> None:
        self.api = api
        self.client = api.client
        self._with_buttons: set[str] = set()  # messages whose blocks an edit must replace
        self._no_status: bool = False  # the workspace refused assistant thread status once
        self._no_streaming: bool = False  # ... or chat.startStream
        self._askers: dict[tuple[str, str | None], tuple[str, str]] = {}  # conversation -> (team, user)

    def asked_by(self, to: Conversation, team: str | None, user: str) -> None:
        """Who is waiting for the answer in ``to``: a stream into a channel names them."""
        if team:
            self._askers.pop((to.channel, to.thread), None)
            self._askers[(to.channel, to.thread)] = (team, user)
            while len(self._askers) > MAX_ASKERS:
                self._askers.pop(next(iter(self._askers)))

    def escape(self, text: str) -> str:
        return to_mrkdwn(text)

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
            response = await self.api.call(
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
                response = await self.api.call_retrying(
                    "conversations.history",
                    self.client.conversations_history,
                    channel=to.channel,
                    oldest=f"{since:.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            else:
                response = await self.api.call_retrying(
                    "conversations.replies",
                    self.client.conversations_replies,
                    channel=to.channel,
                    ts=to.thread,
                    oldest=f"{since:.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            for message in field_of(response, "messages") or []:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if payload.get("marker") == marker:
                    if any(b.get("type") == "actions" for b in message.get("blocks") or []):
                        # Buttons posted before a restart: an edit must replace them too.
                        self._with_buttons.add(str(message["ts"]))
                    return str(message["ts"])
            cursor = (field_of(response, "response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return None
        return None

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        extra: dict[str, Any] = {}
        if message_id in self._with_buttons:  # the new text replaces the buttons too
            extra["blocks"] = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]
        await self.api.call(
            "chat.update", self.client.chat_update, channel=to.channel, ts=message_id, text=text, **extra
        )
        self._with_buttons.discard(message_id)

    async def delete(self, to: Conversation, message_id: str) -> None:
        try:
            await self.api.call("chat.delete", self.client.chat_delete, channel=to.channel, ts=message_id)
        except SlackCallFailed as exc:
            if exc.error != "message_not_found":
                raise

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        method = "reactions.add" if add else "reactions.remove"
        send = self.client.reactions_add if add else self.client.reactions_remove
        try:
            await self.api.call(
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
            await self.api.call(
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
            response = await self.api.call(
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
        await self.api.call(
            "chat.appendStream",
            self.client.chat_appendStream,
            channel=to.channel,
            ts=message_id,
            markdown_text=text,
        )

    async def stream_stop(self, to: Conversation, message_id: str, text: str, *, key: str) -> None:
        metadata = _marker(key)
        try:
            await self.api.call(
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

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        # files_upload_v2: get an upload URL, send the bytes, complete into the thread.
        try:
            response = await self.client.files_upload_v2(
                channel=to.channel, thread_ts=to.thread, filename=name, content=data, title=name
            )
        except SlackApiError as exc:
            raise SlackCallFailed("files.upload", str(field_of(exc.response, "error") or "failed")) from exc
        except (aiohttp.ClientError, TimeoutError, SlackClientError) as exc:
            raise ChatApiError(
                f"Slack file upload failed: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        files = field_of(response, "files") or [field_of(response, "file") or {}]
        return str(files[0].get("id", "")) if files else ""


def _marker(key: str) -> dict[str, Any]:
    """Message metadata carrying a post's idempotency key (looked for after a lost answer
    or a crash: :meth:`SlackPort.find_marker`)."""
    return {"event_type": MARKER_EVENT_TYPE, "event_payload": {"marker": key}}
