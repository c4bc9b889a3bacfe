"""Where a shell command runs: inside a bubblewrap sandbox, or (an explicit opt-out) on the host.

The bubblewrap sandbox (``tools.shell.sandbox: bwrap``, the default) shows the command a
read-only system — ``/usr`` (and the ``/bin``, ``/lib``… links into it), a short list of
harmless files from ``/etc``, and any ``tools.shell.ro_paths`` — with the workspace as the
only writable path besides a private ``/tmp``. It gets its own user, PID, IPC, UTS and
(unless the audience allows the network) network namespaces, no capabilities, a new
session (no terminal to inject into), an environment of five variables, and it dies with
its parent. Inside, ``prlimit`` bounds each process's CPU seconds, address space and file
size, and the number of processes (so a fork bomb stops at the limit). The daemon's data
directory is never visible, even when it lies under a path the sandbox sees.

When the daemon runs as root, commands never do: bubblewrap is started as
``tools.shell.sandbox_uid`` (it then owns the workspace), because root's own processes are
exempt from the process limit, and root owns ``/etc/shadow``-like files anyway.

What it does not protect: a kernel bug reachable from an unprivileged user namespace; the
workspace itself (commands may read and change everything in it, and files the file tools
wrote); anything under ``ro_paths``; and with ``network: host``, the network.

Under the hardened systemd unit (deploy/netclaw.service) bubblewrap cannot start until the
unit's drop-in deploy/netclaw.service.d/shell-sandbox.conf relaxes what it needs; the
start-up check recognises that unit and names the drop-in (:func:`what_to_do`).
``netclaw doctor`` (as root, beside that service) checks the sandbox the service would run:
as its user, inside its mount namespace (:func:`runner_for`'s ``service``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from netclaw.config import ShellConfig
from netclaw.errors import ConfigError
from netclaw.process.system import ServiceUser

Network = Literal["none", "host"]

# Files from /etc a command needs to run ordinary tools: names, libraries, time zones,
# certificates, the alternatives links many /usr/bin programs point through. No secrets.
ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
# The usual links of a merged-/usr system (directories of their own on older ones).
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of each process of a command (``prlimit``)."""

    cpu_s: int = 60
    memory_bytes: int = 2048 * 1024 * 1024
    processes: int = 64
    file_bytes: int = 256 * 1024 * 1024

    @classmethod
    def of(cls, config: ShellConfig) -> Limits:
        mib = 1024 * 1024
        return cls(config.cpu_s, config.memory_mb * mib, config.max_processes, config.max_file_mb * mib)

    def prlimit(self, prlimit: str, *, processes: bool = True) -> list[str]:
        """``processes=False`` where the command shares the daemon's user (``sandbox: none``):
        RLIMIT_NPROC counts every process and thread of that user, the daemon's own threads
        (one per resident session) included, so a limit would refuse the command's forks."""
        return [
            prlimit,
            f"--cpu={self.cpu_s}",
            f"--as={self.memory_bytes}",
            *([f"--nproc={self.processes}"] if processes else []),
            f"--fsize={self.file_bytes}",
            "--core=0",
            "--",
        ]


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one command: argv, environment, and the uid/gid to start it as."""

    argv: list[str]
    env: dict[str, str]
    user: int | None = None
    group: int | None = None
    cwd: Path | None = None


class Runner(ABC):
    """Turns a command line into a :class:`Launch`."""

    name: str = "none"

    @abstractmethod
    def launch(self, command: str, network: Network) -> Launch: ...


@dataclass(frozen=True, slots=True)
class HostRunner(Runner):
    """``sandbox: none``: ``/bin/sh -c`` in the workspace as the daemon's user, with the
    resource limits (when ``prlimit`` is there) and no secret-looking variables."""

    workspace: Path
    limits: Limits
    environ: Mapping[str, str]
    prlimit: str | None = None
    name: str = "none"

    def launch(self, command: str, network: Network) -> Launch:
        limits = self.limits.prlimit(self.prlimit, processes=False) if self.prlimit else []
        return Launch([*limits, "/bin/sh", "-c", command], dict(self.environ), cwd=self.workspace)


@dataclass(frozen=True, slots=True)
class Bubblewrap(Runner):
    workspace: Path
    limits: Limits
    hidden: tuple[Path, ...] = ()  # never visible, even under a path the sandbox sees
    ro_paths: tuple[Path, ...] = ()
    run_as: tuple[int, int] | None = None  # (uid, gid) when the daemon is root
    bwrap: str = "bwrap"
    prlimit: str = "/usr/bin/prlimit"
    disable_userns: bool = True  # bubblewrap ≥ 0.8: no nested user namespaces inside
    name: str = "bwrap"

    def launch(self, command: str, network: Network) -> Launch:
        uid, gid = self.run_as if self.run_as is not None else (None, None)
        argv = [
            self.bwrap,
            *self.options(network),
            *self.limits.prlimit(self.prlimit),
            "/bin/sh",
            "-c",
            command,
        ]
        return Launch(argv, self.environment(), user=uid, group=gid)

    def environment(self) -> dict[str, str]:
        # bubblewrap itself gets no more than the command: nothing of the daemon's
        # environment is readable inside, not even through /proc.
        return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}

    def options(self, network: Network) -> list[str]:
        ws = str(self.workspace)
        opts = [
            "--unshare-all",
            "--unshare-user",
            *(["--share-net"] if network == "host" else []),
            *(["--disable-userns"] if self.disable_userns else []),
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for name in USR_LINKS:
            path = Path("/") / name
            if path.is_symlink():
                opts += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                opts += ["--ro-bind", str(path), str(path)]
        for name in ETC_FILES:
            path = Path("/etc") / name
            if path.exists():
                opts += ["--ro-bind", str(path), str(path)]
        for path in self.ro_paths:
            if path.exists():
                opts += ["--ro-bind", str(path), str(path)]
        opts += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", ws, ws]
        for path in self.hidden:
            if any(_under(path, seen) for seen in (self.workspace, *self.ro_paths)):
                opts += ["--tmpfs", str(path)]  # masked: an empty directory in its place
        opts += [
            "--remount-ro",
            "/",
            "--chdir",
            ws,
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
            "--setenv",
            "HOME",
            ws,
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "TERM",
            "dumb",
            "--",
        ]
        return opts


def _under(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def runner_for(
    config: ShellConfig,
    workspace: Path,
    *,
    hidden: Iterable[Path] = (),
    environ: Mapping[str, str] | None = None,
    service: ServiceUser | None = None,
) -> Runner:
    """The runner ``config.sandbox`` asks for, checked: a sandbox that cannot start here is a
    :class:`ConfigError` saying what to do, raised at start-up rather than at the first call.

    ``service``: check it for that system service rather than for this process (``netclaw
    doctor`` as root beside it). The runner is the one the service makes (as its user), and
    the probe starts as that user inside the running service's mount namespace: there the
    state directory is reachable (under ``DynamicUser=`` it is in /var/lib/private, closed
    to every user on the host, the service's own included) and /proc is what the unit makes
    it (``ProcSubset=``, ``ProtectKernelTunables=``). Not the unit's system call filter: the
    service's own start-up tries that. When the sandbox cannot be tried so
    (:func:`why_not_tried`), only what is installed is checked."""
    limits = Limits.of(config)
    if config.sandbox == "none":
        return HostRunner(
            workspace, limits, clean_environment(environ or os.environ), shutil.which("prlimit")
        )
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit", path="/usr/bin:/bin")
    if bwrap is None:
        unit = (
            f" — under the systemd unit from deploy/, `{INSTALL_COMMAND}` in the netclaw checkout "
            "installs it and the drop-in the unit needs for it"
            if _under_systemd()
            else ""
        )
        raise ConfigError(
            "tools.shell.sandbox is 'bwrap' but bubblewrap is not installed: install it "
            f"(Debian/Ubuntu: apt-get install bubblewrap{unit}), or set tools.shell.sandbox to "
            '"none" to run shell commands unsandboxed as the daemon\'s user'
        )
    if prlimit is None or not prlimit.startswith("/usr/"):
        raise ConfigError(
            "tools.shell.sandbox: prlimit (util-linux) is not under /usr, so the sandbox cannot "
            'limit its commands; install util-linux, or set tools.shell.sandbox to "none"'
        )
    daemon_uid = service.uid if service is not None else os.geteuid()
    run_as = (config.sandbox_uid, config.sandbox_gid) if daemon_uid == 0 else None
    runner = Bubblewrap(
        workspace.resolve(),
        limits,
        hidden=tuple(p.resolve() for p in hidden),
        ro_paths=tuple(config.ro_paths),
        run_as=run_as,
        bwrap=bwrap,
        prlimit=prlimit,
    )
    if service is not None and why_not_tried(service) is not None:
        return runner
    problem = probe(runner, service=service)
    if problem is not None and "disable-userns" in problem:
        runner = dataclasses.replace(runner, disable_userns=False)  # an older bubblewrap
        problem = probe(runner, service=service)
    if problem is not None:
        if run_as is not None:
            problem += (
                f" (the daemon runs as root, so the sandbox runs as uid {run_as[0]}, set by "
                "tools.shell.sandbox_uid: that user must be able to reach bubblewrap and the "
                f"workspace {workspace}, so every folder above it needs o+x)"
            )
        elif service is not None:
            problem += f" (tried as the service's user {service.name}, inside the running service)"
        hint = (
            what_to_do(Path(f"/proc/{service.pid}/root") / OVERFLOWUID.relative_to("/"), under_systemd=True)
            if service is not None
            else what_to_do()
        )
        raise ConfigError(
            f"tools.shell.sandbox is 'bwrap' but bubblewrap cannot start a sandbox here: {problem}. "
            f'{hint}, or set tools.shell.sandbox to "none" to run shell commands '
            "unsandboxed as the daemon's user"
        )
    return runner


def why_not_tried(service: ServiceUser) -> str | None:
    """Why the sandbox cannot be tried as ``service`` would start it, or None when it can:
    that takes a running service (its mount namespace) and root (to enter it and become the
    service's user)."""
    if service.pid is None:
        return "the service is not running"
    if os.geteuid() != 0:
        return "only root can try it as the service's user"
    return None


# The systemd drop-in that lets bubblewrap work under deploy/netclaw.service, and how a
# system install adds it (with bubblewrap itself).
DROP_IN = "deploy/netclaw.service.d/shell-sandbox.conf"
INSTALL_COMMAND = "sudo deploy/install.sh --shell-sandbox"


def _under_systemd() -> bool:
    return bool(os.environ.get("INVOCATION_ID"))  # systemd sets it for every service it starts


OVERFLOWUID = Path("/proc/sys/kernel/overflowuid")  # bubblewrap reads it to map its user


def what_to_do(proc_sys: Path = OVERFLOWUID, *, under_systemd: bool | None = None) -> str:
    """The fix for a sandbox that cannot start, from two cheap signs: bubblewrap reads
    ``proc_sys``, which only a hardened systemd unit hides (``ProcSubset=pid``, as
    deploy/netclaw.service does); ``$INVOCATION_ID`` (unless ``under_systemd`` says) tells
    that the daemon is a systemd service."""
    if under_systemd is None:
        under_systemd = _under_systemd()
    if not proc_sys.exists():
        return (
            f"/proc/sys is hidden ({proc_sys} is missing): netclaw runs under a hardened systemd "
            "unit (ProcSubset=pid), whose sandbox also refuses the namespaces, netlink socket and "
            f"mounts bubblewrap needs. Add the drop-in {DROP_IN}, which relaxes exactly those "
            f"(each line says why): `{INSTALL_COMMAND}` in the netclaw checkout installs it with "
            "bubblewrap; then `sudo systemctl restart netclaw`"
        )
    if under_systemd:
        return (
            "netclaw runs under systemd: the unit from deploy/ needs the drop-in "
            f"{DROP_IN} (`{INSTALL_COMMAND}` in the netclaw checkout installs it), and a unit of "
            "your own must allow what that drop-in allows (each line says why); the kernel must "
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
        )
    return (
        "It needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a "
        "container run it with a seccomp profile that allows them)"
    )


def probe(runner: Runner, timeout_s: float = 20.0, *, service: ServiceUser | None = None) -> str | None:
    """Start ``true`` in the sandbox once; None when it works, else what went wrong. With a
    running ``service`` (this process root), as the service starts it: inside its mount
    namespace, as its user (or as the sandbox's user when the service is root)."""
    launch = runner.launch("true", "none")
    if service is not None:
        launch = _inside(service, launch)
    try:
        process = subprocess.Popen(
            launch.argv,
            env=launch.env,
            user=launch.user,
            group=launch.group,
            extra_groups=[] if launch.user is not None else None,
            cwd=launch.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own process group: when a refused call makes bubblewrap's parent die, its
            # child can wait forever (a system call filter without capset does that); on
            # timeout the group goes, and what bubblewrap said before is the answer.
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        try:
            stdout, stderr = process.communicate(timeout=5)  # with what it wrote before
        except subprocess.TimeoutExpired:
            stdout, stderr = b"", b""
        said = (stderr or stdout).decode(errors="replace").strip()
        return f"{said} (and then it hung)" if said else f"it did not finish within {timeout_s:g} s"
    if process.returncode != 0:
        return (stderr or stdout).decode(errors="replace").strip() or f"exit code {process.returncode}"
    return None


def _inside(service: ServiceUser, launch: Launch) -> Launch:
    """``launch`` started by ``nsenter`` (util-linux, beside prlimit) in the running service's
    mount namespace, which then becomes the user the service would start it as."""
    assert service.pid is not None, "a service that is not running cannot be entered"
    uid = service.uid if launch.user is None else launch.user
    gid = service.gid if launch.group is None else launch.group
    nsenter = shutil.which("nsenter", path="/usr/bin:/bin") or "nsenter"
    enter = [nsenter, f"--target={service.pid}", "--mount", f"--setuid={uid}", f"--setgid={gid}", "--"]
    return dataclasses.replace(launch, argv=[*enter, *launch.argv], user=None, group=None)


SECRET_NAME_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The daemon's environment without variables whose names look secret (``sandbox: none``)."""
    return {k: v for k, v in environ.items() if not any(w in k.upper() for w in SECRET_NAME_WORDS)}
