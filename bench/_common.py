"""Small helpers shared by the benchmark scripts (not a benchmark itself).

Every script prints its results as lines of the form::

    figure: NAME = VALUE UNIT (target OP VALUE: met|missed)
    info: NAME = VALUE UNIT (...)

``figure`` lines carry a target; ``info`` lines are context (references, ratios,
breakdowns) and have none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

if str(REPO_ROOT) not in sys.path:  # `python bench/x.py` puts bench/ first, not the repo root
    sys.path.insert(0, str(REPO_ROOT))


def daemon_settings(
    data_dir: Path,
    base_url: str,
    *,
    model: str = "scripted",
    window: int = 32768,
    max_output: int = 1024,
    timeout_s: float = 30,
    **sections: Any,
) -> Any:
    """A daemon's ``Settings`` for a benchmark: the scripted provider, port 0, the workspace
    under ``data_dir`` (never in the repo); ``sections`` add or replace config sections."""
    from netclaw.config import Settings

    data: dict[str, Any] = {
        "data_dir": str(data_dir),
        "providers": {
            "local": {"type": "openai", "base_url": base_url, "timeout_s": timeout_s, "max_retries": 2}
        },
        "models": {
            "main": {
                "provider": "local",
                "model": model,
                "context_window": window,
                "max_output_tokens": max_output,
            }
        },
        "gateway": {"host": "127.0.0.1", "port": 0},
        "tools": {"workspace_dir": str(Path(data_dir) / "workspace")},
        **sections,
    }
    return Settings(**data)


def add_quick(parser: Any, **small: Any) -> None:
    """``--quick``: the same measurement, small enough to finish in seconds (CI runs every
    bench this way, after the tests: it must run and print its figures; the targets are
    not enforced there). ``small`` are the option values it sets (by dest)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run that finishes in seconds (CI): " + ", ".join(f"{k}={v}" for k, v in small.items()),
    )
    parser.set_defaults(quick_values=small)


def apply_quick(args: Any) -> Any:
    """The parsed ``args`` with the quick values in place when ``--quick`` was given."""
    if getattr(args, "quick", False):
        for name, value in args.quick_values.items():
            setattr(args, name, value)
    return args


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def fmt(value: float) -> str:
    if value != value:  # nan
        return "nan"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def figure(name: str, value: float, unit: str, target: str, met: bool) -> None:
    print(f"figure: {name} = {fmt(value)} {unit} (target {target}: {'met' if met else 'missed'})", flush=True)


def info(name: str, value: float | str, unit: str = "", note: str = "") -> None:
    shown = value if isinstance(value, str) else fmt(value)
    tail = f" ({note})" if note else ""
    print(f"info: {name} = {shown}{(' ' + unit) if unit else ''}{tail}", flush=True)


def machine_load() -> str:
    """``"3.52/2"``: the 1-minute load average over the CPU count (noise context for a run)."""
    try:
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[0]
    except OSError:
        load = "?"
    return f"{load}/{os.cpu_count()}"


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the result lines."""
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def temp_dir(prefix: str, base: str | None = None) -> Iterator[Path]:
    """A temporary directory (default: $NETCLAW_BENCH_DIR or the system temp dir), always removed."""
    root = base or os.environ.get("NETCLAW_BENCH_DIR") or None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a daemon's config)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited within ``grace_s``."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
