"""The shell tool's bubblewrap sandbox, each boundary shown from inside a command that the
model asks the real daemon to run (real bubblewrap, real processes): writes outside the
workspace fail, /etc/shadow and the daemon's files and environment are invisible, the
network is unreachable (and reachable when the audience allows it), a fork bomb stops at
the process limit, and runaway commands — by time, by CPU, by memory, by file size — are
killed or refused."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonHandle, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

StartDaemon = Callable[..., DaemonHandle]
CANARY = "NETCLAW_SANDBOX_CANARY"


@pytest.fixture
def sandbox_home() -> Iterator[Path]:
    """A folder the sandbox's user can reach (pytest's tmp_path is root's alone when the
    tests run as root, and the sandbox then runs as nobody)."""
    home = Path(tempfile.mkdtemp(prefix="netclaw-sandbox-"))
    home.chmod(0o711)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def shell_daemon(start_daemon: StartDaemon, home: Path, **shell: Any) -> DaemonHandle:
    audience = shell.pop("audience", {})
    return start_daemon(
        tools={
            "workspace_dir": str(home / "workspace"),
            "shell": {"enabled": True, "timeout_s": 8, **shell},
        },
        audiences={"personal": {"tools": ["shell", "read_file", "write_file"], **audience}},
    )


_sessions = iter(range(1_000_000))


def run(handle: DaemonHandle, scripted: ScriptedOpenAIThread, command: str) -> str:
    """Have the model call ``shell`` with ``command``; the tool result the model saw."""
    sid = f"cli:sandbox-{next(_sessions)}"
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("shell", {"command": command})]), Reply(text="done"))
    response = handle.send(sid, "run it", wait=True)
    assert response.status_code == 200, response.text
    results = [m for m in handle.transcript(sid) if m["role"] == "tool"]
    assert len(results) == 1
    content: str = results[0]["content"]
    if results[0].get("is_error"):
        return content  # a refusal or a timeout: netclaw's own words
    # A command's output reaches the model labelled as untrusted (netclaw/security/trust.py).
    labelled = re.fullmatch(
        r'<untrusted-content source="shell" id="([0-9a-f]+)">\n(.*)\n</untrusted-content id="\1">',
        content,
        re.DOTALL,
    )
    assert labelled is not None, content
    return labelled.group(2)


def test_only_the_workspace_and_a_private_tmp_are_writable(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    handle = shell_daemon(start_daemon, sandbox_home)
    marker = f"netclaw-{uuid.uuid4().hex}"
    out = run(
        handle,
        scripted,
        f"echo inside > note.txt && cat note.txt; touch /usr/{marker} /{marker} /etc/{marker}; "
        f"echo private > /tmp/{marker} && cat /tmp/{marker}; "
        f"touch /var/tmp/{marker}; touch {sandbox_home}/{marker}; pwd",
    )
    assert "inside" in out and "private" in out
    assert out.count("Read-only file system") >= 3, out
    assert f"touch: cannot touch '/var/tmp/{marker}'" in out
    assert str(sandbox_home / "workspace") in out  # the command starts in the workspace
    assert (sandbox_home / "workspace" / "note.txt").read_text() == "inside\n"
    for path in (Path("/usr") / marker, Path("/") / marker, Path("/etc") / marker, Path("/tmp") / marker):
        assert not path.exists(), path
    assert not (sandbox_home / marker).exists()  # it went to the private /tmp
    assert out.endswith("[exit code 0]")


def test_system_secrets_and_the_daemons_files_and_environment_are_invisible(
    start_daemon: StartDaemon,
    scripted: ScriptedOpenAIThread,
    sandbox_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = uuid.uuid4().hex
    monkeypatch.setenv(CANARY, canary)  # the daemon's environment (it runs in this process)
    handle = shell_daemon(start_daemon, sandbox_home)
    data_dir = handle.daemon.settings.data_dir
    assert (data_dir / "control.token").exists() and (data_dir / "netclaw.db").exists()
    out = run(
        handle,
        scripted,
        f"cat /etc/shadow; ls {data_dir}; cat {data_dir}/control.token; ls /root /home /var; "
        "env; cat /proc/*/environ | tr '\\0' '\\n'; ps ax 2>/dev/null || ls /proc",
    )
    assert "/etc/shadow: No such file or directory" in out
    assert f"cannot access '{data_dir}': No such file or directory" in out
    assert handle.token not in out
    assert canary not in out and CANARY not in out
    assert "OPENAI" not in out and "PYTHONPATH" not in out
    assert "/root': No such file" in out or "/root: No such file" in out


def test_the_data_dir_is_masked_under_a_path_the_sandbox_sees(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    # A wide ro_paths: the data directory lies under a folder the sandbox is shown. (Inside
    # the workspace it stops start-up: tests/integration/test_daemon_files.py.)
    data = sandbox_home / "data"
    handle = start_daemon(
        data_dir=str(data),
        tools={
            "workspace_dir": str(sandbox_home / "workspace"),
            "shell": {"enabled": True, "ro_paths": [str(sandbox_home)]},
        },
        audiences={"personal": {"tools": ["shell"]}},
    )
    out = run(handle, scripted, f"ls -A {data}; echo listed; cat {data}/control.token")
    assert handle.token not in out
    assert "netclaw.db" not in out
    # An empty folder in its place (not merely one the sandbox's user may not open).
    assert out.startswith("listed\n") and "Permission denied" not in out.split("listed")[0], out


class Listener:
    """A TCP server on the host's loopback that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def test_the_network_is_unreachable_unless_the_audience_allows_it(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path, listener: Listener
) -> None:
    connect = f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{listener.port}' && echo connected"
    closed = shell_daemon(start_daemon, sandbox_home)
    out = run(closed, scripted, f"{connect}; bash -c 'echo > /dev/tcp/10.0.0.1/80'")
    assert "connected" not in out and "Connection refused" in out  # its own, empty loopback
    assert "Network is unreachable" in out
    assert listener.accepted == 0
    closed.stop()

    opened = shell_daemon(start_daemon, sandbox_home, audience={"shell_network": "host"})
    assert "connected" in run(opened, scripted, connect)
    assert listener.accepted == 1


def processes_running(marker: str) -> int:
    """Processes on this machine whose command line holds ``marker``."""
    found = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found += 1
        except OSError:
            continue
    return found


def test_a_fork_bomb_stops_at_the_process_limit_and_is_killed_whole(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    handle = shell_daemon(start_daemon, sandbox_home, max_processes=16, timeout_s=4)
    marker = f"bomb-{uuid.uuid4().hex}"
    most = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal most
        while not stop.is_set():
            most = max(most, processes_running(marker))
            time.sleep(0.02)  # a sampler's period, not a wait

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = run(handle, scripted, f"f(){{ f|f& }}; f; sleep 60 # {marker}")
    finally:
        stop.set()
        watcher.join()
    assert "timed out after 4s and was killed" in out
    assert "Cannot fork" in out or "fork" in out.lower()
    assert 0 < most <= 16 + 1  # the limit, plus bubblewrap's own process in the namespace
    wait_until(lambda: processes_running(marker) == 0, what="every process of the bomb to be gone")
    assert "[exit code 0]" in run(handle, scripted, "echo still fine")


def test_runaway_commands_are_killed_by_time_cpu_memory_and_file_size(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    timed = shell_daemon(start_daemon, sandbox_home, timeout_s=3)
    marker = f"sleepy-{uuid.uuid4().hex}"
    out = run(timed, scripted, f"echo started; sleep 600 & sleep 600 # {marker}")
    assert "started" in out and "timed out after 3s and was killed" in out
    assert processes_running(marker) == 0
    timed.stop()

    # A wall-clock limit far away: the CPU limit must be what stops the loop (under load, one
    # CPU second can take many seconds).
    handle = shell_daemon(start_daemon, sandbox_home, timeout_s=120, cpu_s=1, memory_mb=128, max_file_mb=1)
    out = run(handle, scripted, "sh -c 'while :; do :; done'; echo cpu=$?")
    assert "cpu=137" in out or "cpu=152" in out  # SIGKILL / SIGXCPU at the CPU limit
    out = run(handle, scripted, 'python3 -c "b = bytearray(512 * 1024 * 1024)"; echo mem=$?')
    assert "MemoryError" in out and "mem=1" in out
    out = run(handle, scripted, "head -c 3000000 /dev/zero > big; echo size=$?; wc -c < big")
    assert "size=153" in out and "1048576" in out  # SIGXFSZ at 1 MiB


def test_output_is_capped(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    handle = shell_daemon(start_daemon, sandbox_home, max_output_bytes=1000)
    out = run(handle, scripted, "yes 0123456789 | head -c 200000")
    assert "[output cut: 200,000 bytes, the first 1,000 shown]" in out


def test_files_the_file_tools_write_are_the_sandboxs_to_change(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, sandbox_home: Path
) -> None:
    handle = shell_daemon(start_daemon, sandbox_home)
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "notes/a.txt", "content": "one\n"})]),
        Reply(text="written"),
    )
    assert handle.send("cli:files", "write it", wait=True).status_code == 200
    out = run(handle, scripted, "echo two >> notes/a.txt && cat notes/a.txt && touch notes/b")
    assert "one\ntwo" in out and out.endswith("[exit code 0]")
