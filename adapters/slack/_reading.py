"""Reading a Slack conversation: who people are (``users.info``, cached), what was said
before a session started (``conversations.replies`` / ``history``), and the files people
share (with the bot token).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from adapters.chat import ChatApiError
from adapters.slack._web import SlackApi, field_of

log = logging.getLogger("adapters.slack")

NAME_TTL_S = 3600.0
MAX_NAMES = 5000


class SlackReader:
    def __init__(self, api: SlackApi) -> None:
        self.api = api
        self.client = api.client
        self._names: dict[str, tuple[str, float]] = {}  # user id -> (display name, expires at)

    async def user_name(self, user_id: str) -> str:
        """How people in the workspace see ``user_id`` (``users.info``, cached for an hour);
        the id itself when Slack will not say."""
        now = time.monotonic()
        hit = self._names.get(user_id)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            response = await self.api.call_retrying("users.info", self.client.users_info, user=user_id)
        except ChatApiError as exc:
            log.info("slack: no name for %s (%s)", user_id, exc)
            return hit[0] if hit is not None else user_id
        user = field_of(response, "user") or {}
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
                response = await self.api.call_retrying(
                    "conversations.replies",
                    self.client.conversations_replies,
                    channel=channel,
                    ts=thread,
                    limit=200,
                    cursor=cursor,
                )
                found += [m for m in field_of(response, "messages") or [] if _before(m, before)]
                cursor = (field_of(response, "response_metadata") or {}).get("next_cursor") or None
                if not cursor:
                    break
            return found[-limit:]
        response = await self.api.call_retrying(
            "conversations.history",
            self.client.conversations_history,
            channel=channel,
            latest=before,
            inclusive=False,
            limit=limit,
        )
        newest_first = [m for m in field_of(response, "messages") or [] if _before(m, before)]
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


def _before(message: Mapping[str, Any], ts: str) -> bool:
    try:
        return float(message.get("ts") or 0) < float(ts)
    except ValueError:
        return False
