"""Log formats: text with fields, JSON lines, journald priorities; library noise."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from netclaw.config import load_settings
from netclaw.errors import ConfigError
from netclaw.process.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    escape_controls,
    under_journald,
)

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
TURN = {"session": "cli:a", "turn": 3, "event": "turn_completed", "outcome": "completed"}


def record(
    level: int = logging.INFO, msg: str = "cli:a: turn 3 completed", **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("netclaw.sessions", level, __file__, 1, msg, (), None)
    rec.__dict__.update(extra)
    return rec


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in ("aiosqlite", "discord"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def test_text_carries_the_fields() -> None:
    line = TextFormatter().format(record(**TURN))
    assert line.endswith(
        "netclaw.sessions: cli:a: turn 3 completed session=cli:a turn=3 event=turn_completed outcome=completed"
    )
    assert line[:4].isdigit()  # a timestamp first


def test_json_lines() -> None:
    entry = json.loads(JsonFormatter().format(record(**TURN, duration_s=1.25)))
    assert entry["level"] == "info" and entry["logger"] == "netclaw.sessions"
    assert entry["msg"] == "cli:a: turn 3 completed"
    assert entry["session"] == "cli:a" and entry["turn"] == 3 and entry["duration_s"] == 1.25
    assert entry["ts"].endswith("+00:00")


def test_json_carries_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter().format(rec))
    assert entry["level"] == "error" and "ValueError: boom" in entry["exc"]


def test_journald_lines_have_priorities_and_no_timestamp() -> None:
    formatter = TextFormatter(journald=True)
    assert formatter.format(record(logging.WARNING, "careful")) == "<4>netclaw.sessions: careful"
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    lines = formatter.format(rec).split("\n")
    assert lines[0] == "<3>x: failed" and lines[-1] == "<3>  ValueError: boom"
    assert all(line.startswith("<3>  ") for line in lines[1:])  # a traceback keeps the record's level


FORGED = "x\n2026-01-01 00:00:00,000 INFO netclaw.gateway: deleted\r\u2028\x85\x1b[31m\x7f\x00"


@pytest.mark.parametrize("journald", [False, True])
def test_text_lines_never_carry_control_characters_from_outside(journald: bool) -> None:
    rec = record(logging.INFO, "session %s deleted", session="x\nforged\x85", title=FORGED)
    rec.args = (FORGED,)
    line = TextFormatter(journald=journald).format(rec)
    assert "\n" not in line and not CONTROL.search(line)
    assert "session x\\x0a2026-01-01 00:00:00,000 INFO netclaw.gateway: deleted\\x0d\\u2028\\x85" in line
    assert "session=x\\x0aforged\\x85" in line and 'title="x\\n2026' in line


def test_a_traceback_cannot_forge_a_record() -> None:
    """An exception's message from outside: its lines stay under the record, indented."""
    try:
        raise ValueError("bad id\n2026-01-01 00:00:00,000 INFO netclaw.gateway: forged\x1b[2J")
    except ValueError:
        rec = logging.LogRecord(
            "netclaw.http.web", logging.ERROR, __file__, 1, "failed %s", ("a\nb",), sys.exc_info()
        )
    lines = TextFormatter().format(rec).split("\n")
    assert lines[0].endswith("ERROR netclaw.http.web: failed a\\x0ab")
    assert all(line.startswith("  ") for line in lines[1:])
    assert "  2026-01-01 00:00:00,000 INFO netclaw.gateway: forged\\x1b[2J" in lines
    assert not any(CONTROL.search(line) for line in lines)


def test_json_lines_escape_what_json_leaves_raw() -> None:
    rec = record(logging.INFO, "%s", session=FORGED)
    rec.args = (FORGED,)
    line = JsonFormatter().format(rec)
    assert "\n" not in line and not CONTROL.search(line)
    entry = json.loads(line)
    assert entry["msg"] == FORGED and entry["session"] == FORGED  # escaped, not lost


def test_escape_controls() -> None:
    assert escape_controls("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert escape_controls("a\tb\nc\u2029") == "a\\x09b\\x0ac\\u2029"


def test_journald_is_detected_by_the_stream_identity(tmp_path: Path) -> None:
    with open(tmp_path / "stream", "w") as stream, open(tmp_path / "other", "w") as other:
        st = os.fstat(stream.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert under_journald(stream, env)
        assert not under_journald(other, env)  # a redirected stderr is not the journal
        assert not under_journald(stream, {})


def test_configure_sets_levels_and_quiets_libraries() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", "warning", stream=stream)
    logging.getLogger("netclaw.x").debug("ours", extra={"session": "s"})
    logging.getLogger("aiosqlite").debug("executing")  # noise
    logging.getLogger("discord.gateway").info("heartbeat")  # noise
    logging.getLogger("httpx2").info(
        'HTTP Request: POST http://127.0.0.1/mcp "HTTP/1.1 200 OK"'
    )  # the mcp SDK's
    logging.getLogger("client").info("mcp client session chatter")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == ["ours"]


def test_an_invalid_level_names_the_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NETCLAW_LOG__LEVEL", "loud")
    with pytest.raises(ConfigError, match=r"log\.level"):
        load_settings(tmp_path / "none.json", explicit=False)
    monkeypatch.setenv("NETCLAW_LOG__LEVEL", "WARNING")
    assert load_settings(tmp_path / "none.json", explicit=False).log.level == "warning"


def test_a_repeating_line_is_let_through_a_few_times_then_counted() -> None:
    from netclaw.process.logs import RepeatFilter

    repeat = RepeatFilter(burst=3, window_s=60.0)
    start = 1000.0

    def at(t: float, msg: str = "accept failed: %s") -> logging.LogRecord:
        rec = record(logging.ERROR, msg)
        rec.created = t
        return rec

    passed = [repeat.filter(at(start + i * 0.01)) for i in range(1000)]
    assert passed.count(True) == 3
    assert repeat.filter(at(start + 1, "another kind"))  # other lines are not affected
    later = at(start + 61)
    assert repeat.filter(later) and "[997 similar line(s) suppressed]" in str(later.msg)
    turn_lines = [record(logging.INFO, "%s: turn %d completed") for _ in range(100)]
    assert all(repeat.filter(r) for r in turn_lines)  # INFO lines are never dropped
