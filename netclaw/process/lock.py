"""One daemon per data directory: a lock file held for the process's life. It also says
where the daemon listens (:meth:`DataDirLock.listening`), so the CLI finds the running
daemon when the config names another port since (a changed ``gateway.port`` applies at the
next restart, not at a reload)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TextIO

from netclaw.errors import DaemonError
from netclaw.process.system import ensure_writable_dir


class DataDirLock:
    """One daemon per data_dir: two writers would corrupt the journal's sequence."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "netclaw.lock"
        self._fh: TextIO | None = None

    def acquire(self) -> None:
        ensure_writable_dir("data_dir", self.path.parent)  # a new one is private (0700)
        fh = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            raise DaemonError(
                f"another netclaw daemon is already using {self.path.parent} (lock {self.path})"
            ) from exc
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def listening(self, url: str) -> None:
        """Where this daemon serves the API, for :func:`running_url`."""
        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()
            self._fh.write(f"{os.getpid()}\n{url}\n")
            self._fh.flush()

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def running_url(data_dir: Path) -> str | None:
    """The URL the daemon running on ``data_dir`` serves (it holds the lock), or None: none
    runs, it does not listen yet, or this user may not read its lock file."""
    path = data_dir / "netclaw.lock"
    try:
        fh = path.open("r", encoding="utf-8")
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a daemon runs here, and its file is current
            lines = fh.read().splitlines()
            return lines[1] if len(lines) > 1 and lines[1].startswith("http") else None
        except OSError:
            return None
        fcntl.flock(fh, fcntl.LOCK_UN)  # not held: nobody runs here (a crash left the file)
        return None
