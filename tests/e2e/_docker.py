"""Docker for the deploy tests: the engine (skip with the reason when there is none), a
copy of the checkout to send into a container, and the host's address as containers see
it (``host.docker.internal``), where the scripted provider listens. The recipes they run
are read from the documentation by ``tests.doc_blocks.recipe``.

In CI, ``tests/e2e/deploy/docker-setup.sh`` installs and starts what these need, in the
background while the suite starts; ``$DOCKER_SETUP_DONE`` names a file it writes when done
(its exit status), which :func:`require_engine` waits for."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT

SETUP_WAIT_S = 600.0
BASE_IMAGES = ("debian:bookworm-slim", "python:3.11-slim")


def docker(
    *args: str, timeout: float = 120, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, input=input
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args)[:300]} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def build(tag: str, context: str, *, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``docker build --network host -t TAG CONTEXT``, checked. Docker's legacy builder now
    and then fails to tag the image it has just built ("Successfully built", then "failed
    to get digest ...: no such file or directory": its image store, not the Dockerfile);
    building again from its cache tags it, so that one failure is tried once more."""
    done = docker("build", "--network", "host", "-t", tag, context, timeout=timeout, check=False)
    if done.returncode != 0 and "failed to get digest" in done.stdout + done.stderr:
        done = docker("build", "--network", "host", "-t", tag, context, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(
            f"docker build -t {tag} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def require_engine() -> None:
    """Skip (saying why) unless a Docker engine answers and the base images are here."""
    marker = os.environ.get("DOCKER_SETUP_DONE")
    if marker:  # CI: the set-up runs in the background; wait for it, bounded
        deadline = time.monotonic() + SETUP_WAIT_S
        while not Path(marker).exists() and time.monotonic() < deadline:
            time.sleep(1)
        status = Path(marker).read_text().strip() if Path(marker).exists() else "still running"
        if status != "0":
            pytest.fail(f"tests/e2e/deploy/docker-setup.sh did not succeed ({status}); see its log")
    if shutil.which("docker") is None:
        pytest.skip("no docker command on this machine (tests/e2e/deploy/docker-setup.sh installs one)")
    if docker("info", check=False, timeout=30).returncode != 0:
        pytest.skip("no Docker engine is running (tests/e2e/deploy/docker-setup.sh starts one)")
    missing = [i for i in BASE_IMAGES if docker("image", "inspect", i, check=False).returncode != 0]
    for image in missing:
        if docker("pull", image, check=False, timeout=300).returncode != 0:
            pytest.skip(
                f"the base image {image} is not here and cannot be pulled (tests/e2e/deploy/base-images.sh makes it)"
            )


def host_gateway() -> str:
    """The host's address as containers see it through ``host-gateway``."""
    done = docker(
        "run", "--rm", "--add-host=probe:host-gateway", "debian:bookworm-slim", "getent", "hosts", "probe"
    )
    return done.stdout.split()[0]


def repo_tar_command() -> list[str]:
    """``tar`` writing this checkout to stdout (what a clone has: no venvs, caches or builds)."""
    excludes = [
        ".git",
        ".ci-venv",
        "*.pyc",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "build",
        "dist",
        "*.egg-info",
        # Top-level only (a test folder may be called data): what CI and a person's first run made.
        "./.ci-synapse",
        "./.ci-npm",
        "./.venv",
        "./data",
        "./netclaw.json",
    ]
    return ["tar", "-C", str(REPO_ROOT), *(f"--exclude={e}" for e in excludes), "-cf", "-", "."]
