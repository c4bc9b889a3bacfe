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
"""

from __future__ import annotations

import os
from pathlib import Path

from netclaw.errors import ConfigError

SYSTEM_CONFIG = Path("/etc/netclaw/netclaw.json")
SYSTEM_ENV_FILE = Path("/etc/netclaw/netclaw.env")
SYSTEM_STATE_DIR = Path("/var/lib/netclaw")  # the unit's StateDirectory=netclaw
SYSTEM_GROUP = "netclaw"  # the service's (deploy/install.sh makes the user and group): reads the config


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
