"""How commands say things: failures with ``--json`` as a JSON object on stdout carrying
the exit status; reminder times in their own zone, labelled; a 503's Retry-After."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from netclaw.cli import main
from netclaw.cli._admin import reminder_time
from netclaw.cli._output import fail
from netclaw.http.web import error_response


def test_a_failure_with_json_is_a_json_object_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    status = fail(argparse.Namespace(json=True), "daemon_not_running", "cannot reach it", 1, None)
    out, err = capsys.readouterr()
    assert status == 1
    assert json.loads(out) == {
        "error": {"code": "daemon_not_running", "message": "cannot reach it", "exit_status": 1}
    }
    assert err == "netclaw: cannot reach it\n"  # people still read it where errors go
    assert fail(argparse.Namespace(json=False), "x", "plain", 2) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "netclaw: plain\n"


def test_commands_fail_in_json_with_their_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.upper().startswith("NETCLAW_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    config = str(tmp_path / "netclaw.json")
    (tmp_path / "netclaw.json").write_text(
        json.dumps({"data_dir": "./data", "gateway": {"port": 9}})
    )  # nobody on 9
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "control.token").write_text("t\n")
    status = main(["sessions", "--json", "--config", config])
    out, _ = capsys.readouterr()
    error = json.loads(out)["error"]
    assert status == 1 == error["exit_status"] and error["code"] == "daemon_not_running"
    status = main(["sessions", "show", "--json", "--config", config])  # no session id: a usage error
    out, _ = capsys.readouterr()
    assert status == 2 == json.loads(out)["error"]["exit_status"]


def test_reminder_times_are_shown_in_their_zone_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    nine_berlin = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))).timestamp()
    assert reminder_time(nine_berlin, "Europe/Berlin") == "2026-12-01 09:00 CET (Europe/Berlin)"
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert reminder_time(nine_berlin, "UTC") == "2026-12-01 08:00 UTC"
        assert reminder_time(None, "UTC") == "never again"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_every_503_says_when_to_retry() -> None:
    assert error_response(503, "journal_error", "disk full").headers["Retry-After"] == "5"
    assert error_response(503, "owned_elsewhere", "moving", retry_after=12.2).headers["Retry-After"] == "13"
    assert error_response(503, "x", "y", retry_after=0.01).headers["Retry-After"] == "1"
    assert "Retry-After" not in error_response(400, "bad", "no").headers


def test_a_wrong_option_gets_the_usage_of_its_own_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["sessions", "--bogus"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("usage: netclaw sessions ") and "unrecognized arguments: --bogus" in err


def test_a_bad_duration_names_the_option_a_person_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no daemon needed: refused before anything is sent
    for option in ("--in", "--every"):
        assert main(["reminders", "add", "cli:x", option, "5x", "stretch"]) == 1
        err = capsys.readouterr().err
        assert f"'{option}' must be seconds or a duration" in err and "_s'" not in err, err


def test_output_piped_into_a_reader_that_stopped_is_no_traceback(tmp_path: Path) -> None:
    # `netclaw … | head`: the reader went away before netclaw wrote.
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "netclaw.cli", "channels"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


def test_every_option_and_argument_says_what_it_is_for() -> None:
    import argparse

    from netclaw.cli import _parser

    silent = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:  # noqa: SLF001 - argparse keeps them nowhere public
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for sub, child in action.choices.items():
                    walk(child, f"{name} {sub}")
            elif action.help is None and not isinstance(action, argparse._HelpAction):  # noqa: SLF001
                silent.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(_parser(), "netclaw")
    assert not silent, f"no help text: {silent}"
