"""A child process run from the loop, whichever loop it is (docs/architecture.md, "Threads").

``subprocess.Popen`` starts it — as asyncio's own ``create_subprocess_exec`` does, on the
loop thread — because uvloop's spawning refuses ``user``, ``group`` and ``extra_groups``,
which a command run as another user needs. Its output is read through the loop
(``connect_read_pipe``) and its exit is seen on a pidfd, which becomes readable when the
process ends: no thread waits for it, and nothing reaps a child that is not its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class Child:
    """A started process: its ``pid`` (the leader of its own process group), its output
    (stdout and stderr together) as ``stdout``, and :meth:`wait`."""

    def __init__(self, popen: subprocess.Popen[bytes], stdout: asyncio.StreamReader) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._watch()

    @property
    def returncode(self) -> int | None:
        """The exit status once it is known; minus the signal's number if one ended it."""
        return self._popen.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def _watch(self) -> None:
        loop = self._exited.get_loop()
        pidfd_open = getattr(os, "pidfd_open", None)  # Linux only
        try:
            if pidfd_open is None:
                raise OSError("no pidfd_open here")
            fd = pidfd_open(self.pid)
        except OSError:  # not Linux, or a kernel before 5.3: a worker thread waits instead
            loop.run_in_executor(None, self._popen.wait).add_done_callback(self._waited)
            return

        def exited() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._settle(self._popen.wait())  # at once: the process is gone

        loop.add_reader(fd, exited)

    def _waited(self, done: asyncio.Future[int]) -> None:
        if not done.cancelled() and done.exception() is None:
            self._settle(done.result())

    def _settle(self, code: int) -> None:
        if not self._exited.done():
            self._exited.set_result(code)


async def start_child(
    argv: Sequence[str],
    *,
    cwd: str | Path | None,
    env: Mapping[str, str] | None,
    user: int | str | None = None,
    group: int | str | None = None,
) -> Child:
    """Start ``argv`` with no input and its output piped, in a new session (its own process
    group: :func:`kill_group` ends everything it started), as ``user``/``group`` when given
    (then with no supplementary groups). Raises what ``Popen`` raises when it cannot start."""
    # On the loop, as asyncio's create_subprocess_exec does: fork and exec take a few ms.
    popen = subprocess.Popen(  # noqa: ASYNC220
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        user=user,
        group=group,
        extra_groups=[] if user is not None else None,
        start_new_session=True,
    )
    try:
        assert popen.stdout is not None
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        child = Child(popen, reader)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), popen.stdout)
    except BaseException:
        _kill_group_of(popen.pid)  # cancelled (or failed) once it runs: nothing it started keeps running
        raise
    return child


def kill_group(child: Child) -> None:
    """SIGKILL the child's process group (what it started in the background too)."""
    _kill_group_of(child.pid)


def _kill_group_of(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
