"""Hundreds of slow connections against a daemon with a low file-descriptor limit (as
under systemd's default): ``/healthz`` and the authenticated API keep answering, nothing
floods the log, and the dawdlers are shed."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Daemons, Setup
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow

NOFILE = 256
SLOW_CONNECTIONS = 600


def test_slow_clients_do_not_take_the_daemon_down(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    # `netclaw run` with RLIMIT_NOFILE lowered, as a unit with LimitNOFILE=256 would have it.
    argv = [
        sys.executable,
        "-c",
        "import resource, runpy, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
        f"sys.argv = ['netclaw', 'run', '--config', {str(site.config)!r}]; "
        "runpy.run_module('netclaw.cli', run_name='__main__')",
    ]
    daemon = daemons.spawn(site.config, site.data_dir, site.port, argv=argv).wait_ready()
    slow: list[socket.socket] = []
    try:
        for _ in range(SLOW_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", site.port), timeout=5)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
            slow.append(sock)
        for _ in range(10):
            started = time.monotonic()
            health = httpx.get(f"{daemon.base_url}/healthz", timeout=5)
            assert health.status_code == 200
            assert daemon.sessions() is not None  # authenticated API
            assert time.monotonic() - started < 4  # not the 15 s a request head may take
            time.sleep(0.1)  # pacing, not waiting: the probes spread over a second
        assert (
            daemon.post("cli:under-attack", "still there?", wait=True).json()["reply"] == "echo: still there?"
        )
    finally:
        for sock in slow:
            sock.close()
    log = daemon.stderr()
    assert len(log) < 100_000, f"{len(log)} bytes of log"
    assert "connection limit" in log
    assert "Too many open files" not in log
