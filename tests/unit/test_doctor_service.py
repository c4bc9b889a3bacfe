"""``netclaw doctor`` beside the system service: the daemon is the service's user, not the
one running doctor (``sudo``: root). Who that is (:func:`netclaw.process.system.service_user`: the
running service's real uid, else the unit's ``User=``, else the state directory's owner),
the files checked against that user, and the shell sandbox tried as the service starts it —
as its user, inside its mount namespace. ``systemctl`` is a script on ``PATH`` answering
as systemd does; the processes, users and namespaces are real. Under a real systemd:
tests/e2e/test_deploy.py."""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netclaw import config as config_module
from netclaw.cli._doctor import cmd_doctor
from netclaw.config import ShellConfig
from netclaw.process import system
from netclaw.process.system import ServiceUser, service_user
from netclaw.tools._sandbox import Bubblewrap, Limits, _inside, runner_for, why_not_tried

REAL_WHICH = shutil.which
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (as `sudo netclaw doctor` runs)")


class Systemctl:
    """A ``systemctl`` on PATH: ``show`` prints :attr:`answer`; every call is logged."""

    def __init__(self, bin_dir: Path) -> None:
        self.log = bin_dir / "systemctl.log"
        self.answer_file = bin_dir / "systemctl.answer"
        self.answer_file.write_text("LoadState=not-found\n")
        script = bin_dir / "systemctl"
        script.write_text(
            f'#!/bin/sh\necho "$@" >> {self.log}\ncat {self.answer_file}\nexit ${{SYSTEMCTL_EXIT:-0}}\n'
        )
        script.chmod(0o755)

    def answers(self, **properties: object) -> None:
        self.answer_file.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Systemctl:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return Systemctl(bin_dir)


@pytest.fixture
def system_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's /etc/netclaw/netclaw.json is."""
    path = tmp_path / "etc" / "netclaw" / "netclaw.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    for name in list(os.environ):
        if name.startswith("NETCLAW_") or name in ("STATE_DIRECTORY", "INVOCATION_ID"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(system, "SYSTEM_CONFIG", path)
    monkeypatch.setattr(system, "SYSTEM_STATE_DIR", tmp_path / "var" / "lib" / "netclaw")
    monkeypatch.setattr(config_module, "SYSTEM_CONFIG", path)
    return path


def nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")


@pytest.fixture
def a_process() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


# -- who the service is -----------------------------------------------------------------------


def test_only_the_system_config_asks_systemd(
    systemctl: Systemctl, system_config: Path, tmp_path: Path
) -> None:
    own = tmp_path / "netclaw.json"
    own.write_text("{}")
    systemctl.answers(LoadState="loaded", MainPID=0, User="root")
    # A person's own config beside their own `netclaw run`: the daemon is whoever runs it.
    assert service_user(own, tmp_path) is None and service_user(None, tmp_path) is None
    assert systemctl.calls() == []
    assert service_user(system_config, tmp_path) is not None
    assert systemctl.calls() and systemctl.calls()[0].startswith("show netclaw.service ")


def test_no_unit_or_no_systemd_is_no_service(
    systemctl: Systemctl, system_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    systemctl.answers(LoadState="not-found", MainPID=0, User="")
    assert service_user(system_config, tmp_path) is None
    # As in a container that did not boot systemd.
    systemctl.answer_file.write_text("System has not been booted with systemd as init system (PID 1).\n")
    monkeypatch.setenv("SYSTEMCTL_EXIT", "1")
    assert service_user(system_config, tmp_path) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no systemctl at all
    assert service_user(system_config, tmp_path) is None


def test_the_running_service_is_its_real_uid(
    systemctl: Systemctl, system_config: Path, tmp_path: Path, a_process: subprocess.Popen[bytes]
) -> None:
    # The unit says someone else: what runs now (and owns what it writes) wins.
    systemctl.answers(LoadState="loaded", MainPID=a_process.pid, User="somebody-else", DynamicUser="yes")
    found = service_user(system_config, tmp_path)
    assert found == ServiceUser(
        os.getuid(),
        os.getgid(),
        pwd.getpwuid(os.getuid()).pw_name,
        f"the running service (pid {a_process.pid})",
        a_process.pid,
    )


def test_a_stopped_service_is_the_units_user_or_the_state_directorys_owner(
    systemctl: Systemctl, system_config: Path, tmp_path: Path
) -> None:
    user = nobody()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a MainPID that has just exited: its /proc entry is gone
    systemctl.answers(LoadState="loaded", MainPID=gone.pid, User="nobody", Group="", DynamicUser="yes")
    assert service_user(system_config, tmp_path) == ServiceUser(
        user.pw_uid, user.pw_gid, "nobody", "the unit's User=nobody"
    )
    # A dynamic user (no such name while it does not run): systemd hands it the uid owning
    # the state directory again, so that owner is who runs next.
    state = tmp_path / "state"
    state.mkdir()
    systemctl.answers(LoadState="loaded", MainPID=0, User="netclaw-dyn-7f3", DynamicUser="yes")
    found = service_user(system_config, state)
    assert found is not None and (found.uid, found.gid) == (os.getuid(), os.getgid())
    assert found.found == f"the owner of {state}" and found.pid is None
    assert service_user(system_config, tmp_path / "no-such-dir") is None
    # No User= and no DynamicUser=: systemd runs it as root.
    systemctl.answers(LoadState="loaded", MainPID=0, User="", DynamicUser="no")
    assert service_user(system_config, state) == ServiceUser(0, 0, "root", "the unit (no User=)")


# -- the files --------------------------------------------------------------------------------


def doctor(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[bool, str]]:
    """``netclaw doctor --json --config CONFIG``: each check's (ok, detail)."""
    cmd_doctor(argparse.Namespace(config=str(config), json=True))
    out = json.loads(capsys.readouterr().out)
    return {c["check"]: (c["ok"], c["detail"]) for c in out["checks"]}


def private_state(tmp_path: Path, config: Path, **tools: object) -> Path:
    """A data dir as the daemon leaves it (0700, files 0600), named by ``config``, whose
    provider and gateway answer nowhere (their checks fail fast and are not looked at)."""
    data = tmp_path / "state"
    data.mkdir(mode=0o700)
    for name in ("netclaw.db", "control.token", "netclaw.lock"):
        (data / name).touch(mode=0o600)
    config.write_text(
        json.dumps(
            {
                "data_dir": str(data),
                "providers": {"local": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
                "gateway": {"port": 9},
                "tools": {"workspace_dir": str(tmp_path / "workspace"), **tools},
            }
        )
    )
    return data


def test_files_are_checked_against_the_services_user(
    systemctl: Systemctl, system_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files of the person running doctor, where the service runs as nobody: not the
    daemon's, whatever their modes say (before, they passed: doctor compared with itself)."""
    user = nobody()
    if user.pw_uid == os.getuid():
        pytest.skip("runs as nobody, the service's user here")
    data = private_state(tmp_path, system_config)
    systemctl.answers(LoadState="loaded", MainPID=0, User="nobody", DynamicUser="yes")
    ok, detail = doctor(system_config, capsys)["files"]
    assert not ok, detail
    assert detail.startswith(
        f"not owned by the service's user nobody (uid {user.pw_uid}, from the unit's User=nobody): "
        f"state belongs to uid {os.getuid()}, netclaw.db belongs to uid {os.getuid()}"
    ), detail
    assert detail.endswith(f"fix with chown -R nobody:{grp.getgrgid(user.pw_gid).gr_name} {data}"), detail
    assert "readable beyond" not in detail  # the modes are right: no chmod to suggest


@AS_ROOT
def test_sudo_doctor_passes_the_services_private_files(
    systemctl: Systemctl, system_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/deploy.md's install: root runs doctor, the service's user owns its state (before:
    `[FAIL] files: readable beyond their owner … belongs to uid …, not to this user`)."""
    user = nobody()
    data = private_state(tmp_path, system_config)
    for path in (data, *data.iterdir()):
        os.chown(path, user.pw_uid, user.pw_gid)
    systemctl.answers(LoadState="loaded", MainPID=0, User="nobody", DynamicUser="yes")
    assert doctor(system_config, capsys)["files"] == (
        True,
        f"{data} is private (0700, files 0600, owned by the service's user nobody)",
    )
    # One file root left behind there: named, with the chown that fixes it; a loose mode too.
    os.chown(data / "netclaw.lock", 0, 0)
    (data / "control.token").chmod(0o644)
    ok, detail = doctor(system_config, capsys)["files"]
    assert not ok
    assert f"readable beyond their owner: control.token is 644; fix with chmod 700 {data}" in detail, detail
    assert "netclaw.lock belongs to uid 0; fix with chown -R nobody:" in detail, detail


def test_beside_ones_own_daemon_the_files_are_ones_own(
    systemctl: Systemctl, system_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not the system config: as before, the files are the doctor's own user's."""
    config = tmp_path / "netclaw.json"
    data = private_state(tmp_path, config)
    systemctl.answers(LoadState="loaded", MainPID=0, User="nobody")
    assert doctor(config, capsys)["files"] == (True, f"{data} is private (0700, files 0600)")
    assert systemctl.calls() == []
    (data / "netclaw.db").chmod(0o644)
    ok, detail = doctor(config, capsys)["files"]
    assert not ok and detail == (
        f"readable beyond their owner: netclaw.db is 644; fix with chmod 700 {data} && chmod 600 {data}/*"
    )


# -- the shell sandbox ------------------------------------------------------------------------


def test_the_probe_enters_the_service_as_whom_it_starts_commands(tmp_path: Path) -> None:
    service = ServiceUser(997, 996, "netclaw", "the running service (pid 4242)", 4242)
    enter = ["--target=4242", "--mount"]
    # The service's own user starts bubblewrap.
    launch = _inside(service, Bubblewrap(tmp_path, Limits()).launch("true", "none"))
    assert launch.argv[1:6] == [*enter, "--setuid=997", "--setgid=996", "--"]
    assert launch.argv[0].endswith("nsenter") and launch.argv[6] == "bwrap"
    assert (launch.user, launch.group) == (None, None)  # nsenter drops to them after entering
    # A service running as root starts it as tools.shell.sandbox_uid.
    launch = _inside(service, Bubblewrap(tmp_path, Limits(), run_as=(65534, 65533)).launch("true", "none"))
    assert launch.argv[1:6] == [*enter, "--setuid=65534", "--setgid=65533", "--"]


def test_a_service_not_running_is_not_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stopped = ServiceUser(997, 997, "netclaw", "the unit's User=netclaw")
    assert why_not_tried(stopped) == "the service is not running"
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\ntouch {tmp_path / 'started'}\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: str(fake) if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    runner = runner_for(ShellConfig(enabled=True), tmp_path, service=stopped)
    assert runner.name == "bwrap" and not (tmp_path / "started").exists()
    running = ServiceUser(997, 997, "netclaw", "the running service (pid 4242)", 4242)
    assert why_not_tried(running) == (
        None if os.geteuid() == 0 else "only root can try it as the service's user"
    )


@pytest.fixture
def service_in_its_own_mount_namespace() -> Iterator[tuple[int, str]]:
    """A process as a systemd service is one: its own mount namespace, its own user (4321,
    with no name here). Its pid, and its mount namespace's id."""
    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("needs unshare and setpriv (util-linux)")
    process = subprocess.Popen(
        ["unshare", "--mount", "setpriv", "--reuid=4321", "--regid=4321", "--clear-groups", "sleep", "600"]
    )
    try:
        status = Path(f"/proc/{process.pid}/status")
        deadline = time.monotonic() + 10
        while "\nUid:\t4321\t" not in status.read_text():  # until setpriv has run
            assert time.monotonic() < deadline, status.read_text()
            time.sleep(0.02)
        namespace = os.readlink(f"/proc/{process.pid}/ns/mnt")
        assert namespace != os.readlink("/proc/self/ns/mnt")
        yield process.pid, namespace
    finally:
        process.kill()
        process.wait()


@AS_ROOT
def test_sudo_doctor_tries_the_sandbox_inside_the_service_as_its_user(
    systemctl: Systemctl,
    system_config: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    service_in_its_own_mount_namespace: tuple[int, str],
) -> None:
    """Root runs doctor; the service runs as uid 4321 in its own mount namespace. bubblewrap
    (a script here) starts only as that user, in that namespace: as the service would start
    it. (Before: doctor took itself, root, for the daemon and tried it as sandbox_uid
    65534 where it stood: `[FAIL] shell sandbox … the daemon runs as root`.)"""
    pid, namespace = service_in_its_own_mount_namespace
    home = Path(tempfile.mkdtemp())  # where uid 4321 reaches it
    home.chmod(0o755)
    seen = home / "seen"
    seen.touch(mode=0o666)
    seen.chmod(0o666)
    fake = home / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$(id -u) $(readlink /proc/self/ns/mnt)" > {seen}\n'
        f'[ "$(id -u) $(readlink /proc/self/ns/mnt)" = "4321 {namespace}" ] && exit 0\n'
        "echo 'bwrap: Can't find source path: Permission denied' >&2; exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(
        shutil, "which", lambda name, **kw: str(fake) if name == "bwrap" else REAL_WHICH(name, **kw)
    )
    data = private_state(tmp_path, system_config, shell={"enabled": True})
    for path in (data, *data.iterdir()):
        os.chown(path, 4321, 4321)
    systemctl.answers(LoadState="loaded", MainPID=pid, User="netclaw", DynamicUser="yes")
    try:
        checks = doctor(system_config, capsys)
        assert seen.read_text().split() == ["4321", namespace]
    finally:
        shutil.rmtree(home)
    assert checks["shell sandbox"] == (
        True,
        "bubblewrap starts a sandbox in the service, as its user uid 4321",
    )
    assert checks["files"] == (
        True,
        f"{data} is private (0700, files 0600, owned by the service's user uid 4321)",
    )
