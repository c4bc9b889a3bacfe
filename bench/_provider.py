"""The scripted OpenAI-compatible provider as a separate process, for the benchmarks.

``python -m tests.fakes.scripted_openai --port 0`` started from the repo root (so
``tests.fakes`` imports); its ``LISTENING <url>`` line gives the base URL. Running it in its
own process keeps its CPU off the daemon's GIL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _common import REPO_ROOT


class ProviderProcess:
    """``python -m tests.fakes.scripted_openai --port 0``, started from the repo root."""

    def __init__(
        self,
        log_path: Path,
        module: str = "tests.fakes.scripted_openai",
        args: tuple[str, ...] = ("--port", "0"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        # Or another fake that prints the same LISTENING line (tests.fakes.otlp_receiver, no args).
        self.module = module
        self.args = args
        self.env = {**os.environ, **env} if env else None  # added to this process's environment
        self.proc: subprocess.Popen[str] | None = None
        self._log: Any = None
        self.base_url = ""
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 20.0) -> ProviderProcess:
        self._log = open(self.log_path, "w")  # noqa: SIM115  (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env=self.env,
            text=True,
        )
        found: list[str] = []

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith("LISTENING "):
                    found.append(line.split()[1])
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not found:
            self.stop()
            tail = self.log_path.read_text()[-2000:] if self.log_path.exists() else ""
            raise RuntimeError(f"{self.module} did not start within {timeout}s:\n{tail}")
        self.base_url = found[0]
        self.port = int(self.base_url.rsplit(":", 1)[1].split("/")[0])
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
