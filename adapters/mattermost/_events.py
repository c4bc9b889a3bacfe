"""What the Mattermost server sends, normalised (pure): a post's JSON (from a ``posted``
websocket event, where it arrives as a JSON string, or from a REST listing) as a
:class:`~adapters.mattermost._port.MattermostPost`, and the ids in session ids.

- A post whose ``type`` is set is a system message (joins, header changes): none of ours.
- The bot is mentioned when the event's ``mentions`` lists it, or the message says
  ``@<its username>``; the mention is taken out of what the model reads.
- A post from a bot account or an integration (``props.from_bot``, ``from_webhook``) is
  ``from_bot``: never a turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adapters.mattermost._port import MattermostFile, MattermostPost

PREFIX = "mattermost"
# Mattermost ids are 26 characters of a base32 alphabet (lowercase letters and digits).
ID = re.compile(r"[a-z0-9]{26}")
_SESSION = re.compile(rf"{PREFIX}:({ID.pattern})(?::({ID.pattern}))?")


def session_id_for(channel_id: str, root_id: str | None = None) -> str:
    """``mattermost:<channel>`` (a direct message channel) or ``mattermost:<channel>:<root>``
    (a thread). ValueError for something that is not a Mattermost id."""
    for value in (channel_id, root_id):
        if value is not None and not ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a Mattermost id (26 lowercase letters and digits)")
    return f"{PREFIX}:{channel_id}:{root_id}" if root_id else f"{PREFIX}:{channel_id}"


def ids_of(session_id: str) -> tuple[str, str | None] | None:
    """The channel and thread root of a session id :func:`session_id_for` made."""
    found = _SESSION.fullmatch(session_id)
    return (found.group(1), found.group(2)) if found is not None else None


def mentions_of(data: dict[str, Any]) -> set[str]:
    """The user ids a ``posted`` event says the post mentions (a JSON string list)."""
    raw = data.get("mentions")
    try:
        found = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return set()
    return {str(m) for m in found} if isinstance(found, list) else set()


def posted_of(event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A ``posted`` event's post (decoded from its JSON string) and its data; None for
    any other event or a malformed one."""
    if event.get("event") != "posted":
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    try:
        post = json.loads(data.get("post") or "")
    except (TypeError, ValueError):
        return None
    return (post, data) if isinstance(post, dict) else None


def _mention(username: str) -> re.Pattern[str]:
    # Mattermost usernames: letters, digits and . _ - ; a mention ends at anything else.
    return re.compile(rf"@{re.escape(username)}(?![A-Za-z0-9._-])", re.IGNORECASE)


def post_of(
    post: dict[str, Any],
    *,
    bot_id: str,
    username: str,
    channel_type: str = "",
    mentions: set[str] | None = None,
    sender_name: str = "",
) -> MattermostPost | None:
    """A post as the adapter sees it; None for system messages, deleted posts and posts
    without an id or channel."""
    post_id, channel = str(post.get("id") or ""), str(post.get("channel_id") or "")
    if not post_id or not channel or post.get("type") or post.get("delete_at"):
        return None
    props = post.get("props") if isinstance(post.get("props"), dict) else {}
    assert isinstance(props, dict)
    text = str(post.get("message") or "")
    pattern = _mention(username) if username else None
    mentioned = bot_id in (mentions or set()) or (pattern is not None and pattern.search(text) is not None)
    if pattern is not None:
        text = pattern.sub("", text)
    user = str(post.get("user_id") or "")
    root = str(post.get("root_id") or "") or None
    return MattermostPost(
        post_id=post_id,
        channel_id=channel,
        user_id=user,
        text=" ".join(text.split(" ")).strip(),
        create_at=int(post.get("create_at") or 0),
        root_id=root,
        channel_type=channel_type,
        mentioned=mentioned,
        from_self=user == bot_id,
        from_bot=str(props.get("from_bot")) == "true" or str(props.get("from_webhook")) == "true",
        sender_name=sender_name.removeprefix("@"),
        files=files_of(post),
    )


def files_of(post: dict[str, Any]) -> tuple[MattermostFile, ...]:
    """The files a post carries: their infos in ``metadata.files`` (the server fills it in),
    else bare ids."""
    metadata = post.get("metadata") if isinstance(post.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    infos = {str(f.get("id")): f for f in metadata.get("files") or [] if isinstance(f, dict)}
    found = []
    for file_id in post.get("file_ids") or []:
        info = infos.get(str(file_id), {})
        size = info.get("size")
        found.append(
            MattermostFile(
                file_id=str(file_id),
                name=str(info.get("name") or f"file-{file_id}"),
                mime_type=str(info.get("mime_type") or "application/octet-stream"),
                size=int(size) if isinstance(size, int) else None,
            )
        )
    return tuple(found)
