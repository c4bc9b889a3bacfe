"""Storage faults against the daemon as a subprocess: a full disk (a size-limited tmpfs as
``data_dir``) and a damaged database file at start-up."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Daemons, Setup, run_cli, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fill the file system to the last byte."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_refuses_input_loses_nothing_and_recovers(
    small_disk: Path, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    data = small_disk / "data"
    config = site.config.read_text().replace(str(site.data_dir), str(data))
    site.config.write_text(config)
    daemon = daemons.spawn(site.config, data, site.port).wait_ready()
    before = daemon.post("cli:disk", "before the disk filled", wait=True)
    assert before.status_code == 200

    filler = fill(small_disk)
    statuses = []
    for n in range(20):
        response = daemon.post(
            f"cli:disk-{n % 3}", f"while full {n}", idempotency_key=f"full-{n}-{uuid.uuid4()}"
        )
        statuses.append(response.status_code)
    assert 202 not in statuses and set(statuses) <= {503}, statuses  # never acknowledged
    health = httpx.get(f"{daemon.base_url}/healthz", timeout=5)
    assert health.status_code == 503 and "journal commit failed" in health.json()["reason"]
    assert "full" in health.json()["reason"]

    filler.unlink()  # space returns
    after = wait_until(
        lambda: (
            (r := daemon.post("cli:disk", "after the disk was freed", wait=True)).status_code == 200 and r
        ),
        20,
        "a write to succeed again",
    )
    assert after.json()["reply"] == "echo: after the disk was freed"
    assert httpx.get(f"{daemon.base_url}/healthz", timeout=5).status_code == 200
    transcript = [m["content"] for m in daemon.session("cli:disk")["messages"] if m["role"] == "user"]
    assert transcript == ["before the disk filled", "after the disk was freed"]
    log = daemon.stderr()
    # One clear line from the journal, no tracebacks, no storm.
    assert log.count("new input is refused (503) until a commit succeeds") == 1
    assert "Traceback" not in log, log[-3000:]
    assert len(log.splitlines()) < 120, len(log.splitlines())
    assert "journal commits again" in log


def test_a_damaged_database_is_refused_not_recreated(tmp_path: Path, scripted: ScriptedOpenAIThread) -> None:
    site = Setup(tmp_path / "site", scripted.base_url)
    site.data_dir.mkdir(parents=True)
    damaged = b"SQLite format 3\x00" + os.urandom(8192)
    site.db_path.write_bytes(damaged)
    done = subprocess.run(
        [sys.executable, "-m", "netclaw.cli", "run", "--config", str(site.config)],
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode != 0
    assert str(site.db_path) in done.stderr and "PRAGMA integrity_check" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert site.db_path.read_bytes() == damaged  # untouched
    doctor = run_cli("doctor", "--config", str(site.config))
    assert "[FAIL] database" in doctor.stdout
