"""A plain (non-editable) ``pip install <repo>`` into a fresh venv works on its own.

The venv is created with the ``venv`` module and the repository installed with
``<venv>/bin/pip install <repo>`` from the default index (dependencies included), which takes
~20-60 s; the conftest starts that in the background when the first e2e test starts
(``background_install``). Everything is then run from a directory outside the source tree,
with no PYTHONPATH, so only the installed copy can be imported: the SQL migrations must come
from inside the installed package.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import netclaw
from tests.e2e.conftest import (
    REPO_ROOT,
    BackgroundInstall,
    Daemons,
    Setup,
    run_cli,
    subprocess_env,
)
from tests.fakes.scripted_openai import ScriptedOpenAIThread

INSTALL_TIMEOUT_S = 300

# The install may still be running when these start (it is usually done: it began with the
# first e2e test); allow for it beyond the suite's default per-test timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 60)]


class Installed:
    def __init__(self, venv: Path) -> None:
        self.venv = venv
        self.python = venv / "bin" / "python"
        self.netclaw = venv / "bin" / "netclaw"
        self.env = subprocess_env(source_tree=False, VIRTUAL_ENV=str(venv))

    def run(self, *args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, executable=[str(self.netclaw)], env=self.env, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def installed(background_install: BackgroundInstall | None) -> Installed:
    assert background_install is not None
    venv = background_install.wait(INSTALL_TIMEOUT_S)
    print(f"venv + pip install done {time.monotonic() - background_install.started:.1f}s after it started")
    return Installed(venv)


def _site_packages(installed: Installed, cwd: Path) -> Path:
    done = subprocess.run(
        [str(installed.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        env=installed.env,
        cwd=cwd,
        check=True,
    )
    return Path(done.stdout.strip()).resolve()


def test_migrations_come_from_the_installed_package(installed: Installed, tmp_path: Path) -> None:
    code = (
        "import netclaw; from netclaw.persistence import migrations_dir; "
        "print(netclaw.__file__); print(migrations_dir())"
    )
    done = subprocess.run(
        [str(installed.python), "-c", code],
        capture_output=True,
        text=True,
        env=installed.env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    package_file, migrations = (Path(line).resolve() for line in done.stdout.split())
    site_packages = _site_packages(installed, tmp_path)
    assert package_file.is_relative_to(site_packages), package_file
    assert migrations.is_relative_to(site_packages / "netclaw"), migrations
    assert not migrations.is_relative_to(REPO_ROOT.resolve())
    for backend in ("sqlite", "postgres"):  # each backend's folder, whole
        shipped = sorted(p.name for p in (migrations.parent / backend).glob("*.sql"))
        source = sorted(p.name for p in (REPO_ROOT / "migrations" / backend).glob("*.sql"))
        assert shipped == source and shipped, (backend, shipped)

    done = installed.run("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"netclaw {netclaw.__version__}"


def test_installed_doctor_and_daemon(
    installed: Installed, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()

    done = installed.run("doctor", "--config", str(site.config), cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok] provider local" in done.stdout, done.stdout

    daemon = daemons.start(
        site.config,
        site.data_dir,
        site.port,
        argv=[str(installed.netclaw), "run", "--config", str(site.config)],
        env=installed.env,
        cwd=workdir,
    )
    assert daemon.health()["status"] == "ok"
    done = installed.run("chat", "-p", "hello from the wheel", "--config", str(site.config), cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "echo: hello from the wheel"
    # The control room's templates and vendored script came with the wheel.
    base = f"http://127.0.0.1:{site.port}"
    assert "Control token" in httpx.get(f"{base}/ui/login").text
    assert httpx.get(f"{base}/ui/static/htmx.min.js").text.startswith("var htmx=")
    code, took = daemon.sigterm(timeout=10)
    assert code == 0, f"exit {code} after {took:.1f}s:\n{daemon.stderr()}"

    # The database it made carries the schema from the packaged migrations.
    done = installed.run("doctor", "--config", str(site.config), cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    newest = max(int(p.name[:4]) for p in (REPO_ROOT / "migrations" / "sqlite").glob("*.sql"))
    assert f"schema {newest}," in done.stdout and "1 session(s)" in done.stdout, done.stdout
    assert f"daemon: not running at http://127.0.0.1:{site.port}" in done.stdout


def test_the_example_skills_come_with_the_wheel(installed: Installed, tmp_path: Path) -> None:
    config = tmp_path / "netclaw.json"
    config.write_text('{"skills": {"bundled": true}}')
    done = installed.run("skills", "list", "--json", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    [folder] = listed["dirs"]
    assert Path(folder).resolve() == _site_packages(installed, tmp_path) / "netclaw" / "_skills"
    names = [s["name"] for s in listed["skills"]]
    assert names == sorted(p.parent.name for p in (REPO_ROOT / "skills").glob("*/SKILL.md")) and names
