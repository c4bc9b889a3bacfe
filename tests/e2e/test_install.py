"""The README's first run, as written, in a fresh venv from a copy of the checkout: a plain
(non-editable) ``pip install .`` from the default index, the demo model's first answer with
no model server anywhere; then the installed copy on its own.

The README's ``first-run`` recipe runs line by line in bash, in a copy of the checkout (what
a clone has), with one difference from a person's shell: ``NETCLAW_GATEWAY__PORT`` picks a
free port (5199 may be taken on a machine running tests). ``netclaw run`` runs in the
background for the line after it, "in another terminal, in the same venv". The venv is then
the installed copy the other tests use, run from a directory outside any source tree, with
no PYTHONPATH, so only the installed copy can be imported: the SQL migrations must come from
inside the installed package.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import netclaw
from tests.doc_blocks import recipe
from tests.e2e._docker import repo_tar_command
from tests.e2e.conftest import (
    REPO_ROOT,
    Daemons,
    Setup,
    free_port,
    run_cli,
    subprocess_env,
    wait_until,
)
from tests.fakes.scripted_openai import ScriptedOpenAIThread

INSTALL_TIMEOUT_S = 300  # venv + pip install from the index (~20-60 s with a warm cache)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)]


class Installed:
    def __init__(self, venv: Path) -> None:
        self.venv = venv
        self.python = venv / "bin" / "python"
        self.netclaw = venv / "bin" / "netclaw"
        self.env = subprocess_env(source_tree=False, VIRTUAL_ENV=str(venv))

    def run(self, *args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, executable=[str(self.netclaw)], env=self.env, cwd=cwd, timeout=timeout)


@dataclass
class FirstRun:
    checkout: Path
    answer: subprocess.CompletedProcess[str]  # what `netclaw chat -p "hello"` printed


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstRun]:
    lines = recipe("first-run")
    assert [line.split()[0] for line in lines] == ["python3", "pip", "netclaw", "netclaw", "netclaw"], lines
    assert lines[3].startswith("netclaw run") and lines[4].startswith("netclaw chat"), lines
    checkout = tmp_path_factory.mktemp("first-run") / "netclaw"
    checkout.mkdir()
    packed = subprocess.run(repo_tar_command(), capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-C", str(checkout), "-xf", "-"], input=packed, check=True, timeout=120)
    port = free_port()
    env = subprocess_env(source_tree=False, NETCLAW_GATEWAY__PORT=str(port))
    setup = subprocess.run(
        ["bash", "-ec", "\n".join(lines[:3])],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    same_venv = ". .venv/bin/activate && "  # "in another terminal, in the same venv"
    daemon = subprocess.Popen(
        ["bash", "-c", same_venv + "exec " + lines[3]],
        cwd=checkout,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code < 600
            except httpx.HTTPError:
                assert daemon.poll() is None, daemon.communicate(timeout=5)[1]
                return False

        wait_until(up, 60, "the daemon the README started")
        answer = subprocess.run(
            ["bash", "-c", same_venv + lines[4]],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        yield FirstRun(checkout, answer)
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)


@pytest.fixture(scope="module")
def installed(first_run: FirstRun) -> Installed:
    return Installed(first_run.checkout / ".venv")


def test_the_readmes_first_run_answers_with_no_model_server(first_run: FirstRun) -> None:
    done = first_run.answer
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[demo model — not an AI] You said: “hello”."), done.stdout
    assert "netclaw init --force" in done.stdout  # and how to connect a real one
    config = (first_run.checkout / "netclaw.json").read_text()
    assert '"type": "demo"' in config and (first_run.checkout / "data" / "netclaw.db").exists()


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


OFFLINE_RECALL = """
import asyncio, pathlib, sys
from netclaw.persistence import NewMemory, SqliteMemoryStore, load_embedder, prepare_database

async def main():
    path = pathlib.Path("memory.db")
    prepare_database(path)
    store = await SqliteMemoryStore(path, embedder=load_embedder("minilm-l6")).open()
    await store.add([NewMemory("Anna, the user's sister, works as a nurse at St. Mary's hospital."),
                     NewMemory("Production runs on the host kestrel-2.")], session_id="cli:a", audience="personal")
    for m in await store.search("What does my sister do for a living?", audience="personal"):
        print(m.text)
    print(store.embedding_status().state)
    await store.close()

asyncio.run(main())
"""


def test_the_default_embeddings_work_with_networking_disabled(installed: Installed, tmp_path: Path) -> None:
    """Recall by meaning in the fresh venv, in a network namespace of its own (no interface
    but loopback, no DNS) and with an empty home: the model comes from the installed
    packages, nothing is fetched and nothing needs a cache."""
    if subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unshare --net is not available here (needs root or user namespaces)")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        ["unshare", "--net", str(installed.python), "-c", OFFLINE_RECALL],
        capture_output=True,
        text=True,
        env={**installed.env, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "Anna, the user's sister, works as a nurse at St. Mary's hospital.",
        "ready",
    ]
    assert not any(home.rglob("*")), "something was cached under the empty home"


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
