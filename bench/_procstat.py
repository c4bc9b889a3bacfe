"""CPU accounting from /proc (Linux): per thread group of this process, and of a child process.

Used by the benchmarks to say where the time of a run went (loop thread, actor threads,
sqlite threads, the provider process) without a profiler. Resolution is one clock tick
(usually 10 ms), fine for runs of seconds.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_of_stat(text: str) -> float:
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def classify(name: str) -> str:
    if name == "netclaw-io":
        return "loop"
    if name.startswith("SessionActor"):
        return "actors"
    if "_connection_worker_thread" in name:
        return "sqlite"
    if name.startswith("netclaw-journal"):
        return "journal"
    if name.startswith("OtelBatch"):  # OpenTelemetry's exporter (telemetry.traces)
        return "exporter"
    if name == "MainThread":
        return "main"
    return "other"


def thread_cpu() -> dict[int, tuple[str, float]]:
    """tid -> (group, cpu seconds) for every live thread of this process."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid_s in tids:
        tid = int(tid_s)
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                cpu = _cpu_of_stat(fh.read())
        except OSError:
            continue
        out[tid] = (classify(names.get(tid, "")), cpu)
    return out


def delta_by_group(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds spent per group between two :func:`thread_cpu` snapshots
    (threads that exited in between are lost; threads born in between count from 0)."""
    groups: dict[str, float] = defaultdict(float)
    for tid, (group, cpu) in after.items():
        groups[group] += cpu - before.get(tid, (group, 0.0))[1]
    return dict(groups)


def process_cpu(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return _cpu_of_stat(fh.read())
    except OSError:
        return float("nan")


def tcp_time_wait_to_port(port: int) -> int:
    """Sockets in TIME_WAIT whose remote port is ``port`` (closed client connections)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    if len(parts) > 3 and parts[3] == "06" and int(parts[2].rsplit(":", 1)[1], 16) == port:
                        count += 1
        except OSError:
            continue
    return count
