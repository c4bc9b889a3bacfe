"""Choosing and checking the shell's runner: a missing or broken bubblewrap stops start-up
with what to do; the sandbox's mounts follow the settings (network, masked data dir, extra
read-only paths). The boundaries themselves are shown through the daemon in
tests/integration/test_sandbox.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from netclaw.config import ShellConfig
from netclaw.errors import ConfigError
from netclaw.tools._sandbox import Bubblewrap, HostRunner, Limits, runner_for

REAL_WHICH = shutil.which


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
    home = Path(tempfile.mkdtemp())  # reachable by the sandbox's user when the tests run as root
    home.chmod(0o755)
    fake = home / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: str(fake) if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    with pytest.raises(ConfigError, match="No permissions to create new namespace") as caught:
        runner_for(ShellConfig(enabled=True), tmp_path)
    assert "unprivileged user namespaces" in str(caught.value)
    shutil.rmtree(home)


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
