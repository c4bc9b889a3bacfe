"""The ``shell`` tool: one ``/bin/sh -c`` command in the workspace.

No stdin; stdout and stderr merged and capped (the rest is drained so the command never
blocks on a full pipe); its own process group, killed whole on timeout or when the turn
is cancelled; environment variables whose names look secret are not passed on. Off by
default, and a call waits for a person's approval unless the audience grants ``shell``
by name and does not list it in ``approve`` (:func:`netclaw.policy.needs_approval`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netclaw.errors import ToolError
from netclaw.tools._registry import Tool, ToolContext

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MAX_COMMAND_CHARS = 10_000


def shell_tool(root: Path, *, timeout_s: float = 60.0, max_output_bytes: int = 65536) -> Tool:
    async def run(args: Mapping[str, Any], ctx: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("'command' is required: one shell command line")
        if len(command) > MAX_COMMAND_CHARS:
            raise ToolError(f"'command' is longer than {MAX_COMMAND_CHARS} characters")
        return await run_command(command, root, timeout_s=timeout_s, max_output_bytes=max_output_bytes)

    return Tool(
        "shell",
        f"Run one shell command (/bin/sh -c) in the workspace; no input, at most {timeout_s:g}s, "
        "output capped. Environment variables that look like secrets are not available.",
        {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line"}},
            "required": ["command"],
            "additionalProperties": False,
        },
        run,
    )


def clean_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not _SECRET_NAME.search(k)}


async def run_command(command: str, cwd: Path, *, timeout_s: float, max_output_bytes: int) -> str:
    process = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=clean_environment(),
        start_new_session=True,  # its own process group: a timeout kills everything it started
    )
    kept = bytearray()
    total = 0

    async def drain() -> None:
        nonlocal total
        assert process.stdout is not None
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
        _kill_group(process)
        await _reap(process)
        raise ToolError(
            f"the command timed out after {timeout_s:g}s and was killed; output so far:\n{_shown(kept, total)}"
        ) from exc
    except asyncio.CancelledError:
        _kill_group(process)  # the turn was cancelled: nothing it started keeps running
        await _reap(process)
        raise
    _kill_group(process)  # whatever it left running in the background goes too
    return f"{_shown(kept, total)}\n[exit code {process.returncode}]"


def _shown(kept: bytearray, total: int) -> str:
    text = kept.decode("utf-8", errors="replace")
    if total > len(kept):
        text += f"\n[output cut: {total:,} bytes, the first {len(kept):,} shown]"
    return text


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _reap(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await process.wait()
