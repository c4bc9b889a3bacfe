"""Matrix ids in netclaw session ids, reversibly (pure).

A session id is ``<channel>:<place>[:<conversation>]`` and the core splits it on ``:``
(the memory scope is ``matrix:<place>``), but Matrix ids carry colons and characters a
session id may not (``!room:example.org``, ``$event``; rooms of version 12 are
``!<url-safe base64>``, with ``_`` and ``-``). So each id is written as one component:
its sigil (``!`` a room, ``$`` an event) dropped, letters, digits, ``.`` and ``-`` kept,
every other byte of its UTF-8 as ``_XX`` (hex). Nothing is dropped, so the id reads back
exactly (the homeserver suffix stays: two servers may use the same local part)::

    !abc:example.org          → matrix:abc_3Aexample.org
    thread $Xy_z under it     → matrix:abc_3Aexample.org:Xy_5Fz

A room's session is its direct chat; a thread's is ``matrix:<room>:<root event>``.
Speakers stay as Matrix writes them (``matrix:@alice:example.org``): roles split a
speaker only at its first colon, so a member is written the way people know the id.
"""

from __future__ import annotations

import re

from netclaw.identifiers import MAX_SESSION_ID_CHARS

PREFIX = "matrix"
_KEEP = re.compile(r"[A-Za-z0-9.\-]")
_ENCODED = re.compile(r"(?:[A-Za-z0-9.\-]|_[0-9A-F]{2})+")


def encode(matrix_id: str, sigil: str) -> str:
    """``!abc:example.org`` (sigil ``!``) → ``abc_3Aexample.org``. ValueError for an id
    without its sigil or with nothing after it."""
    if not matrix_id.startswith(sigil) or len(matrix_id) == 1:
        raise ValueError(f"{matrix_id!r} is not a Matrix id starting with {sigil!r}")
    out = []
    for char in matrix_id[1:]:
        if _KEEP.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"_{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def decode(component: str, sigil: str) -> str:
    """The inverse of :func:`encode`; ValueError for a component it cannot have made."""
    if not _ENCODED.fullmatch(component):
        raise ValueError(f"{component!r} is not an encoded Matrix id")
    raw = bytearray()
    index = 0
    while index < len(component):
        if component[index] == "_":
            raw.append(int(component[index + 1 : index + 3], 16))
            index += 3
        else:
            raw.extend(component[index].encode())
            index += 1
    try:
        return sigil + raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{component!r} is not an encoded Matrix id") from exc


def session_id_for(room_id: str, thread_root: str | None = None) -> str:
    """``matrix:<room>`` (a direct chat) or ``matrix:<room>:<thread root>``. ValueError when
    the ids are not Matrix ids, or too long for a session id."""
    session = f"{PREFIX}:{encode(room_id, '!')}"
    if thread_root is not None:
        session += f":{encode(thread_root, '$')}"
    if len(session) > MAX_SESSION_ID_CHARS:
        raise ValueError(f"the room and thread ids are too long for a session id ({len(session)} characters)")
    return session


def place_of(room_id: str) -> str:
    """The memory scope of a room's sessions: ``matrix:<room>``."""
    return f"{PREFIX}:{encode(room_id, '!')}"


def conversation_ids(session_id: str) -> tuple[str, str | None] | None:
    """(room id, thread root or None) of a Matrix session id; None for anything else."""
    parts = session_id.split(":")
    if parts[0] != PREFIX or len(parts) not in (2, 3):
        return None
    try:
        room = decode(parts[1], "!")
        thread = decode(parts[2], "$") if len(parts) == 3 else None
    except ValueError:
        return None
    return room, thread
