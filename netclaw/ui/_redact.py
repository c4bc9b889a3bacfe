"""What the control room never shows: secrets (pure, but for reading the secrets themselves).

Two layers, because a page may show text nobody checked (a transcript where the model
repeated a key, an MCP server's ``args``):

- :func:`config_text` renders the running config with secret-looking values hidden: keys
  named like a token, secret, password or key (``*_env`` keys name a variable, never hold
  a value, and stay) and the password part of any URL.
- :class:`Scrubber` knows the secret values themselves — the control token and whatever
  each ``*_env`` key names — and replaces every occurrence in every page, fragment and
  live event before it leaves the daemon.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from netclaw.config import Settings
from netclaw.credentials import read_secret
from netclaw.errors import ConfigError

HIDDEN = "[hidden]"
MIN_SECRET_CHARS = 6  # shorter values would be replaced inside ordinary words
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


def secret_names(settings: Settings) -> Iterator[str]:
    """Every variable the config names as holding a secret (``*_env`` keys and the values
    of ``*_env`` maps)."""

    def walk(value: Any, key: str) -> Iterator[str]:
        if isinstance(value, dict):
            for k, v in value.items():
                if str(k).endswith("_env") and isinstance(v, dict):
                    yield from (str(name) for name in v.values() if isinstance(name, str))
                else:
                    yield from walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                yield from walk(v, key)
        elif isinstance(value, str) and key.endswith("_env"):
            yield value

    yield from walk(settings.model_dump(mode="json"), "")


class Scrubber:
    """Replaces known secret values in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    @classmethod
    def of(cls, settings: Settings, token: str) -> Scrubber:
        """The control token and every secret the config names (reads files: not on the loop)."""
        found = [token]
        for name in secret_names(settings):
            try:
                value = read_secret(name)
            except ConfigError:
                continue  # an unreadable secret file: nothing of it can be shown either
            if value:
                found.append(value)
        return cls(found)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, HIDDEN)
        return text
