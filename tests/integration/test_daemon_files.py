"""Private by default: a new data directory is 0700; the database, its WAL and shared
memory, the lock and the control token are 0600."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.errors import ConfigError
from tests.conftest import DaemonHandle


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_directory_and_its_files_are_private(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon()
    assert handle.send("cli:private", "hello", wait=True).status_code == 200
    data_dir = handle.daemon.settings.data_dir
    assert mode(data_dir) == 0o700
    for name in ("netclaw.db", "netclaw.db-wal", "netclaw.db-shm", "netclaw.lock", "control.token"):
        assert mode(data_dir / name) == 0o600, name


def test_a_workspace_that_holds_the_daemons_own_files_is_refused_before_anything_is_made(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """The defect: ``workspace_dir: "."`` with ``data_dir: "./data"`` let ``read_file
    data/control.token`` return the token, and (as root) gave the whole tree, data and
    config included, to the sandbox's user."""
    base = make_settings(tools={"files": {"enabled": True}})
    data_dir = tmp_path / "site" / "data"
    inside = base.model_copy(
        update={
            "data_dir": data_dir,
            "tools": base.tools.model_copy(update={"workspace_dir": tmp_path / "site"}),
        }
    )
    with pytest.raises(ConfigError, match=r"data_dir \(.*/site/data\) lies inside the workspace") as refused:
        Daemon(inside).start()
    assert "set tools.workspace_dir to a folder of its own" in str(refused.value)
    assert not data_dir.exists()  # refused before the lock, the database or the token were made
    # The config file, when it lies in the workspace, is refused the same way.
    config = tmp_path / "ws2" / "netclaw.json"
    config.parent.mkdir()
    config.write_text("{}")
    elsewhere = base.model_copy(
        update={"tools": base.tools.model_copy(update={"workspace_dir": config.parent})}
    )
    with pytest.raises(ConfigError, match=r"the config file \(.*netclaw.json\) lies inside the workspace"):
        Daemon(elsewhere, config_path=str(config)).start()
