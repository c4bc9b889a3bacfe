"""Private by default: a new data directory is 0700; the database, its WAL and shared
memory, the lock and the control token are 0600."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

from tests.conftest import DaemonHandle


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_directory_and_its_files_are_private(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon()
    assert handle.send("cli:private", "hello", wait=True).status_code == 200
    data_dir = handle.daemon.settings.data_dir
    assert mode(data_dir) == 0o700
    for name in ("netclaw.db", "netclaw.db-wal", "netclaw.db-shm", "netclaw.lock", "control.token"):
        assert mode(data_dir / name) == 0o600, name
