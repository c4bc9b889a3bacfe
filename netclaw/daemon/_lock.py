"""One daemon per data directory: a lock file held for the process's life."""

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

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
