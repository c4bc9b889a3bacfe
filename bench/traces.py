"""What traces cost a turn: CPU per turn and turn latency with ``telemetry.traces`` off, on
with a collector that answers, and on with a collector that is down.

The real :class:`~netclaw.daemon.Daemon` runs in this process (port 0, a temporary
data_dir); the scripted OpenAI-compatible provider (echo replies) and the OTLP/HTTP
receiver (``tests.fakes.otlp_receiver``, decoding every export) each run in a process of
their own, so only the daemon's CPU is counted. "Down" points the exporter at a closed
port. Each turn is ``IntakeService.submit(Inbound(...), wait=True)`` awaited on the
daemon's loop, one session after another (``--sessions`` round-robin, so transcripts stay
short); the modes alternate round by round, each in a fresh daemon, so drift in the
machine's load spreads over all three.

CPU per turn: this process's user+system CPU (every thread: the loop, the actors, SQLite's,
OpenTelemetry's exporter) over the measured turns and the export of their spans (flushed
before the window closes), divided by the number of turns.

Figures: CPU per turn with traces on over off (target: at most 10 % more), and with the
collector down the median turn latency over off (target: at most 10 % more: turns do not
wait for a collector). Run from the repo root: ``python bench/traces.py [--turns 300]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import dataclass, field

import _common as c
import _procstat as ps
from _common import daemon_settings, figure, info, log, machine_load, median
from _provider import ProviderProcess

from netclaw.daemon import Daemon
from netclaw.gateway import Inbound

MODES = ("off", "on", "down")
WARM = 10  # turns before measuring (the first calls open connections, fill caches)


@dataclass
class Run:
    cpu_s: list[float] = field(default_factory=list)  # per measured turn, averaged per round
    groups: dict[str, float] = field(default_factory=dict)  # CPU seconds by thread group, all rounds
    turns: int = 0
    latency_s: list[float] = field(default_factory=list)  # every measured turn
    exported: int = 0
    dropped: int = 0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def telemetry(mode: str, collector: str) -> dict[str, object]:
    if mode == "off":
        return {"traces": False}
    endpoint = collector if mode == "on" else f"http://127.0.0.1:{closed_port()}"
    return {"traces": True, "endpoint": endpoint}


async def drive(daemon: Daemon, sessions: int, first: int, turns: int) -> list[float]:
    """Turns ``first`` .. ``first + turns``, one after another: each one's latency."""
    gateway = daemon.gateway
    assert gateway is not None
    latencies: list[float] = []
    for k in range(first, first + turns):
        sid = f"cli:bench-{k % sessions}"
        started = time.perf_counter()
        _, outcome = await gateway.intake.submit(
            Inbound(sid, f"message {k}: how is the deploy going?"), wait=True
        )
        assert outcome is not None and outcome.status == "completed", outcome
        latencies.append(time.perf_counter() - started)
    return latencies


def one_round(
    mode: str, provider: ProviderProcess, collector: str, args: argparse.Namespace, run: Run
) -> None:
    with c.temp_dir("netclaw-bench-traces-") as tmp:
        settings = daemon_settings(tmp / "data", provider.base_url, telemetry=telemetry(mode, collector))
        daemon = Daemon(settings)
        daemon.start()
        tracing = daemon.tracing
        try:
            assert daemon.io is not None
            daemon.io.run(drive(daemon, args.sessions, 0, WARM), 600)
            tracing.flush(timeout_s=10)
            cpu0, threads0 = ps.process_cpu(), ps.thread_cpu()
            run.latency_s += daemon.io.run(drive(daemon, args.sessions, WARM, args.turns), 600)
            tracing.flush(timeout_s=10)  # the export of the measured turns' spans counts too
            run.cpu_s.append((ps.process_cpu() - cpu0) / args.turns)
            for group, cpu in ps.delta_by_group(threads0, ps.thread_cpu()).items():
                run.groups[group] = run.groups.get(group, 0.0) + cpu
            run.turns += args.turns
        finally:
            daemon.stop()  # exports what is queued (for 5 s at most): then the counts are final
        run.exported += tracing.exported()
        run.dropped += sum(tracing.dropped().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="measured turns per mode and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each runs every mode once)")
    parser.add_argument("--sessions", type=int, default=10, help="sessions the turns go round")
    c.add_quick(parser, turns=20, rounds=1)
    args = c.apply_quick(parser.parse_args())
    os.environ.setdefault("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    runs = {mode: Run() for mode in MODES}
    with c.temp_dir("netclaw-bench-traces-logs-") as logs:
        provider = ProviderProcess(logs / "provider.log").start()
        collector = ProviderProcess(logs / "collector.log", "tests.fakes.otlp_receiver", ()).start()
        try:
            for n in range(args.rounds):
                for mode in MODES if n % 2 == 0 else reversed(MODES):
                    log(f"round {n + 1}/{args.rounds}: traces {mode}")
                    one_round(mode, provider, collector.base_url, args, runs[mode])
        finally:
            collector.stop()
            provider.stop()
    info("machine load", machine_load(), "", "1-minute load average / CPUs")
    for mode, run in runs.items():
        info(
            f"cpu per turn, traces {mode}",
            median(run.cpu_s) * 1000,
            "ms",
            f"median of {args.rounds} round(s)",
        )
        info(f"turn latency p50, traces {mode}", median(run.latency_s) * 1000, "ms")
        by_group = ", ".join(f"{g} {cpu / run.turns * 1000:.2f}" for g, cpu in sorted(run.groups.items()))
        info(f"cpu per turn by thread, traces {mode}", by_group, "ms")
        if mode != "off":
            info(f"spans exported / dropped, traces {mode}", f"{run.exported} / {run.dropped}")
    off_cpu, on_cpu = median(runs["off"].cpu_s), median(runs["on"].cpu_s)
    overhead = (on_cpu / off_cpu - 1) * 100
    figure("traces_cpu_overhead", overhead, "%", "<= 10", overhead <= 10)
    slower = (median(runs["down"].latency_s) / median(runs["off"].latency_s) - 1) * 100
    figure("traces_collector_down_latency", slower, "%", "<= 10", slower <= 10)


if __name__ == "__main__":
    main()
