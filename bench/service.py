"""The daemon as a service: ``netclaw run`` from exec to READY=1 (sd_notify, as systemd
sees it), its resident memory when idle, and the container image's size.

References, in the same run: a bare ``python -c pass`` and ``python -c "import netclaw.cli"``
(the interpreter and the imports ``netclaw run`` cannot avoid), so the ratio shows what
start-up itself costs.

    python bench/service.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO_ROOT, figure, free_port, info, log, machine_load, median, temp_dir

RUNS = 5
IDLE_S = 10.0


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, env=_env())
    return (time.perf_counter() - started) * 1000


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("NETCLAW_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fill_journal(data: Path, megabytes: int) -> tuple[int, int]:
    """A data_dir whose journal file is ``megabytes`` (sessions of 250 events of ~2 kB, each
    with its listing row), written straight with sqlite3. Returns (events, sessions)."""
    import sqlite3

    sys.path.insert(0, str(REPO_ROOT))
    from netclaw.persistence import prepare_database

    path = data / "netclaw.db"
    prepare_database(path, synchronous="normal")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    payload = json.dumps({"message": {"id": "m", "role": "user", "content": "x" * 1900, "ts": 0.0}})
    per_session = 250
    sessions = 0
    conn.execute("BEGIN")
    while sessions % 100 or path.stat().st_size < megabytes * 1_000_000:  # whole hundreds, to the size
        if sessions % 100 == 0:  # let the file grow on disk where stat sees it
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("BEGIN")
        s = sessions
        sessions += 1
        pid = f"api-fill-{s}"
        conn.executemany(
            "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)",
            ((pid, seq, "InputAdmitted", payload, 0.0) for seq in range(1, per_session + 1)),
        )
        conn.execute(
            "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq, undelivered)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (pid, "api", "filled", per_session, 0.0, 0, per_session, 0),
        )
    conn.execute("COMMIT")
    conn.close()
    return sessions * per_session, sessions


def start_to_ready(root: Path, *, idle_s: float = 0.0, data: Path | None = None) -> tuple[float, int | None]:
    """One ``netclaw run``: ms from exec to READY=1, and RSS after ``idle_s`` (if > 0)."""
    data = data or root / f"data-{time.monotonic_ns()}"
    config = root / "netclaw.json"
    config.write_text(
        json.dumps(
            {
                "data_dir": str(data),
                "gateway": {"port": free_port()},
                "tools": {"workspace_dir": str(root / "ws")},
                # The default provider (a local server) need not be up: start-up only warns.
            }
        )
    )
    notify = f"/tmp/nc-bench-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    sock.settimeout(30)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "netclaw.cli", "run", "--config", str(config), "--log-level", "warning"],
        env=_env(NOTIFY_SOCKET=notify),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not sock.recv(4096).startswith(b"READY=1"):
            pass
        ready_ms = (time.perf_counter() - started) * 1000
        rss = None
        if idle_s:
            time.sleep(idle_s)
            rss = rss_kib(proc.pid)
        return ready_ms, rss
    finally:
        proc.terminate()
        proc.wait(30)
        sock.close()
        os.unlink(notify)


def image_size_mb() -> tuple[float, float] | None:
    """(netclaw image, its base) in MB, when Docker and a built ``netclaw`` image exist."""
    if shutil.which("docker") is None:
        return None
    sizes = {}
    for ref in ("netclaw:test", "python:3.11-slim"):
        done = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Size}}", ref],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return None
        sizes[ref] = int(done.stdout.strip()) / 1e6
    return sizes["netclaw:test"], sizes["python:3.11-slim"]


def main() -> None:
    global RUNS, IDLE_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one start of each kind, a 20 MB journal: for CI"
    )
    args = parser.parse_args()
    if args.quick:
        RUNS, IDLE_S = 1, 2.0
    log(f"load before: {machine_load()}")
    bare = median([wall([sys.executable, "-c", "pass"]) for _ in range(RUNS)])
    imports = median(
        [wall([sys.executable, "-c", "import netclaw.cli, netclaw.daemon"]) for _ in range(RUNS)]
    )
    megabytes = 20 if args.quick else int(os.environ.get("NETCLAW_BENCH_JOURNAL_MB", "1024"))
    with temp_dir("netclaw-bench-service-") as root:
        readies = [start_to_ready(root)[0] for _ in range(RUNS)]
        ready, rss = start_to_ready(root, idle_s=IDLE_S)
        filled = root / "data-filled"
        t0 = time.perf_counter()
        events, sessions = fill_journal(filled, megabytes)
        size_mb = (filled / "netclaw.db").stat().st_size / 1e6
        log(
            f"filled a {size_mb:.0f} MB journal ({events} events, {sessions} sessions) in {time.perf_counter() - t0:.0f} s"
        )
        full = median([start_to_ready(root, data=filled)[0] for _ in range(RUNS if args.quick else 3)])
    cold = median([*readies, ready])
    info("python_bare_start_ms", round(bare, 1), "ms", "reference: python -c pass")
    info("import_daemon_ms", round(imports, 1), "ms", "reference: import netclaw.cli, netclaw.daemon")
    info("cold_start_over_imports", round(cold / imports, 2), "x")
    figure("cold_start_to_ready_ms", round(cold, 1), "ms", "<= 2000 ms", cold <= 2000)
    info(
        "journal_start_cost_ms",
        round(full - cold, 1),
        "ms",
        f"start-up with a {size_mb:.0f} MB journal ({events} events, {sessions} sessions) minus an empty one",
    )
    figure(
        f"start_to_ready_{size_mb / 1000:.1f}gb_journal_ms", round(full, 1), "ms", "<= 1000 ms", full <= 1000
    )
    assert rss is not None
    figure(
        "idle_rss_mib", round(rss / 1024, 1), "MiB", f"<= 150 MiB (after {IDLE_S:g}s idle)", rss <= 150 * 1024
    )
    sizes = image_size_mb()
    if sizes is None:
        info(
            "image_size_mb", "n/a", "", "no docker, or no image netclaw:test (docker build -t netclaw:test .)"
        )
    else:
        image, base = sizes
        info("base_image_mb", round(base, 1), "MB", "python:3.11-slim as present here")
        figure("image_added_mb", round(image - base, 1), "MB", "<= 150 MB over the base", image - base <= 150)
        info("image_size_mb", round(image, 1), "MB")
    log(f"load after: {machine_load()}")


if __name__ == "__main__":
    main()
