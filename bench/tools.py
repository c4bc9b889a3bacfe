"""The daemon's added latency per tool round, for an MCP tool over stdio.

The same MCP server (``bench/_mcp_echo.py``, the real SDK, a real subprocess) is called
two ways in one run:

- **direct**: an ``mcp.Client`` over stdio calls ``echo`` (the floor: the SDK and the
  server's own time);
- **through the daemon**: a session's turn asks for ``bench__echo`` (the scripted provider
  returns the call, then a reply). The round is timed from the ``tool_call`` output to the
  ``tool_result`` output a subscriber receives: the actor hands the round to the loop,
  the registry checks the arguments, the MCP client calls the server, the result comes
  back to the actor, the round is journaled (durably) and published.

Added latency = p50(through the daemon) - p50(direct).

Run from the repo root: ``python bench/tools.py [--rounds 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import (
    REPO_ROOT,
    add_quick,
    apply_quick,
    daemon_settings,
    figure,
    info,
    machine_load,
    median,
    percentile,
)
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

TARGET_ADDED_MS = 2.0
SERVER = [str(REPO_ROOT / "bench" / "_mcp_echo.py")]


def settings(data_dir: Path, base_url: str) -> Settings:
    config: Settings = daemon_settings(
        data_dir,
        base_url,
        window=200_000,
        mcp={"servers": {"bench": {"command": sys.executable, "args": SERVER}}},
        audiences={"personal": {"tools": ["bench__echo"]}},  # a small prompt: the round is what is timed
    )
    return config


async def direct(rounds: int) -> list[float]:
    params = StdioServerParameters(command=sys.executable, args=SERVER)
    async with Client(stdio_client(params), cache=None) as client:
        for _ in range(20):
            await client.call_tool("echo", {"text": "warm up"})
        times = []
        for i in range(rounds):
            started = time.perf_counter()
            await client.call_tool("echo", {"text": f"hello {i}"})
            times.append((time.perf_counter() - started) * 1000)
    return times


def responder(body: dict[str, Any]) -> Reply:
    if body["messages"][-1]["role"] == "tool":
        return Reply(text="done")
    return Reply(tool_calls=[ToolCallSpec("bench__echo", {"text": "hello"})])


async def through_daemon(daemon: Daemon, rounds: int) -> list[float]:
    assert daemon.gateway is not None
    gateway = daemon.gateway
    sid = "cli:tool-bench"
    subscription = gateway.reads.subscribe(sid, out.OutputFilter.TOOL_CALLS)
    times: list[float] = []
    try:
        for i in range(rounds + 10):
            await gateway.intake.submit(Inbound(sid, f"round {i}"))
            called = 0.0
            while True:
                output = await subscription.get(30)
                if isinstance(output, out.ToolCall):
                    called = time.perf_counter()
                elif isinstance(output, out.ToolResult):
                    if i >= 10:  # the first rounds warm up
                        times.append((time.perf_counter() - called) * 1000)
                elif isinstance(output, out.TurnCompleted):
                    break
    finally:
        subscription.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    add_quick(parser, rounds=20)
    args = apply_quick(parser.parse_args())
    load_before = machine_load()
    direct_ms = asyncio.run(direct(args.rounds))
    with tempfile.TemporaryDirectory(prefix="netclaw-tools-") as tmp, ScriptedOpenAIThread() as provider:
        provider.route("round", responder)
        daemon = Daemon(settings(Path(tmp) / "data", provider.base_url))
        daemon.start()
        try:
            assert daemon.io is not None and daemon.mcp is not None
            assert daemon.mcp.statuses()["bench"].state == "up", daemon.mcp.statuses()
            daemon_ms = daemon.io.run(through_daemon(daemon, args.rounds), 600)
        finally:
            daemon.stop()
    added = median(daemon_ms) - median(direct_ms)
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    info("mcp_direct_p50_ms", median(direct_ms), "ms", "reference: mcp.Client over stdio, same server")
    info("tool_round_p50_ms", median(daemon_ms), "ms", "tool_call -> tool_result through the daemon")
    info("tool_round_p99_ms", percentile(daemon_ms, 99), "ms")
    info("round_over_direct_ratio", median(daemon_ms) / median(direct_ms), "x")
    figure("tool_round_added_p50_ms", added, "ms", f"<= {TARGET_ADDED_MS:g} ms", added <= TARGET_ADDED_MS)


if __name__ == "__main__":
    main()
