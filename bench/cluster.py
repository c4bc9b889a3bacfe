"""Several nodes on one PostgreSQL: turns/s with 1, 2 and 3 nodes next to the SQLite single
node in the same run, per-node CPU per turn, and the failover time after SIGKILL.

Each node is a ``netclaw run`` subprocess on its own data dir and port; the scripted
provider is a process of its own; PostgreSQL is a throwaway server (fsync on). The load
is closed-loop: ``--sessions`` clients, each sending its next message (``?wait=1``) when
the last one is answered, spread round-robin over the nodes the way a load balancer
would, so most requests reach a node that does not own the session and are forwarded.
Three nodes run once more with sticky routing (each client always to the same node:
nothing forwarded), which splits the forwarding hop from three processes sharing the
cores.
CPU per turn is each node's /proc CPU over the run divided by the turns: on a 2-core
machine the nodes compete for the cores, so that — not turns/s — is what tells how it
scales on real hardware.

Failover: with three nodes, the owner of a session is SIGKILLed and a client keeps
sending that session's next message to a survivor; the time from the kill to the first
200 is one sample (then the node is started again). ``--kills`` samples.

Run from the repo root: ``python bench/cluster.py [--sessions 40] [--seconds 8] [--kills 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _common as c
import httpx
from _common import REPO_ROOT, figure, info, log
from _procstat import process_cpu
from _provider import ProviderProcess

sys.path.insert(0, str(REPO_ROOT))
from tests.postgres import PostgresServer

TOKEN = "bench-cluster-token-0123456789abcdef"
LEASE_S = 3.0
READY_S = 60.0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Node:
    def __init__(self, root: Path, name: str, provider_url: str, dsn: str | None) -> None:
        self.name = name
        self.port = _free_port()
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
            config["cluster"] = {"node_id": name, "advertise_url": self.url, "lease_s": LEASE_S}
        self.config_path = root / name / "netclaw.json"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")}
        self.env.update(BENCH_TOKEN=TOKEN, BENCH_DSN=dsn or "", PYTHONPATH=str(REPO_ROOT))
        self.log_path = root / name / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Node:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "netclaw.cli", "run", "--config", str(self.config_path)],
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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def nodes_running(root: Path, count: int, provider_url: str, dsn: str | None) -> Iterator[list[Node]]:
    nodes = [Node(root, f"n{i + 1}", provider_url, dsn) for i in range(count)]
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


async def closed_loop(urls: list[str], sessions: int, seconds: float, prefix: str, *, sticky: bool) -> int:
    """Turns completed in ``seconds`` by ``sessions`` clients, requests spread round-robin
    (or, ``sticky``, each client's always to the same node: no forwarding)."""
    done = 0
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=sessions * 2)
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60, limits=limits
    ) as client:

        async def one(i: int) -> None:
            nonlocal done
            n = 0
            while time.monotonic() < stop_at:
                url = urls[(i + (0 if sticky else n)) % len(urls)]
                answer = await client.post(
                    f"{url}/api/sessions/cli:{prefix}-{i}/messages",
                    params={"wait": "1"},
                    json={"text": f"m{n}"},
                )
                n += 1
                if answer.status_code == 200:
                    done += 1
                else:
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(one(i) for i in range(sessions)))
    return done


def throughput(
    root: Path,
    count: int,
    provider_url: str,
    dsn: str | None,
    args: argparse.Namespace,
    *,
    sticky: bool = False,
) -> tuple[float, float]:
    """(turns/s, CPU ms per turn summed over the nodes)."""
    label = f"{'pg' if dsn else 'sqlite'}-{count}{'-sticky' if sticky else ''}"
    with nodes_running(root / label, count, provider_url, dsn) as nodes:
        urls = [n.url for n in nodes]
        # The same sessions warm and measured: resident, code warm.
        asyncio.run(closed_loop(urls, args.sessions, 2.0, label, sticky=sticky))
        cpu0 = [n.cpu() for n in nodes]
        started = time.monotonic()
        turns = asyncio.run(closed_loop(urls, args.sessions, args.seconds, label, sticky=sticky))
        elapsed = time.monotonic() - started
        cpu = [n.cpu() - before for n, before in zip(nodes, cpu0, strict=True)]
    rate = turns / elapsed
    per_turn_ms = sum(cpu) / max(turns, 1) * 1000
    for node, spent in zip(nodes, cpu, strict=True):
        info(f"cpu_share_{label}_{node.name}", spent / max(sum(cpu), 1e-9) * 100, "%")
    log(f"{label}: {turns} turns in {elapsed:.1f}s, CPU {sum(cpu):.2f}s")
    return rate, per_turn_ms


def owner_of(dsn: str, session_id: str) -> str | None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT node_id FROM leases WHERE persistence_id = %s AND expires_at > clock_timestamp()",
            (session_id,),
        ).fetchone()
    return str(row[0]) if row else None


def failovers(root: Path, provider_url: str, dsn: str, kills: int) -> list[float]:
    samples: list[float] = []
    with (
        nodes_running(root / "failover", 3, provider_url, dsn) as nodes,
        httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client,
    ):
        for k in range(kills):
            session = f"cli:failover-{k}"
            assert (
                client.post(
                    f"{nodes[k % 3].url}/api/sessions/{session}/messages",
                    params={"wait": "1"},
                    json={"text": "hi"},
                ).status_code
                == 200
            )
            owner = next(n for n in nodes if n.name == owner_of(dsn, session))
            survivor = next(n for n in nodes if n is not owner)
            owner.kill()
            killed = time.monotonic()
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    answer = client.post(
                        f"{survivor.url}/api/sessions/{session}/messages",
                        params={"wait": "1"},
                        json={"text": "again"},
                    )
                    if answer.status_code == 200:
                        break
                time.sleep(0.05)
            samples.append(time.monotonic() - killed)
            log(f"failover {k + 1}/{kills}: {samples[-1]:.2f}s (killed {owner.name})")
            owner.start()  # waits for its previous run's leases to go quiet
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--kills", type=int, default=10)
    c.add_quick(parser, sessions=4, seconds=1.0, kills=1)
    args = c.apply_quick(parser.parse_args())
    log(f"machine load {c.machine_load()}")
    with c.temp_dir("netclaw-cluster-") as root, PostgresServer(fsync=True) as server:
        provider = ProviderProcess(root / "provider.log")
        provider.start()
        try:
            dsn = server.create_database()
            sqlite_rate, sqlite_cpu = throughput(root, 1, provider.base_url, None, args)
            results = {}
            for count in (1, 2, 3):
                results[count] = throughput(root, count, provider.base_url, server.create_database(), args)
            sticky = throughput(root, 3, provider.base_url, server.create_database(), args, sticky=True)
            samples = failovers(root, provider.base_url, dsn, args.kills)
        finally:
            provider.stop()
    info("machine_load", c.machine_load())
    info("turns_per_s_sqlite_1_node", sqlite_rate, "turns/s")
    info("cpu_per_turn_sqlite_1_node", sqlite_cpu, "ms")
    for count, (rate, cpu) in results.items():
        info(
            f"turns_per_s_pg_{count}_node", rate, "turns/s", f"{rate / sqlite_rate:.2f}x SQLite's single node"
        )
        info(f"cpu_per_turn_pg_{count}_node", cpu, "ms", "all nodes' CPU / turns")
    # PostgreSQL costs one node a network round trip per commit and per lease check; the
    # target is that it stays within a factor of 2 of the embedded journal, per turn.
    _, pg1_cpu = results[1]
    figure("cpu_per_turn_pg_vs_sqlite", pg1_cpu / sqlite_cpu, "x", "<= 2.0", pg1_cpu / sqlite_cpu <= 2.0)
    # Forwarding: 3 nodes do the same work with at most 1.5x the CPU per turn of one node.
    _, pg3_cpu = results[3]
    figure("cpu_per_turn_3_nodes_vs_1", pg3_cpu / pg1_cpu, "x", "<= 1.5", pg3_cpu / pg1_cpu <= 1.5)
    # The same three nodes with every client kept to one node (a session-affine balancer):
    # what is left of the difference is three processes sharing two cores, not forwarding.
    sticky_rate, sticky_cpu = sticky
    info("turns_per_s_pg_3_node_sticky", sticky_rate, "turns/s")
    info("cpu_per_turn_pg_3_node_sticky", sticky_cpu, "ms", "no request forwarded")
    hop = (pg3_cpu - sticky_cpu) / (2 / 3)  # two requests in three take the hop
    info("cpu_per_forwarding_hop", hop, "ms", "both nodes' share of one forwarded turn")
    ratio = pg3_cpu / sticky_cpu
    figure("cpu_per_turn_forwarded_vs_sticky", ratio, "x", "<= 1.25", ratio <= 1.25)
    p50, p99 = c.median(samples), c.percentile(samples, 99)
    limit = LEASE_S + 5
    figure("failover_p50", p50, "s", f"<= {limit:g} (lease_s {LEASE_S:g} + 5)", p50 <= limit)
    figure("failover_p99", p99, "s", f"<= {limit:g} (lease_s {LEASE_S:g} + 5)", p99 <= limit)


if __name__ == "__main__":
    main()
