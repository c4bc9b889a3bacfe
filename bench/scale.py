"""Many sessions: memory and threads while 10,000 sessions each take one message.

The real ``Daemon`` in-process (temporary data_dir, ``journal.synchronous=full``) against the
scripted provider in its own process (``tests.fakes.scripted_openai``), passivation on
(``session.idle_timeout_s`` ``--idle`` seconds, ``passivation_grace_s`` 0) and
``session.max_resident_sessions`` ``--max-resident``. ``--sessions`` sessions (10,000) are
created one message each, ``--concurrency`` at a time (``IntakeService.submit(wait=True)``); a
sampler thread reads this process's RSS and thread count from /proc every ``--sample``
seconds, with how many sessions are done and resident. When every session has answered, the
run waits until the manager holds no resident session (or ``--settle`` seconds), collects
garbage once and reads RSS again.

| figure | target |
| --- | --- |
| ``scale_peak_rss_mb`` | <= 400 MB |
| ``scale_rss_after_passivation_mb`` | <= 150 MB |
| ``scale_peak_threads_over_resident_limit`` | threads at the peak minus the ones that are not session actors, <= ``max_resident_sessions`` |

Run from the repo root: ``python bench/scale.py [--sessions 10000]``. ~1-2 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
import time
from pathlib import Path

import _common as c
from _common import daemon_settings, figure, info, log, machine_load
from _provider import ProviderProcess

from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.process.heap import TRIM_QUIET_S, settle_heap


def proc_status() -> tuple[float, int]:
    """(RSS in MB, threads) of this process."""
    rss = threads = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss / 1024, threads


class Sampler(threading.Thread):
    def __init__(self, daemon: Daemon, every_s: float) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.daemon_ = daemon
        self.every_s = every_s
        self.done = 0
        self.samples: list[tuple[float, int, int, int, float]] = []  # (t, done, resident, threads, rss)
        self._halt = threading.Event()
        self._t0 = time.perf_counter()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            self.sample()

    def sample(self) -> tuple[float, int]:
        rss, threads = proc_status()
        manager = self.daemon_.manager
        resident = len(manager.resident()) if manager is not None else 0
        self.samples.append((time.perf_counter() - self._t0, self.done, resident, threads, rss))
        return rss, threads

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


async def create_sessions(daemon: Daemon, sampler: Sampler, sessions: int, concurrency: int) -> int:
    gateway = daemon.gateway
    assert gateway is not None
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(sessions):
        queue.put_nowait(i)
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            _, outcome = await gateway.intake.submit(Inbound(f"scale-{i}", f"hello number {i}"), wait=True)
            if outcome is None or outcome.status != "completed":
                failed += 1
            sampler.done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--max-resident", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=5.0, help="session.idle_timeout_s")
    parser.add_argument("--settle", type=float, default=90.0, help="how long to wait for passivation")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--dir", default=None, help="where the temporary data_dir goes")
    c.add_quick(parser, sessions=200, concurrency=20, max_resident=50, idle=1.0, settle=20.0)
    args = c.apply_quick(parser.parse_args())
    load_before = machine_load()

    with c.temp_dir("netclaw-bench-scale-", args.dir) as tmp:
        provider = ProviderProcess(tmp / "provider.log").start()
        daemon: Daemon | None = None
        try:
            settings = daemon_settings(
                tmp / "data",
                provider.base_url,
                session={
                    "idle_timeout_s": args.idle,
                    "passivation_grace_s": 0,
                    "max_resident_sessions": args.max_resident,
                },
                journal={"synchronous": "full"},
            )
            daemon = Daemon(settings)
            daemon.start()
            settle_heap()
            assert daemon.io is not None
            sampler = Sampler(daemon, args.sample)
            sampler.start()
            base_rss, base_threads = proc_status()  # the sampler's own thread included
            t0 = time.perf_counter()
            failed = daemon.io.run(create_sessions(daemon, sampler, args.sessions, args.concurrency), 3600)
            created_s = time.perf_counter() - t0
            log(f"{args.sessions} sessions answered in {created_s:.1f} s ({failed} failed)")
            deadline = time.perf_counter() + args.settle
            manager = daemon.manager
            assert manager is not None
            while manager.resident() and time.perf_counter() < deadline:
                time.sleep(0.5)
            left = len(manager.resident())
            if left:
                from collections import Counter

                phases = Counter(str(p) for p in manager.resident().values())
                log(f"still resident after {args.settle:g} s, by phase: {dict(phases)}")
            settle_s = time.perf_counter() - t0 - created_s
            gc.collect()
            time.sleep(TRIM_QUIET_S + 1.0)  # the daemon gives freed memory back once the wave is over
            after_rss, after_threads = sampler.sample()
            sampler.stop()
        finally:
            if daemon is not None:
                daemon.stop()
            provider.stop()

    samples = sampler.samples
    peak_rss = max(s[4] for s in samples)
    peak_threads = max(s[3] for s in samples)
    peak_resident = max(s[2] for s in samples)
    step = max(1, len(samples) // 12)
    series = "; ".join(
        f"{t:.0f}s {d} done {r} resident {th} thr {m:.0f} MB" for t, d, r, th, m in samples[::step]
    )
    info("scale_series", series, note="time, sessions answered, resident, threads, RSS")
    info(
        "scale_run",
        f"{args.sessions} sessions in {created_s:.1f} s ({args.sessions / created_s:.0f}/s), {failed} failed; "
        f"passivated in {settle_s:.1f} s more, {left} still resident",
    )
    info("scale_baseline", f"{base_rss:.0f} MB, {base_threads} threads after start-up")
    info("scale_peak_resident_sessions", peak_resident, note=f"max_resident_sessions {args.max_resident}")
    info("scale_threads_after_passivation", after_threads)
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    figure("scale_peak_rss_mb", peak_rss, "MB", "<= 400 MB", peak_rss <= 400)
    figure("scale_rss_after_passivation_mb", after_rss, "MB", "<= 150 MB", after_rss <= 150)
    over = peak_threads - base_threads
    figure(
        "scale_peak_threads_over_resident_limit",
        over,
        "threads",
        f"<= {args.max_resident} threads",
        over <= args.max_resident,
    )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
