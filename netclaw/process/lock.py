"""One daemon per data directory: a lock file held for the process's life. It also says
where the daemon listens (:meth:`DataDirLock.listening`), so the CLI finds the running
daemon when the config names another port since (a changed ``gateway.port`` applies at the
next restart, not at a reload)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import TextIO

from netclaw.errors import DaemonError
from netclaw.process.system import ensure_writable_dir

URL_FILE = "netclaw.url"  # where the running daemon listens (written once it does)


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
        (self.path.parent / URL_FILE).unlink(missing_ok=True)  # a crashed run's: not where this one listens

    def listening(self, url: str) -> None:
        """Where this daemon serves the API, for :func:`running_url` (beside the lock, which
        holds the pid alone: ``kill -HUP "$(cat data/netclaw.lock)"`` reads it)."""
        if self._fh is None:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(self.path.parent / URL_FILE, flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"{url}\n")

    def release(self) -> None:
        if self._fh is not None:
            (self.path.parent / URL_FILE).unlink(missing_ok=True)
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def running_url(data_dir: Path) -> str | None:
    """The URL the daemon running on ``data_dir`` serves (it holds the lock), or None: none
    runs, it does not listen yet, or this user may not read its files."""
    lock = _open_regular(data_dir / "netclaw.lock")
    if lock is None:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: a daemon runs here
        found = _open_regular(data_dir / URL_FILE)
        if found is None:
            return None
        with os.fdopen(found, encoding="utf-8", errors="replace") as fh:
            url = fh.read(2048).strip()
        return url if url.startswith("http") else None
    except OSError:
        return None
    else:  # not held: nobody runs here (a crash left the files)
        fcntl.flock(lock, fcntl.LOCK_UN)
        return None
    finally:
        os.close(lock)


def _open_regular(path: Path) -> int | None:
    """A descriptor of ``path`` for reading when it is a regular file (never a link followed,
    never a pipe waited on), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd
