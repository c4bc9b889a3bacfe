"""One real daemon (``netclaw run`` as a subprocess, logging at DEBUG to a file) serving
the control API and a second listener for the webhook routes, for the whole corpus."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import DaemonProcess, config_data, free_port, subprocess_env, write_json
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fuzz.routes import WEBHOOK_SECRET, webhook_config
from tests.fuzz.wire import Target


class FuzzDaemon:
    def __init__(self, process: DaemonProcess, target: Target) -> None:
        self.process = process
        self.target = target
        self._read = 0

    def new_log(self) -> str:
        """The daemon's log written since the last call, once it has gone quiet (a hang-up
        is noticed a moment after the client left)."""
        size, quiet_since, deadline = -1, time.monotonic(), time.monotonic() + 10
        while time.monotonic() < deadline:
            httpx.get(f"{self.process.base_url}/healthz", timeout=10)
            current = self.process.stderr_path.stat().st_size
            if current != size:
                size, quiet_since = current, time.monotonic()
            elif time.monotonic() - quiet_since > 0.5:
                break
            time.sleep(0.1)
        with self.process.stderr_path.open("rb") as log:
            log.seek(self._read)
            data = log.read()
        self._read += len(data)
        return data.decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzDaemon]:
    root = tmp_path_factory.mktemp("fuzz")
    with ScriptedOpenAIThread() as scripted:
        data_dir = root / "data"
        port, webhook_port = free_port(), free_port()
        config = config_data(
            data_dir,
            scripted.base_url,
            port,
            gateway={
                "host": "127.0.0.1",
                "port": port,
                "webhook_host": "127.0.0.1",
                "webhook_port": webhook_port,
            },
            webhooks=webhook_config(),
            session={"max_reminders": 1_000_000},
            log={"level": "debug"},
        )
        write_json(root / "netclaw.json", config)
        env = subprocess_env(FUZZ_ALERTS_SECRET=WEBHOOK_SECRET, FUZZ_CI_SECRET=WEBHOOK_SECRET)
        process = DaemonProcess(root / "netclaw.json", data_dir, port, root / "logs", env=env)
        try:
            process.wait_ready()
            token = (Path(data_dir) / "control.token").read_text(encoding="utf-8").strip()
            daemon = FuzzDaemon(process, Target("127.0.0.1", port, webhook_port, token, WEBHOOK_SECRET))
            daemon.new_log()  # the start-up lines are not the corpus's
            yield daemon
        finally:
            process.close()
