"""Matrix events as the adapter sees them: the client-server API's JSON normalised (pure;
no library — ``_client.py`` hands the events' raw JSON here).

- :func:`room_events`: a joined room's timeline of one sync, in order: messages and
  reactions. History a join brings along (the events before the bot's own join) is not
  for answering: only what came after it is kept.
- :func:`message_of`: text, thread, mention, files of one ``m.room.message``. Edits are
  not new messages; ``m.notice`` is what bots send (never a turn).
- :func:`invite_of`: an invite from its stripped state: who, direct or not, encrypted.
- :func:`approval_of`: the approval a prompt of ours asks for, from its content.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from adapters.matrix._port import MatrixFile, MatrixInvite, MatrixMessage, MatrixReaction, RoomEvent

APPROVAL_FIELD = "org.netclaw.approval"  # in a prompt's content: {"id": ..., "choices": {emoji: action}}
KEY_FIELD = "org.netclaw.key"  # in each of our posts' content: its idempotency key (the outbox finds it)
FILE_TYPES = frozenset({"m.file", "m.image", "m.audio", "m.video"})
_VARIATION = re.compile("[\ufe0e\ufe0f]")

NameOf = Callable[[str], str]


class RoomNames:
    """Members' display names per room, learnt from the member events syncs carry."""

    def __init__(self) -> None:
        self._rooms: dict[str, dict[str, str | None]] = {}

    def learn(self, room_id: str, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            user = event.get("state_key")
            if event.get("type") == "m.room.member" and isinstance(user, str):
                name = _dict(event.get("content")).get("displayname")
                self.remember(room_id, user, name if isinstance(name, str) else None)

    def remember(self, room_id: str, user: str, name: str | None) -> None:
        self._rooms.setdefault(room_id, {})[user] = name or None

    def known(self, room_id: str) -> set[str]:
        return set(self._rooms.get(room_id, {}))

    def name(self, room_id: str, user: str) -> str | None:
        return self._rooms.get(room_id, {}).get(user)

    def shown(self, room_id: str, user: str) -> str:
        """How clients show ``user`` in the room: the display name, else the id."""
        return self.name(room_id, user) or user


def reaction_key(key: str) -> str:
    """An emoji as compared: clients differ in variation selectors (👍 vs 👍️)."""
    return _VARIATION.sub("", key)


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def encrypted_room(events: Iterable[Mapping[str, Any]]) -> bool:
    """Does this timeline or state say the room is end-to-end encrypted?"""
    return any(e.get("type") in ("m.room.encryption", "m.room.encrypted") for e in events)


def room_events(
    timeline: list[Mapping[str, Any]],
    room_id: str,
    me: str,
    my_names: Iterable[str],
    *,
    is_dm: bool,
    name_of: NameOf,
) -> list[RoomEvent]:
    """The messages and reactions of a joined room's timeline, oldest first, without the
    history the bot's own join brought along."""
    start = 0
    for index, event in enumerate(timeline):
        if joined_now(event, me):
            start = index + 1
    names = [n for n in my_names if n]
    found: list[RoomEvent] = []
    for event in timeline[start:]:
        kind = event.get("type")
        if kind == "m.room.message":
            message = message_of(event, room_id, me, names, is_dm=is_dm, name_of=name_of)
            if message is not None:
                found.append(message)
        elif kind == "m.reaction":
            reaction = reaction_of(event, room_id, me, name_of=name_of)
            if reaction is not None:
                found.append(reaction)
    return found


def joined_now(event: Mapping[str, Any], me: str) -> bool:
    """Is this the bot's own join (not a rename of a member already in)?"""
    if event.get("type") != "m.room.member" or event.get("state_key") != me:
        return False
    before = _dict(_dict(event.get("unsigned")).get("prev_content")).get("membership")
    return _dict(event.get("content")).get("membership") == "join" and before != "join"


def message_of(
    event: Mapping[str, Any],
    room_id: str,
    me: str,
    my_names: Iterable[str] = (),
    *,
    is_dm: bool = False,
    name_of: NameOf | None = None,
) -> MatrixMessage | None:
    """One ``m.room.message`` as the adapter sees it; None for edits, redacted or empty ones."""
    content = _dict(event.get("content"))
    event_id, sender = _str(event.get("event_id")), _str(event.get("sender"))
    msgtype = _str(content.get("msgtype"))
    if not content or not event_id or not sender or not msgtype:
        return None
    relation = _dict(content.get("m.relates_to"))
    if relation.get("rel_type") == "m.replace":
        return None  # an edit of an earlier message, not a new one
    thread_root = _str(relation.get("event_id")) if relation.get("rel_type") == "m.thread" else ""
    reply_to = _str(_dict(relation.get("m.in_reply_to")).get("event_id"))
    if thread_root and relation.get("is_falling_back"):
        reply_to = ""  # a thread's fallback reply, not a reply to that message
    body = _str(content.get("body"))
    if reply_to:
        body = _without_reply_fallback(body)
    files: tuple[MatrixFile, ...] = ()
    if msgtype in FILE_TYPES:
        url = _str(content.get("url"))  # an encrypted file has "file" instead: not readable
        name = _str(content.get("filename")) or body or "file"
        info = _dict(content.get("info"))
        size = info.get("size")
        if url.startswith("mxc://"):
            files = (
                MatrixFile(
                    name,
                    url,
                    _str(info.get("mimetype")) or "application/octet-stream",
                    size if isinstance(size, int) else None,
                ),
            )
        # A caption is the body when a filename is given too (MSC2530); else the body is the name.
        body = body if content.get("filename") and body != content.get("filename") else ""
    mentioned = mentions(content, me, my_names)
    names = list(my_names)
    return MatrixMessage(
        event_id=event_id,
        room_id=room_id,
        sender=sender,
        text=strip_mention(body, me, names) if mentioned else body.strip(),
        thread_root=thread_root or None,
        reply_to=reply_to or None,
        mentioned=mentioned,
        from_self=sender == me,
        from_bot=msgtype == "m.notice",
        sender_name=name_of(sender) if name_of is not None else "",
        is_dm=is_dm,
        files=files,
        ts=event.get("origin_server_ts") if isinstance(event.get("origin_server_ts"), int) else 0,  # type: ignore[arg-type]
    )


def mentions(content: Mapping[str, Any], me: str, my_names: Iterable[str] = ()) -> bool:
    """Is the bot mentioned? ``m.mentions`` decides when the client sent it (an explicit
    list: quoting the bot's name is no mention); older clients: its id or a link to it in
    the text, or its display name starting the message (``netclaw: hi``)."""
    said = content.get("m.mentions")
    if isinstance(said, dict):
        users = said.get("user_ids")
        return isinstance(users, list) and me in users
    body = _str(content.get("body"))
    if me in body or f"matrix.to/#/{me}" in _str(content.get("formatted_body")):
        return True
    lowered = body.lstrip().lower()
    return any(
        lowered.startswith(name.lower()) and _ends_name(lowered, len(name)) for name in my_names if name
    )


def _ends_name(text: str, at: int) -> bool:
    return at == len(text) or not (text[at].isalnum() or text[at] == "_")


def strip_mention(body: str, me: str, my_names: Iterable[str] = ()) -> str:
    """The text without the bot's id and a leading ``<display name>:`` (as clients write a mention)."""
    text = body.replace(me, "").strip()
    for name in sorted((n for n in my_names if n), key=len, reverse=True):
        if text.lower().startswith(name.lower()) and _ends_name(text.lower(), len(name)):
            text = text[len(name) :]
            break
    return text.lstrip(":, ").strip()


def _without_reply_fallback(body: str) -> str:
    """A reply's body without the quoted original clients put before it (``> <@a:b> …``)."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()


def reaction_of(
    event: Mapping[str, Any], room_id: str, me: str, *, name_of: NameOf | None = None
) -> MatrixReaction | None:
    relation = _dict(_dict(event.get("content")).get("m.relates_to"))
    target, key = _str(relation.get("event_id")), _str(relation.get("key"))
    event_id, sender = _str(event.get("event_id")), _str(event.get("sender"))
    if relation.get("rel_type") != "m.annotation" or not (target and key and event_id and sender):
        return None
    return MatrixReaction(
        event_id=event_id,
        room_id=room_id,
        sender=sender,
        target=target,
        key=reaction_key(key),
        from_self=sender == me,
        sender_name=name_of(sender) if name_of is not None else "",
    )


def invite_of(room_id: str, invite_state: Iterable[Mapping[str, Any]], me: str) -> MatrixInvite | None:
    """The invite of the bot to a room, from the stripped state the invite carries."""
    state = list(invite_state)
    for event in state:
        content = _dict(event.get("content"))
        if (
            event.get("type") == "m.room.member"
            and event.get("state_key") == me
            and content.get("membership") == "invite"
        ):
            return MatrixInvite(
                room_id=room_id,
                inviter=_str(event.get("sender")),
                is_direct=content.get("is_direct") is True,
                encrypted=encrypted_room(state),
            )
    return None


def approval_of(content: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(approval id, {emoji: action}) of one of our approval prompts; None for anything else."""
    marker = _dict(content.get(APPROVAL_FIELD))
    approval_id = _str(marker.get("id"))
    choices = {
        reaction_key(k): v for k, v in _dict(marker.get("choices")).items() if isinstance(v, str) and k
    }
    return (approval_id, choices) if approval_id and choices else None


def thread_of(content: Mapping[str, Any]) -> str | None:
    """The thread root an event of ours was posted in, if any."""
    relation = _dict(content.get("m.relates_to"))
    return _str(relation.get("event_id")) or None if relation.get("rel_type") == "m.thread" else None
