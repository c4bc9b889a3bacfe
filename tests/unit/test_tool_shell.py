"""The shell tool as real subprocesses: output and exit code, the workspace as its cwd, no
stdin, the output cap, a timeout and a cancellation that kill the whole process group,
and no secret-looking environment variables."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from netclaw.errors import ToolError
from netclaw.tools import ToolContext
from netclaw.tools._shell import shell_tool

CTX = ToolContext("cli:test", "personal")


async def sh(root: Path, command: str, **options: float) -> str:
    return await shell_tool(root, **options).handler({"command": command}, CTX)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


async def test_output_exit_code_and_cwd(tmp_path: Path) -> None:
    assert await sh(tmp_path, "echo hello; echo oops >&2") == "hello\noops\n\n[exit code 0]"
    assert (await sh(tmp_path, "exit 3")).endswith("[exit code 3]")
    assert (await sh(tmp_path, "pwd")).startswith(str(tmp_path))


async def test_no_stdin(tmp_path: Path) -> None:
    started = time.monotonic()
    assert await sh(tmp_path, "cat") == "\n[exit code 0]"
    assert time.monotonic() - started < 10  # at once: not waiting on a stdin nobody writes


async def test_output_is_capped(tmp_path: Path) -> None:
    text = await sh(tmp_path, "yes 0123456789 | head -c 100000", max_output_bytes=1000)
    assert "[output cut: 100,000 bytes, the first 1,000 shown]" in text
    assert text.endswith("[exit code 0]")


async def test_a_timeout_kills_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    with pytest.raises(ToolError, match=r"timed out after 0\.5s") as caught:
        await sh(tmp_path, f"echo started; sleep 30 & echo $! > {pidfile}; wait", timeout_s=0.5)
    assert "started" in str(caught.value)
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:  # noqa: ASYNC110 - polling another process
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_cancelling_the_turn_kills_it_too(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    task = asyncio.ensure_future(sh(tmp_path, f"sleep 30 & echo $! > {pidfile}; wait", timeout_s=60))
    while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110 - a file another process writes
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10  # a loaded machine takes its time to run a SIGKILL
    while alive(child) and time.monotonic() < deadline:  # noqa: ASYNC110 - polling another process
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_cancelled_while_it_starts_kills_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn is cancelled after the command began running but before its start returned
    (a loaded loop; killing only the shell, as asyncio's own clean-up of an interrupted
    start did, left its background child living on: seen as a flake of the test above)."""
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    connect = loop.connect_read_pipe

    async def slow_to_return(*args: Any, **kwargs: Any) -> Any:
        connected = await connect(*args, **kwargs)
        started.set()
        await asyncio.sleep(0.5)  # the window: running, its output connected, not yet returned
        return connected

    monkeypatch.setattr(loop, "connect_read_pipe", slow_to_return)
    pidfile = tmp_path / "child.pid"
    task = asyncio.ensure_future(sh(tmp_path, f"sleep 30 & echo $! > {pidfile}; wait", timeout_s=60))
    await asyncio.wait_for(started.wait(), 10)
    while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110 - a file another process writes
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:  # noqa: ASYNC110 - polling another process
        await asyncio.sleep(0.05)
    assert not alive(child)


async def test_secret_looking_variables_are_not_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    text = await sh(tmp_path, "env")
    assert "visible" in text and "sk-secret" not in text and "xoxb-secret" not in text


async def test_an_empty_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="'command' is required"):
        await shell_tool(tmp_path).handler({}, CTX)
