"""Secrets by name: environment, VAR_FILE, systemd credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ConfigError


def test_the_variable_wins(tmp_path: Path) -> None:
    (tmp_path / "KEY").write_text("from-credential\n")
    env = {"KEY": " from-env ", "KEY_FILE": "/nonexistent", "CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert read_secret("KEY", env) == "from-env"


def test_a_file_named_by_var_file(tmp_path: Path) -> None:
    secret = tmp_path / "key.txt"
    secret.write_text("sk-in-a-file\n")
    assert read_secret("KEY", {"KEY_FILE": str(secret)}) == "sk-in-a-file"


def test_a_systemd_credential(tmp_path: Path) -> None:
    (tmp_path / "KEY").write_text("sk-credential")
    assert read_secret("KEY", {"CREDENTIALS_DIRECTORY": str(tmp_path)}) == "sk-credential"
    assert read_secret("OTHER", {"CREDENTIALS_DIRECTORY": str(tmp_path)}) is None


def test_unset_and_empty_are_none(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    assert read_secret("KEY", {}) is None
    assert read_secret("KEY", {"KEY": "   "}) is None
    assert read_secret("KEY", {"KEY_FILE": str(tmp_path / "empty")}) is None


def test_an_unreadable_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"KEY_FILE: cannot read .*missing"):
        read_secret("KEY", {"KEY_FILE": str(tmp_path / "missing")})


def test_the_advice_names_every_way() -> None:
    advice = where_to_put("SLACK_BOT_TOKEN")
    assert "SLACK_BOT_TOKEN_FILE" in advice and "systemd credential" in advice
