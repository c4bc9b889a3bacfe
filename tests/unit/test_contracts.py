"""The import-linter contracts have teeth: on a copy of the code, a module added in no layer,
an import across an independence line and an I/O import in a pure module each break the
contract that should catch them (and the tree as it is breaks none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


def _lint(tree: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [LINT, "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return " ".join((result.stdout + result.stderr).split())  # contract names may wrap


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not Path(LINT).exists():
        pytest.skip("lint-imports is not installed (pip install -e '.[dev]')")
    for package in ("netclaw", "adapters"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_each_kind_of_break_is_caught(tree: Path) -> None:
    assert "0 broken" in _lint(tree)
    (tree / "netclaw" / "newcomer.py").write_text('"""A module in no layer."""\n')
    with (tree / "netclaw" / "sessions" / "_core" / "activities" / "idle.py").open("a") as f:
        f.write(
            "\nimport netclaw.sessions._core.activities.turning  # noqa: E402, F401 - an activity importing another\n"
        )
    with (tree / "netclaw" / "sessions" / "_core" / "turn.py").open("a") as f:
        f.write(
            "\nimport netclaw.sessions._shell.actor  # noqa: E402, F401 - the pure core importing its shell\n"
        )
    with (tree / "netclaw" / "messages.py").open("a") as f:
        f.write("\nimport httpx  # noqa: E402, F401 - I/O in a pure module\n")
    output = _lint(tree)
    assert (
        "netclaw's layers: each imports only from the layers below it (every module placed) BROKEN" in output
    )
    assert "newcomer" in output
    assert "The activities of the pure session are independent of each other BROKEN" in output
    assert "Sessions: residency over the actor shell over the pure session core BROKEN" in output
    assert "Pure modules reach no actor, network, database or platform library BROKEN" in output


def test_the_pure_session_core_takes_time_ids_and_randomness_from_its_env_only(tree: Path) -> None:
    """A clock, an id source, randomness, a thread or a loop imported straight into a pure
    session module breaks the build: each must come through the session's env."""
    core = tree / "netclaw" / "sessions" / "_core"
    planted = {
        "activities.turning": "time",
        "approvals": "secrets",
        "turn": "uuid",
        "activities.idle": "random",
        "context.build": "os",
        "session": "threading",
        "activities.compacting": "asyncio",
    }
    for module, name in planted.items():
        with core.joinpath(*module.split(".")).with_suffix(".py").open("a") as f:
            f.write(f"\nimport {name}  # noqa: E402, F401 - a hidden input in the pure core\n")
    output = _lint(tree)
    assert (
        "The pure session core reads no clock, id source, randomness, environment, thread or loop BROKEN"
        in output
    )
    for module, name in planted.items():
        assert f"netclaw.sessions._core.{module} -> {name}" in output, (module, name)
    # The other contracts do not see it: this one is what catches it.
    assert "Pure modules reach no actor, network, database or platform library KEPT" in output
