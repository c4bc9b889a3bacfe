"""The shell sandbox's added latency: the real shell tool runs ``echo`` in a bubblewrap
sandbox and on the host (``sandbox: none``), interleaved, the same number of times;
added latency = p50(sandboxed) - p50(on the host).

Both go through the tool's handler (argument checks, process start, output drain, the
process group killed after). The sandbox adds bubblewrap's namespaces and mounts and the
``prlimit`` wrapper; when run as root it also starts as ``nobody``.

Run from the repo root: ``python bench/sandbox.py [--rounds 200] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import figure, info, machine_load, median, percentile, temp_dir

from netclaw.config import ShellConfig
from netclaw.tools import ToolContext
from netclaw.tools._sandbox import runner_for
from netclaw.tools._shell import shell_tool
from netclaw.tools._workspace import ensure_workspace

TARGET_ADDED_MS = 30.0
CTX = ToolContext("cli:bench", "personal")


async def measure(workspace: Path, rounds: int) -> tuple[list[float], list[float]]:
    sandboxed = shell_tool(workspace, runner=runner_for(ShellConfig(enabled=True), workspace))
    host = shell_tool(workspace, runner=runner_for(ShellConfig(enabled=True, sandbox="none"), workspace))
    timings: dict[str, list[float]] = {"sandbox": [], "host": []}
    for i in range(rounds + 2):
        for name, tool in (
            (("sandbox", sandboxed), ("host", host)) if i % 2 else (("host", host), ("sandbox", sandboxed))
        ):
            started = time.perf_counter()
            out = await tool.handler({"command": "echo hello"}, CTX)
            elapsed = (time.perf_counter() - started) * 1000
            assert "hello" in str(out), out
            if i >= 2:  # two warm-up rounds
                timings[name].append(elapsed)
    return timings["sandbox"], timings["host"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 rounds (CI smoke)")
    args = parser.parse_args()
    rounds = 20 if args.quick else args.rounds
    with temp_dir("netclaw-bench-sandbox-") as root:
        root.chmod(0o711)  # the sandbox's user (nobody, when run as root) reaches the workspace
        workspace = ensure_workspace(root / "workspace", (65534, 65534) if os.geteuid() == 0 else None)
        sandboxed, host = asyncio.run(measure(workspace, rounds))
    info("rounds", rounds)
    info("machine load", machine_load(), note="1-minute load average / CPUs")
    info("echo on the host p50", median(host), "ms", f"p95 {percentile(host, 95):.1f}")
    info("echo in the sandbox p50", median(sandboxed), "ms", f"p95 {percentile(sandboxed, 95):.1f}")
    added = median(sandboxed) - median(host)
    figure("sandboxed echo added latency", added, "ms", f"<= {TARGET_ADDED_MS:g}", added <= TARGET_ADDED_MS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
