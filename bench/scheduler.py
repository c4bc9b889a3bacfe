"""The scheduler with 10,000 pending reminders: memory, finding the next due, and the
latency from a reminder's scheduled time to its turn starting.

A real daemon (the scripted provider in its own process) holds 10,000 reminders due a day
from now. Memory is the daemon process's RSS growth from adding them (the store keeps them
in SQLite; the scheduler holds none in memory). Finding the next due is
``ReminderStore.earliest()`` over them, next to a bare ``SELECT 1`` on the same connection
as the reference. Fire-to-turn-start: 200 more reminders, in 200 sessions, due 25 ms
apart starting a second from now; each session is watched, and the latency is from the
scheduled time to the ``phase`` output that says its turn is processing.

Run from the repo root: ``python bench/scheduler.py [--pending 10000] [--fires 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import add_quick, apply_quick, daemon_settings, figure, info, machine_load, median, percentile
from _provider import ProviderProcess

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.reminders import Schedule
from netclaw.workers.scheduler import NewReminder

TARGET_P99_MS = 50.0


def settings(data_dir: Path, base_url: str, pending: int) -> Settings:
    config: Settings = daemon_settings(
        data_dir, base_url, session={"max_resident_sessions": 2000, "max_reminders": pending + 10}
    )
    return config


def rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def add_pending(daemon: Daemon, count: int) -> None:
    assert daemon.scheduler is not None
    scheduler = daemon.scheduler
    later = Schedule("at", at=time.time() + 86400)
    for i in range(count):
        await scheduler.add(
            NewReminder(f"cli:pending-{i % 100:03d}", f"pending reminder {i}", later, "bench")
        )


async def time_earliest(daemon: Daemon, rounds: int) -> tuple[float, float]:
    assert daemon.reminders is not None
    store = daemon.reminders
    await store.earliest()
    started = time.perf_counter()
    for _ in range(rounds):
        await store.earliest()
    earliest_us = (time.perf_counter() - started) / rounds * 1e6
    started = time.perf_counter()
    for _ in range(rounds):
        await store._read("SELECT 1")  # noqa: SLF001 - the reference: one round trip on the same connection
    reference_us = (time.perf_counter() - started) / rounds * 1e6
    return earliest_us, reference_us


async def fire_latencies(daemon: Daemon, fires: int, spacing_s: float) -> list[float]:
    assert daemon.scheduler is not None and daemon.gateway is not None
    scheduler, gateway = daemon.scheduler, daemon.gateway
    first = time.time() + 1.0
    due: dict[str, float] = {}
    watchers = []
    started: dict[str, float] = {}

    async def watch(session_id: str) -> None:
        subscription = gateway.reads.subscribe(session_id, out.OutputFilter.NONE)
        try:
            async for output in subscription:
                if isinstance(output, out.Phase) and output.to == "processing":
                    started[session_id] = time.time()
                    return
        finally:
            subscription.close()

    for i in range(fires):
        session_id = f"cli:fire-{i:04d}"
        due[session_id] = first + i * spacing_s
        watchers.append(asyncio.ensure_future(watch(session_id)))
    await asyncio.sleep(0.3)  # every watcher subscribed (the sessions are resident now)
    for session_id, at in due.items():
        await scheduler.add(NewReminder(session_id, "measure me", Schedule("at", at=at), "bench"))
    await asyncio.wait_for(asyncio.gather(*watchers), first - time.time() + fires * spacing_s + 30)
    return [(started[sid] - at) * 1000 for sid, at in due.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--fires", type=int, default=200)
    parser.add_argument("--spacing-ms", type=float, default=25.0)
    add_quick(parser, pending=300, fires=10)
    args = apply_quick(parser.parse_args())
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="netclaw-sched-") as tmp:
        provider = ProviderProcess(Path(tmp) / "provider.log").start()
        try:
            daemon = Daemon(settings(Path(tmp) / "data", provider.base_url, args.pending))
            daemon.start()
            try:
                assert daemon.io is not None
                before = rss_kib()
                added = time.perf_counter()
                daemon.io.run(add_pending(daemon, args.pending), 600)
                add_s = time.perf_counter() - added
                grown = rss_kib() - before
                earliest_us, reference_us = daemon.io.run(time_earliest(daemon, 2000), 120)
                latencies = daemon.io.run(fire_latencies(daemon, args.fires, args.spacing_ms / 1000), 600)
            finally:
                daemon.stop()
        finally:
            provider.stop()
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    info("reminders_added_per_s", args.pending / add_s, "/s", "one durable insert each")
    info("select_1_us", reference_us, "us", "reference: one round trip on the store's connection")
    info("find_next_due_ratio", earliest_us / reference_us, "x", "earliest() / SELECT 1")
    info("fire_to_turn_start_p50_ms", median(latencies), "ms", f"{len(latencies)} fires")
    info("fire_to_turn_start_max_ms", max(latencies), "ms")
    figure("memory_10k_reminders_kib", grown, "KiB", "<= 10240 KiB", grown <= 10240)
    figure("find_next_due_us", earliest_us, "us", "<= 1000 us", earliest_us <= 1000)
    p99 = percentile(latencies, 99)
    figure("fire_to_turn_start_p99_ms", p99, "ms", f"<= {TARGET_P99_MS:g} ms", p99 <= TARGET_P99_MS)


if __name__ == "__main__":
    main()
