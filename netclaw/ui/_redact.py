"""What the control room never shows: secrets (pure).

Two layers, because a page may show text nobody checked (a transcript where the model
repeated a key, an MCP server's ``args``):

- :func:`config_text` renders the running config with secret-looking values hidden: keys
  named like a token, secret, password or key (``*_env`` keys name a variable, never hold
  a value, and stay) and the password part of any URL.
- :class:`netclaw.security.redact.Scrubber` knows the secret values themselves — the control token
  and whatever each ``*_env`` key names — and replaces every occurrence in every page,
  fragment and live event before it leaves the daemon (the room holds one per config).
"""

from __future__ import annotations

import json
import re
from typing import Any

from netclaw.config import Settings
from netclaw.security.redact import HIDDEN

# A key that names a secret: ``bot_token``, ``api_key``, ``password``; not ``max_tokens``.
_SECRET_KEY = re.compile(
    r"(^|_)(token|secret|password|passwd|api_?key|private_key|authorization|credentials?|dsn)$", re.I
)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/:@\s]*:)(?P<password>[^@/\s]+)(?=@)", re.I)


def _hidden(key: str) -> bool:
    return bool(_SECRET_KEY.search(key)) and not key.endswith("_env")


def redact(value: Any, key: str = "") -> Any:
    """``value`` (a JSON-like tree) with the values of secret-looking keys replaced."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if value is not None and key and _hidden(key):
        return HIDDEN
    if isinstance(value, str):
        return _URL_PASSWORD.sub(lambda m: m["head"] + HIDDEN, value)
    return value


def config_text(settings: Settings) -> str:
    """The running config as indented JSON, secrets hidden."""
    return json.dumps(redact(settings.model_dump(mode="json")), indent=2, sort_keys=True)
