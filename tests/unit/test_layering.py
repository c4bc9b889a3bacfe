"""The pure modules stay pure at run time too: importing one — through every package
``__init__`` face it passes — loads no actor, network or database library. (The
import-linter contracts in pyproject.toml check the import graph; this checks what a
real ``import`` executes, faces included.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = [
    "netclaw.history",
    "netclaw.messages",
    "netclaw.outputs",
    "netclaw.sessions._core.journal.state",
    "netclaw.sessions._core.context.tail",
    "netclaw.spend",
    "netclaw.sessions._core.phases",
    "netclaw.sessions._core.journal.events",
    "netclaw.sessions._core.context.ladder",
]
HEAVY = ["pykka", "aiohttp", "aiosqlite", "httpx", "sqlite3"]


@pytest.mark.parametrize("module", PURE)
def test_importing_a_pure_module_loads_no_heavy_library(module: str) -> None:
    probe = f"import sys, json, {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [], f"importing {module} loaded {result.stdout.strip()}"


def test_the_sessions_face_still_gives_the_heavy_names_on_use() -> None:
    import netclaw.sessions as sessions

    assert sessions.SessionManager.__name__ == "SessionManager"
    assert sessions.Subscription.__module__ == "netclaw.sessions._subscribers"
    with pytest.raises(AttributeError, match="nope"):
        _ = sessions.nope  # type: ignore[attr-defined]
