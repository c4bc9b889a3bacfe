"""The ``shell`` tool: one ``/bin/sh -c`` command in the workspace.

Where it runs is a :class:`~netclaw.tools._sandbox.Runner`'s business (a bubblewrap
sandbox by default, see :mod:`netclaw.tools._sandbox`). Here: no stdin; stdout and stderr
merged and capped (the rest is drained so the command never blocks on a full pipe); its
own process group, killed whole on timeout or when the turn is cancelled (in the sandbox
that takes its whole PID namespace along). Off by default, and a call waits for a
person's approval unless the audience grants ``shell`` by name and does not list it in
``approve`` (:func:`netclaw.security.policy.needs_approval`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from netclaw.errors import ToolError
from netclaw.process.spawn import Child, kill_group, start_child
from netclaw.tools._registry import Tool, ToolContext
from netclaw.tools._sandbox import HostRunner, Limits, Network, Runner, clean_environment

MAX_COMMAND_CHARS = 10_000

__all__ = ["clean_environment", "run_command", "shell_tool"]


def shell_tool(
    root: Path,
    *,
    timeout_s: float = 60.0,
    max_output_bytes: int = 65536,
    runner: Runner | None = None,
    network_for: Callable[[str], Network] | None = None,
) -> Tool:
    """``runner`` None: on the host (``sandbox: none``). ``network_for(audience)``: may the
    command reach the network (default: no)."""
    chosen = runner or HostRunner(root, Limits(), clean_environment(os.environ), shutil.which("prlimit"))

    async def run(args: Mapping[str, Any], ctx: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("'command' is required: one shell command line")
        if len(command) > MAX_COMMAND_CHARS:
            raise ToolError(f"'command' is longer than {MAX_COMMAND_CHARS} characters")
        network = network_for(ctx.audience) if network_for is not None else "none"
        return await run_command(
            command, chosen, timeout_s=timeout_s, max_output_bytes=max_output_bytes, network=network
        )

    where = (
        "in a sandbox: the workspace is the only writable place, no network"
        if chosen.name != "none"
        else "on the host"
    )
    return Tool(
        "shell",
        f"Run one shell command (/bin/sh -c) in the workspace, {where}; no input, at most "
        f"{timeout_s:g}s, output capped. Environment variables that look like secrets are not available.",
        {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line"}},
            "required": ["command"],
            "additionalProperties": False,
        },
        run,
        untrusted=True,  # its output, and its error (a timeout shows the output so far)
    )


async def run_command(
    command: str, runner: Runner, *, timeout_s: float, max_output_bytes: int, network: Network = "none"
) -> str:
    launch = runner.launch(command, network)
    process = await start_child(
        launch.argv, cwd=launch.cwd, env=launch.env, user=launch.user, group=launch.group
    )
    kept = bytearray()
    total = 0

    async def drain() -> None:
        nonlocal total
        while chunk := await process.stdout.read(65536):
            total += len(chunk)
            room = max_output_bytes - len(kept)
            if room > 0:
                kept.extend(chunk[:room])
        await process.wait()

    try:
        async with asyncio.timeout(timeout_s):
            await drain()
    except TimeoutError as exc:
        kill_group(process)
        await _reap(process)
        raise ToolError(
            f"the command timed out after {timeout_s:g}s and was killed; output so far:\n{_shown(kept, total)}"
        ) from exc
    except asyncio.CancelledError:
        kill_group(process)  # the turn was cancelled: nothing it started keeps running
        await _reap(process)
        raise
    kill_group(process)  # whatever it left running in the background goes too
    return f"{_shown(kept, total)}\n[exit code {_exit_code(process.returncode)}]"


def _exit_code(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"{code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


def _shown(kept: bytearray, total: int) -> str:
    text = kept.decode("utf-8", errors="replace")
    if total > len(kept):
        text += f"\n[output cut: {total:,} bytes, the first {len(kept):,} shown]"
    return text


async def _reap(process: Child) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await process.wait()
