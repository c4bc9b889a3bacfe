"""Start-up time of the daemon with 0, 100 and 1,000 sessions in the warm-restart manifest.

Each round makes N sessions through a real daemon (one turn each against the scripted
provider in its own process), stops it gracefully (which writes the manifest of the N
active sessions), then times ``Daemon.start()`` — migrations, journal, memory, provider,
the manifest's sessions recovered 16 at a time, HTTP listening — until it returns (the
moment ``READY=1`` is sent). The reference, in the same round, is a cold start of the same
data (the manifest removed): what warming costs on top.

Run from the repo root: ``python bench/warm_start.py [--sizes 0,100,1000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import add_quick, apply_quick, daemon_settings, figure, info, machine_load, median
from _provider import ProviderProcess

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound

TARGETS_MS = {0: 500.0, 100: 1000.0, 1000: 3000.0}


def settings(data_dir: Path, base_url: str) -> Settings:
    config: Settings = daemon_settings(data_dir, base_url, session={"max_resident_sessions": 2000})
    return config


def make_sessions(config: Settings, count: int) -> None:
    daemon = Daemon(config)
    daemon.start()
    try:
        assert daemon.io is not None and daemon.gateway is not None
        gateway = daemon.gateway

        async def fill() -> None:
            limit = asyncio.Semaphore(50)

            async def one(i: int) -> None:
                async with limit:
                    await gateway.intake.submit(Inbound(f"cli:warm-{i:04d}", f"hello number {i}"), wait=True)

            await asyncio.gather(*(one(i) for i in range(count)))

        daemon.io.run(fill(), 600)
    finally:
        daemon.stop()  # graceful: the manifest lists every resident session


def manifest_size(config: Settings) -> int:
    conn = sqlite3.connect(config.database_path)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM warm_manifest").fetchone()[0])
    finally:
        conn.close()


def timed_start(config: Settings) -> tuple[float, int]:
    daemon = Daemon(config)
    started = time.perf_counter()
    daemon.start()
    elapsed = (time.perf_counter() - started) * 1000
    assert daemon.manager is not None
    resident = len(daemon.manager.resident())
    daemon.stop()
    return elapsed, resident


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100,1000")
    parser.add_argument("--runs", type=int, default=3)
    add_quick(parser, sizes="0,20", runs=1)
    args = apply_quick(parser.parse_args())
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="netclaw-warm-") as tmp:
        provider = ProviderProcess(Path(tmp) / "provider.log").start()
        results: dict[int, tuple[float, float, int]] = {}
        try:
            for size in sizes:
                warm_ms: list[float] = []
                cold_ms: list[float] = []
                warmed = 0
                for run in range(args.runs):
                    config = settings(Path(tmp) / f"n{size}-{run}", provider.base_url)
                    make_sessions(config, size)
                    assert manifest_size(config) == size, manifest_size(config)
                    elapsed, warmed = timed_start(config)  # takes the manifest, writes a new one
                    warm_ms.append(elapsed)
                    conn = sqlite3.connect(config.database_path)
                    conn.execute("DELETE FROM warm_manifest")
                    conn.commit()
                    conn.close()
                    cold_ms.append(timed_start(config)[0])
                results[size] = (median(warm_ms), median(cold_ms), warmed)
        finally:
            provider.stop()
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    for size, (warm, cold, warmed) in results.items():
        info(
            f"startup_cold_ms_{size}",
            cold,
            "ms",
            f"same data, manifest removed; warm/cold = {warm / cold:.2f}",
        )
        info(f"sessions_warmed_{size}", warmed, "sessions")
    for size, (warm, _, _) in results.items():
        target = TARGETS_MS.get(size, 10000.0)
        figure(f"startup_ms_manifest_{size}", warm, "ms", f"<= {target:g} ms", warm <= target)


if __name__ == "__main__":
    main()
