"""The data directory's lock: the CLI reads where the running daemon listens only while the
lock is held, and never blocks on or follows what it finds there."""

from __future__ import annotations

import os
from pathlib import Path

from netclaw.process.lock import URL_FILE, DataDirLock, running_url


def test_the_url_is_read_only_while_the_lock_is_held(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.acquire()
    assert running_url(tmp_path) is None  # not listening yet
    lock.listening("http://127.0.0.1:5199")
    assert running_url(tmp_path) == "http://127.0.0.1:5199"
    assert (tmp_path / "netclaw.lock").read_text().strip() == str(os.getpid())  # the pid alone
    lock.release()
    assert running_url(tmp_path) is None and not (tmp_path / URL_FILE).exists()
    (tmp_path / URL_FILE).write_text("http://127.0.0.1:1\n")  # a crashed run's
    assert running_url(tmp_path) is None


def test_a_pipe_or_a_link_in_place_of_the_files_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "netclaw.lock")
    assert running_url(tmp_path) is None  # returns at once: nothing waits on the pipe
    os.unlink(tmp_path / "netclaw.lock")
    lock = DataDirLock(tmp_path)
    lock.acquire()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("http://evil.example\n")
    os.symlink(elsewhere, tmp_path / URL_FILE)
    assert running_url(tmp_path) is None
    lock.release()
