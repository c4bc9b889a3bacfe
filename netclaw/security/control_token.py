"""The control token: the bearer secret of the HTTP control API (docs/http-api.md,
"Authentication").

It is ``gateway.control_token_env``'s variable if set, else the file
``<data_dir>/control.token``, created with mode 0600 on the daemon's first start.
The daemon loads (or creates) it; clients only read it.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from netclaw.config import Settings
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ConfigError

log = logging.getLogger(__name__)


def load_control_token(settings: Settings) -> str:
    """The configured variable's value, else ``<data_dir>/control.token`` (created 0600)."""
    name = settings.gateway.control_token_env
    if name:
        value = read_secret(name)
        if not value:
            raise ConfigError(
                f"gateway.control_token_env names {name}, which is empty or unset: {where_to_put(name)}"
            )
        return value
    path = settings.data_dir / "control.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("%s was readable by others (mode %o); restricting it to 0600", path, mode)
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise ConfigError(f"{path} is empty; delete it and a new token is created") from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token


def read_control_token(settings: Settings) -> str | None:
    """For clients: the token without creating anything."""
    name = settings.gateway.control_token_env
    if name:
        return read_secret(name)
    path = Path(settings.data_dir) / "control.token"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
