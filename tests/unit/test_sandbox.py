"""Choosing and checking the shell's runner: a missing or broken bubblewrap stops start-up
with what to do (under the hardened systemd unit: its drop-in); a bubblewrap that hangs
after a refused call is reported, not waited for; the sandbox's mounts follow the settings
(network, masked data dir, extra read-only paths). The boundaries themselves are shown
through the daemon in tests/integration/test_sandbox.py, and under the systemd unit in
tests/e2e/test_deploy.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from netclaw.config import ShellConfig
from netclaw.errors import ConfigError
from netclaw.tools._sandbox import (
    DROP_IN,
    INSTALL_COMMAND,
    Bubblewrap,
    HostRunner,
    Limits,
    probe,
    runner_for,
    what_to_do,
)

REAL_WHICH = shutil.which
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def not_a_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INVOCATION_ID", raising=False)  # as when not started by systemd


def fake_bwrap(script: str) -> Path:
    """An executable ``bwrap`` the sandbox's user can reach (when the tests run as root)."""
    home = Path(tempfile.mkdtemp())
    home.chmod(0o755)
    fake = home / "bwrap"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return fake


def test_no_bubblewrap_is_a_start_up_error_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: None if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    with pytest.raises(ConfigError) as caught:
        runner_for(ShellConfig(enabled=True), tmp_path)
    message = str(caught.value)
    assert "apt-get install bubblewrap" in message and 'tools.shell.sandbox to "none"' in message


def test_a_bubblewrap_that_cannot_make_namespaces_is_a_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_bwrap("echo 'bwrap: No permissions to create new namespace' >&2\nexit 1")
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: str(fake) if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    with pytest.raises(ConfigError, match="No permissions to create new namespace") as caught:
        runner_for(ShellConfig(enabled=True), tmp_path)
    assert "unprivileged user namespaces" in str(caught.value) and DROP_IN not in str(caught.value)
    # Started by systemd: the unit from deploy/ needs its drop-in, and the error says how.
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
    with pytest.raises(ConfigError) as caught:
        runner_for(ShellConfig(enabled=True), tmp_path)
    assert DROP_IN in str(caught.value) and INSTALL_COMMAND in str(caught.value)
    shutil.rmtree(fake.parent)


def test_under_the_hardened_unit_the_error_names_the_drop_in(tmp_path: Path) -> None:
    """ProcSubset=pid (deploy/netclaw.service) hides /proc/sys, which bubblewrap reads and
    nothing but such a unit hides: then the fix is the drop-in, whatever bubblewrap said."""
    hint = what_to_do(proc_sys=tmp_path / "missing")
    assert "/proc/sys is hidden" in hint and DROP_IN in hint and INSTALL_COMMAND in hint
    assert "systemctl restart netclaw" in hint
    # The message points at real things: the file, and the option of install.sh installing it.
    assert (REPO / DROP_IN).is_file()
    assert "--shell-sandbox" in (REPO / "deploy" / "install.sh").read_text()
    assert INSTALL_COMMAND.endswith("deploy/install.sh --shell-sandbox")


def test_no_bubblewrap_under_systemd_names_the_install_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: None if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    with pytest.raises(ConfigError) as caught:
        runner_for(ShellConfig(enabled=True), tmp_path)
    assert "apt-get install bubblewrap" in str(caught.value) and INSTALL_COMMAND in str(caught.value)


def test_a_bubblewrap_that_hangs_after_an_error_is_reported_and_killed(tmp_path: Path) -> None:
    """A system call filter refusing capset makes bubblewrap's parent die while its child
    waits forever, holding the output open: the probe gives up at its timeout with what
    bubblewrap said, and nothing it started keeps running."""
    pid_file = tmp_path / "child.pid"
    fake = fake_bwrap(
        f"echo 'bwrap: capset failed: Operation not permitted' >&2\nsleep 600 & echo $! > {pid_file}\nexit 1"
    )
    started = time.monotonic()
    problem = probe(Bubblewrap(tmp_path, Limits(), bwrap=str(fake)), timeout_s=2)
    assert problem == "bwrap: capset failed: Operation not permitted (and then it hung)"
    assert time.monotonic() - started < 60
    child = pid_file.read_text().strip()
    stat = Path(f"/proc/{child}/stat")

    def dead() -> bool:  # gone, or a zombie left to whoever reaps orphans here
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        return True

    # SIGKILL closes its files (the probe's answer) a moment before the state says so.
    deadline = time.monotonic() + 5
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dead(), stat.read_text()
    shutil.rmtree(fake.parent)


def test_a_workspace_the_sandbox_user_cannot_reach_is_named(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only when the daemon runs as root does the sandbox change user")
    (tmp_path / "ws").mkdir()
    tmp_path.chmod(0o700)
    with pytest.raises(ConfigError, match=r"uid 65534.*tools.shell.sandbox_uid.*o\+x"):
        runner_for(ShellConfig(enabled=True), tmp_path / "ws")


def test_the_opt_out_runs_on_the_host_without_secret_variables(tmp_path: Path) -> None:
    runner = runner_for(
        ShellConfig(enabled=True, sandbox="none"), tmp_path, environ={"HOME": "/h", "API_TOKEN": "x"}
    )
    assert isinstance(runner, HostRunner)
    launch = runner.launch("echo hi", "none")
    assert launch.env == {"HOME": "/h"} and launch.argv[-3:] == ["/bin/sh", "-c", "echo hi"]
    # On the host the command is the daemon's user, whose threads RLIMIT_NPROC would count
    # (one per resident session): no process limit there, the others stay.
    limited = HostRunner(tmp_path, Limits(), {}, prlimit="/usr/bin/prlimit").launch("true", "none").argv
    assert "--cpu=60" in limited and not any(a.startswith("--nproc") for a in limited)
    assert "--nproc=64" in Limits().prlimit("/usr/bin/prlimit")


def test_mounts_follow_the_settings(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    runner = Bubblewrap(
        workspace, Limits(), hidden=(workspace / "data", tmp_path / "elsewhere"), ro_paths=(tmp_path,)
    )
    closed = runner.options("none")
    assert "--share-net" not in closed and "--unshare-all" in closed
    assert "--share-net" in runner.options("host")
    masked = [closed[i + 1] for i, opt in enumerate(closed) if opt == "--tmpfs"]
    # under the workspace, and under an extra read-only path: both masked
    assert masked == ["/tmp", str(workspace / "data"), str(tmp_path / "elsewhere")]
    assert closed[closed.index("--bind") + 1 : closed.index("--bind") + 3] == [str(workspace)] * 2
    assert closed.index("--remount-ro") > closed.index("--bind")
    assert "--clearenv" in closed and "--die-with-parent" in closed and "--new-session" in closed


def test_doctor_reports_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from netclaw.cli._doctor import _doctor_sandbox
    from netclaw.config import Settings

    found: list[tuple[bool, str, str]] = []
    settings = Settings(tools={"workspace_dir": tmp_path, "shell": {"enabled": True, "sandbox": "none"}})
    _doctor_sandbox(settings, lambda *a: found.append(a))
    assert found == [(True, "shell sandbox", "off (sandbox: none): commands run on the host")]
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: None if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    _doctor_sandbox(
        Settings(tools={"workspace_dir": tmp_path, "shell": {"enabled": True}}), lambda *a: found.append(a)
    )
    assert found[-1][0] is False and "apt-get install bubblewrap" in found[-1][2]
