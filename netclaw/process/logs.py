r"""Logging set-up: one place decides the level, the format and what libraries may say.

Formats (``log.format``):

- ``text``: ``time LEVEL logger: message``; fields passed as ``extra=`` (``session``,
  ``turn``, ``event``, …) follow as ``key=value``.
- ``json``: one object per line, ``{"ts", "level", "logger", "msg", …extra fields,
  "exc"?}``, for log shippers.
- A line logged inside a traced turn's span (``telemetry.traces``) has the fields
  ``trace_id`` and ``span_id`` too (:class:`TraceIds`).
- Under systemd (``$JOURNAL_STREAM`` names our stderr) every line carries a ``<N>``
  priority prefix (``journalctl -p err`` finds errors, JSON lines included) and text lines
  no timestamp: the journal records both itself.

A failure to start is one ERROR line saying what is wrong, with the traceback at DEBUG
(:func:`log_startup_failure`), never a bare traceback on stderr (which the journal would
file at priority 6, info).

Whatever the format, a record is one line: control characters in a message or a field
(a session id, a header, a name a client sent) are written escaped (``\n`` as ``\x0a``),
and the lines of a traceback after the first are indented, so no client can forge a line
of the log (:func:`escape_controls`).

A warning or error that repeats (same logger and message template) more than ten times a
minute is dropped, and the next one says how many were (:class:`RepeatFilter`); INFO lines
such as the one per turn are never dropped.

Libraries (aiosqlite, discord.py's gateway, slack-sdk's socket, mcp and its httpx2, httpx) log at
``log.libraries`` (WARNING by default) whatever our own level is: at DEBUG they would
drown netclaw's lines.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import sys
from typing import Any, TextIO

from netclaw.errors import NetclawError
from netclaw.process import traces

LIBRARY_LOGGERS = (
    "aiosqlite",
    "asyncio",
    "discord",
    "httpx",
    "httpcore",
    "httpx2",  # the HTTP client of the mcp SDK: an INFO line per request (issue 28)
    "httpcore2",
    "mcp",
    "opentelemetry",  # the trace exporter: a line per failed export while a collector is down
    "client",  # the mcp SDK's client session logs under this bare name
    "slack_bolt",
    "slack_sdk",
    "adapters.slack.bolt",  # slack-bolt and slack-sdk log through these names of ours
    "adapters.slack.socket",
    "adapters.slack.web",
)
_PRIORITY = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}
# A LogRecord's own attributes; anything else on a record came in through ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


# C0, DEL, C1 (NEL among them) and the Unicode line and paragraph separators: what a
# terminal, a log viewer or journald could take for the end of a line or a command.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    r"""``text`` on one line: every control character written as ``\xNN`` (``\uNNNN``)."""
    return _CONTROL.sub(_escaped, text) if _CONTROL.search(text) else text


def _continuation(text: str) -> str:
    """A traceback (or stack) under a record's line: its own line breaks kept, every other
    control character escaped, each line indented (a line in column 0 starts a record)."""
    text = _CONTROL_BUT_NEWLINE.sub(_escaped, text)
    return "\n".join("  " + line for line in text.split("\n"))


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    def __init__(self, *, journald: bool = False) -> None:
        fmt = "%(name)s: %(message)s" if journald else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        super().__init__(fmt)
        self.journald = journald

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        first, newline, rest = text.partition("\n")  # the message is one line: the rest is a traceback
        fields = extra_fields(record)
        if fields:
            first += " " + " ".join(f"{k}={_flat(v)}" for k, v in fields.items())
        text = first + (newline + _continuation(rest) if newline else "")
        if self.journald:
            # Every line carries the priority, so a traceback's lines keep the record's level.
            prefix = f"<{_PRIORITY.get(record.levelname, 6)}>"
            text = "\n".join(prefix + line for line in text.split("\n"))
        return text


class JsonFormatter(logging.Formatter):
    def __init__(self, *, journald: bool = False) -> None:
        super().__init__()
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(extra_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        line = _JSON_RAW_CONTROL.sub(_json_escaped, json.dumps(entry, default=str, ensure_ascii=False))
        # The journal strips the prefix and keeps it as the entry's PRIORITY.
        return f"<{_PRIORITY.get(record.levelname, 6)}>{line}" if self.journald else line


# json.dumps escapes C0 but leaves DEL, C1 and U+2028/9 raw (valid JSON, yet a line break to
# some readers): escape those too.
_JSON_RAW_CONTROL = re.compile(r"[\x7f-\x9f\u2028\u2029]")


def _json_escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _flat(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else escape_controls(text)


def under_journald(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """True when ``stream`` is the journal's socket (systemd sets ``JOURNAL_STREAM=dev:ino``)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


class RepeatFilter(logging.Filter):
    """At most ``burst`` records of one kind (logger and message template) per ``window_s``;
    the next one let through after a quiet spell says how many were dropped. An attack
    or a fault that repeats must not turn into a log storm (a full disk of log)."""

    def __init__(self, burst: int = 10, window_s: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self._seen: dict[tuple[str, str], list[float]] = {}  # kind -> [window start, count, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:  # the turn line and its kind are meant to repeat
            return True
        key = (record.name, str(record.msg))
        now = record.created
        entry = self._seen.get(key)
        if entry is None or now - entry[0] >= self.window_s:
            dropped = int(entry[2]) if entry is not None else 0
            self._seen[key] = [now, 1.0, 0.0]
            if len(self._seen) > 10_000:  # bounded: forget the oldest kinds
                for old in list(self._seen)[:5_000]:
                    del self._seen[old]
            if dropped:
                record.msg = f"{record.msg} [{dropped} similar line(s) suppressed]"
            return True
        entry[1] += 1
        if entry[1] <= self.burst:
            return True
        entry[2] += 1
        return False


class TraceIds(logging.Filter):
    """A line logged inside a span (telemetry.traces) carries its ``trace_id`` and ``span_id``,
    so a log search and a trace find each other."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = traces.current_ids()
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


def configure_logging(
    level: str = "info", fmt: str = "text", libraries: str = "warning", *, stream: TextIO | None = None
) -> None:
    """Replace the root logger's handlers with one on ``stream`` (stderr) in ``fmt``."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.addFilter(RepeatFilter())
    handler.addFilter(TraceIds())
    journald = under_journald(stream)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(journald=journald))
    else:
        handler.setFormatter(TextFormatter(journald=journald))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(libraries.upper())


def log_lines(logger: logging.Logger, level: int, text: str) -> None:
    """netclaw's own message that spans lines (a config error naming several keys), one
    record per line: each reads as a line in a terminal and in the journal, where one
    record's line breaks would be escaped (``\\x0a``) against forged lines."""
    for line in text.splitlines() or [""]:
        logger.log(level, "%s", line)


def log_startup_failure(logger: logging.Logger, exc: BaseException) -> None:
    """Why the daemon could not start, as ERROR records (one per line of the reason); the
    traceback only at DEBUG, for developers."""
    what = str(exc) if isinstance(exc, NetclawError) else f"{type(exc).__name__}: {exc}"
    log_lines(logger, logging.ERROR, f"netclaw could not start: {what}")
    logger.debug("the start-up failure's traceback", exc_info=exc)
