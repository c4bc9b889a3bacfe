"""A child process run from the loop (netclaw/process/spawn.py), on asyncio's loop and on
uvloop's (the daemon's): its output, its exit status, a signal that ended it — seen on a
pidfd, and by a waiter thread where there is none."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from netclaw.process.spawn import kill_group, start_child

T = TypeVar("T")
LOOPS = pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
NewLoop = Callable[[], asyncio.AbstractEventLoop]


def on(new_loop: NewLoop, coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(coro)


async def run(tmp_path: Path, script: str) -> tuple[bytes, int]:
    child = await start_child(["/bin/sh", "-c", script], cwd=tmp_path, env={"PATH": os.defpath})
    output = await asyncio.wait_for(child.stdout.read(), 10)
    return output, await asyncio.wait_for(child.wait(), 10)


@LOOPS
@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "waiter thread"])
def test_output_and_exit_status_arrive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_loop: NewLoop, pidfd: bool
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    output, code = on(new_loop, run(tmp_path, "pwd; echo to-stderr >&2; exit 3"))
    assert output.decode().splitlines() == [str(tmp_path), "to-stderr"] and code == 3


@LOOPS
def test_a_killed_group_ends_with_the_signal(tmp_path: Path, new_loop: NewLoop) -> None:
    async def killed() -> tuple[int, int | None]:
        child = await start_child(["/bin/sh", "-c", "sleep 30 & wait"], cwd=tmp_path, env=None)
        kill_group(child)
        return await asyncio.wait_for(child.wait(), 10), child.returncode

    assert on(new_loop, killed()) == (-signal.SIGKILL, -signal.SIGKILL)


@LOOPS
def test_a_program_that_is_not_there_raises_naming_it(tmp_path: Path, new_loop: NewLoop) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        on(new_loop, start_child([str(tmp_path / "no-such-program")], cwd=tmp_path, env=None))
