"""Identifiers and short labels that come from outside: what they may contain (pure).

Every check matches the *whole* value (``fullmatch``): ``re.match`` with a pattern ending
in ``$`` also accepts a value with one trailing newline, and an id with a newline in it
splits log lines and reaches every route. Control characters (C0, DEL, C1 and the Unicode
line and paragraph separators) are refused in every identifier and label; free text (a
message, a reminder's text) may carry them, and the log formatter escapes them.
"""

from __future__ import annotations

import re

from netclaw.errors import InvalidInput

MAX_SESSION_ID_CHARS = 200
_BASE = r"[A-Za-z0-9][A-Za-z0-9:._\-]*"
# A session id is 1-200 characters: a plain id (letters, digits and : . _ -), or a
# sub-agent's ``agent:<root>/<n>[/<m>...]`` — the only place a ``/`` may appear, and only
# before a number (1-999999, no leading zero), so no id can smuggle a path or a dot-dot.
SESSION_ID = re.compile(
    rf"(?=.{{1,{MAX_SESSION_ID_CHARS}}}\Z)(?:{_BASE}|agent:{_BASE}(?:/[1-9][0-9]{{0,5}})+)"
)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = repr(session_id[:80]) if isinstance(session_id, str) else f"a {type(session_id).__name__}"
        raise InvalidInput(
            "session_id",
            f"invalid session id {shown}: use 1-{MAX_SESSION_ID_CHARS} characters from "
            "letters, digits and : . _ - (starting with a letter or digit); a sub-agent's id "
            "is agent:<parent>/<number>",
        )
    return session_id


def check_label(field: str, value: object, *, max_chars: int) -> str:
    """A short one-line string naming someone or something (a user id, a display name, a
    reminder's name): non-blank, at most ``max_chars``, no control characters, valid Unicode.
    Returned stripped; InvalidInput names ``field``."""
    if not isinstance(value, str) or not value.strip() or len(value) > max_chars:
        raise InvalidInput(field, f"'{field}' must be a non-empty string of at most {max_chars} characters")
    if CONTROL.search(value):
        raise InvalidInput(field, f"'{field}' must not contain control characters (line breaks, tabs…)")
    check_encodable(field, value)
    return value.strip()


def check_encodable(field: str, value: str) -> None:
    """JSON can carry lone surrogates ("\\ud800") that no UTF-8 store accepts: refuse them
    before anything is stored, rather than fail the write."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(field, f"'{field}' contains characters that are not valid Unicode") from exc
