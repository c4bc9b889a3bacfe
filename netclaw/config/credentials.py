"""Secrets by name: every ``*_env`` config key is resolved here, and only here.

A secret named ``VAR`` is, first found wins:

1. the environment variable ``VAR``;
2. the file named by ``VAR_FILE`` (Docker secrets, Kubernetes mounts);
3. ``$CREDENTIALS_DIRECTORY/VAR`` (systemd's ``LoadCredential=VAR:/path``).

So a secret never has to sit in the environment, where ``/proc/<pid>/environ`` and
child processes would see it. Trailing whitespace (the newline of a file) is dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from netclaw.errors import ConfigError


def read_secret(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the secret ``name``, or None when no source has a non-empty one.
    Raises ConfigError when ``NAME_FILE`` names a file that cannot be read."""
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if value:
        return value
    pointer = env.get(f"{name}_FILE", "").strip()
    if pointer:
        return _read(Path(pointer), f"{name}_FILE")
    directory = env.get("CREDENTIALS_DIRECTORY", "").strip()
    if directory:
        candidate = Path(directory) / name
        if candidate.is_file():
            return _read(candidate, f"the systemd credential {name}")
    return None


def where_to_put(name: str) -> str:
    """For error messages: the ways a person can provide ``name``."""
    return f"set the environment variable {name} (or {name}_FILE to a file holding it, or a systemd credential {name})"


def _read(path: Path, what: str) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from exc
    return text or None
