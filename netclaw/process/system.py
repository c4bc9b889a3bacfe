"""Where a system install keeps things, and where the daemon may write.

``deploy/install.sh`` and ``netclaw init --system`` set a host up the way
``deploy/netclaw.service`` expects it: the config in ``/etc/netclaw``, the state (journal,
control token, workspace) in ``/var/lib/netclaw`` (the unit's ``StateDirectory=``).

The rule for relative paths (one rule, for the daemon and the CLI alike): under systemd
(``$STATE_DIRECTORY`` set), and for the system config read by the CLI beside that service,
``data_dir`` is the state directory unless the config gives an absolute path, and a
relative ``tools.workspace_dir`` lives inside the state directory. Under
``ProtectSystem=strict`` nothing else is writable, so a path beside the config file in
/etc would only crash the daemon.

Who the daemon is (:func:`service_user`): under the unit, not whoever runs the CLI beside it
(``sudo netclaw doctor`` is root; the service is the user ``netclaw``).
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from netclaw.errors import ConfigError

SYSTEM_CONFIG = Path("/etc/netclaw/netclaw.json")
SYSTEM_ENV_FILE = Path("/etc/netclaw/netclaw.env")
SYSTEM_STATE_DIR = Path("/var/lib/netclaw")  # the unit's StateDirectory=netclaw
SYSTEM_GROUP = "netclaw"  # the service's (deploy/install.sh makes the user and group): reads the config
SYSTEM_UNIT = "netclaw.service"  # deploy/netclaw.service


def state_directory(config_file: Path | None) -> Path | None:
    """The service's state directory: systemd's ``$STATE_DIRECTORY`` (its first entry),
    or — for the CLI reading the system config — the one the unit uses. None elsewhere."""
    given = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if given:
        return Path(given)
    if config_file is not None and _same_file(config_file, SYSTEM_CONFIG):
        return SYSTEM_STATE_DIR
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def ensure_writable_dir(key: str, path: Path) -> None:
    """Create ``path`` (0700) if missing and check the daemon can write there; a
    :class:`ConfigError` naming ``key`` and what to do when it cannot."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
        reason = "not writable by this user"
    except OSError as exc:
        writable = False
        reason = exc.strerror or str(exc)
    if writable:
        return
    hint = ""
    if os.environ.get("STATE_DIRECTORY"):
        hint = (
            f"; under systemd only the state directory {os.environ['STATE_DIRECTORY'].split(':')[0]} is "
            f"writable (ProtectSystem=strict): leave {key} out of the config or make it relative, "
            "and it goes there"
        )
    raise ConfigError(f"{key}: cannot use {path}: {reason}{hint}")


@dataclass(frozen=True, slots=True)
class ServiceUser:
    """Who the system service runs the daemon as, and (while it runs) its process."""

    uid: int
    gid: int
    name: str  # the user's name, or "uid N" when it has none here
    found: str  # how it was found, for messages: "the running service (pid 812)"
    pid: int | None = None  # the running daemon (its MainPID); None when it is not running


def service_user(
    config_file: Path | None, data_dir: Path, *, unit: str = SYSTEM_UNIT, proc: Path = Path("/proc")
) -> ServiceUser | None:
    """The user the system service runs as, for the CLI reading the system config beside it;
    None when ``config_file`` is not the system config or systemd knows no such unit (then the
    daemon is whoever runs ``netclaw run``: the caller itself).

    In order, the first that answers:

    1. The running service's real uid and gid (``/proc/<MainPID>/status``): who the daemon is
       now, whatever decided it (``User=``, a drop-in, ``DynamicUser=``), and who owns what it
       writes.
    2. The unit's ``User=`` (and ``Group=``) by name: who it runs as at its next start. No
       ``User=`` and no ``DynamicUser=`` is root.
    3. The owner of ``data_dir`` (the state directory): a dynamic user that is not running has
       no name to look up, but systemd chowns the state directory to the service's user at
       every start and gives a dynamic user the uid that owns it again, so its owner is who
       ran last and runs next.
    """
    if config_file is None or not _same_file(config_file, SYSTEM_CONFIG):
        return None
    unit_properties = _unit_properties(unit, ("LoadState", "MainPID", "User", "Group", "DynamicUser"))
    if unit_properties.get("LoadState") != "loaded":
        return None
    pid = int(unit_properties.get("MainPID") or 0)
    if pid > 0 and (ids := _real_ids(proc / str(pid) / "status")) is not None:
        return ServiceUser(*ids, _user_name(ids[0]), f"the running service (pid {pid})", pid)
    user = unit_properties.get("User", "")
    if not user and unit_properties.get("DynamicUser") != "yes":
        return ServiceUser(0, 0, "root", "the unit (no User=)")
    try:
        entry = pwd.getpwnam(user or unit.removesuffix(".service"))  # a dynamic user is named after its unit
    except KeyError:
        pass
    else:
        gid = _group_id(unit_properties.get("Group", ""))
        gid = entry.pw_gid if gid is None else gid
        return ServiceUser(entry.pw_uid, gid, entry.pw_name, f"the unit's User={entry.pw_name}")
    try:
        st = data_dir.stat()
    except OSError:
        return None
    return ServiceUser(st.st_uid, st.st_gid, _user_name(st.st_uid), f"the owner of {data_dir}")


def _unit_properties(unit: str, names: tuple[str, ...]) -> dict[str, str]:
    """``systemctl show``'s answer for ``unit``; empty without systemd (no systemctl, or it
    was not booted with systemd, as in most containers)."""
    try:
        done = subprocess.run(
            ["systemctl", "show", unit, *(f"--property={n}" for n in names)],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if done.returncode != 0:
        return {}
    pairs = (line.partition("=") for line in done.stdout.splitlines())
    return {key: value for key, sep, value in pairs if sep}


def _real_ids(status: Path) -> tuple[int, int] | None:
    """The real uid and gid in a ``/proc/<pid>/status``; None once the process is gone."""
    try:
        lines = status.read_text().splitlines()
    except OSError:
        return None
    ids = {key: value.split() for key, _, value in (line.partition(":") for line in lines)}
    try:
        return int(ids["Uid"][0]), int(ids["Gid"][0])
    except (KeyError, IndexError, ValueError):
        return None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group_id(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid if name else None
    except KeyError:
        return None
