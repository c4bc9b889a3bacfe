"""The nodes of a cluster benchmark: ``netclaw run`` subprocesses on one PostgreSQL, each
on its own data dir and port (kept across restarts), and what the database says about
them (helpers for bench/cluster.py, not a benchmark itself)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from _common import REPO_ROOT, free_port
from _procstat import process_cpu

TOKEN = "bench-cluster-token-0123456789abcdef"
LEASE_S = 3.0
READY_S = 60.0


class Node:
    def __init__(self, root: Path, name: str, provider_url: str, dsn: str | None, **cluster: Any) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data_dir = root / name / "data"
        config: dict[str, Any] = {
            "data_dir": str(data_dir),
            "providers": {
                "local": {"type": "openai", "base_url": provider_url, "timeout_s": 30, "max_retries": 2}
            },
            "models": {"main": {"provider": "local", "model": "scripted", "context_window": 32768}},
            "gateway": {"host": "127.0.0.1", "port": self.port, "control_token_env": "BENCH_TOKEN"},
            "tools": {"workspace_dir": str(root / name / "workspace")},
            "log": {"level": "warning"},
        }
        if dsn is not None:
            config["journal"] = {"backend": "postgres", "dsn_env": "BENCH_DSN"}
            config["cluster"] = {"node_id": name, "advertise_url": self.url, "lease_s": LEASE_S, **cluster}
        self.config_path = root / name / "netclaw.json"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")}
        self.env.update(BENCH_TOKEN=TOKEN, BENCH_DSN=dsn or "", PYTHONPATH=str(REPO_ROOT))
        self.log_path = root / name / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, launcher: list[str] | None = None) -> Node:
        """Start (again), and wait until /healthz says ok. ``launcher`` runs netclaw some
        other way (tests/e2e/next_release.py: the next release)."""
        command = launcher or [sys.executable, "-m", "netclaw.cli"]
        self.proc = subprocess.Popen(
            [*command, "run", "--config", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=REPO_ROOT,
        )
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"node {self.name} not ready in {READY_S:g}s")

    def cpu(self) -> float:
        assert self.proc is not None
        return process_cpu(self.proc.pid)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            answer = httpx.get(f"{self.url}/healthz", timeout=2)
            return answer.status_code, answer.json()
        except (httpx.HTTPError, ValueError):
            return 0, {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def nodes_running(
    root: Path, count: int, provider_url: str, dsn: str | None, **cluster: Any
) -> Iterator[list[Node]]:
    nodes = [Node(root, f"n{i + 1}", provider_url, dsn, **cluster) for i in range(count)]
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def owner_of(dsn: str, session_id: str) -> str | None:
    return owners(dsn).get(session_id)


def owners(dsn: str) -> dict[str, str]:
    """Session → the node holding its live lease."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT persistence_id, node_id FROM leases WHERE expires_at > clock_timestamp()"
            " AND persistence_id NOT LIKE 'role:%'"
        ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def held_by(dsn: str) -> Counter[str]:
    return Counter(owners(dsn).values())
