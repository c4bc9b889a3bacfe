"""The container image: built from this checkout with ``docker build .``, run as a user
would (a volume for the state, the control token inside it), answering a turn, healthy by
its own HEALTHCHECK, stopping cleanly on ``docker stop``. Skips without a Docker daemon or
without the base image (tests/e2e/deploy/docker-setup.sh provides both, as CI does).
docs/deploy.md's own ``docker run`` line is run as written in test_deploy.py."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e._docker import build, require_engine
from tests.e2e.conftest import REPO_ROOT, free_port, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = [pytest.mark.slow, pytest.mark.netclaw_image, pytest.mark.timeout(900)]  # a build

BASE_IMAGE = "python:3.11-slim"


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    require_engine()  # skips with the reason where there is no engine or base image
    tag = f"netclaw-test:{uuid.uuid4().hex[:8]}"
    build(tag, str(REPO_ROOT))
    yield tag
    # The tag goes, its layers stay: the next build of the Dockerfile (tests/conftest.py runs
    # them one after another) reuses them instead of installing everything again.
    docker("rmi", "--no-prune", "-f", tag, check=False)


def test_the_image_runs_a_turn_and_keeps_its_state(image: str, scripted: ScriptedOpenAIThread) -> None:
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "netclaw" and "/var/lib/netclaw" in config["Volumes"]
    assert config["Healthcheck"]["Test"][0] == "CMD" and "/healthz" in " ".join(config["Healthcheck"]["Test"])
    assert config["StopSignal"] == "SIGTERM"

    volume = f"netclaw-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    name = f"netclaw-test-{uuid.uuid4().hex[:8]}"
    run = [
        "run", "-d", "--name", name, "--network", "host",
        "-v", f"{volume}:/var/lib/netclaw",
        "-e", f"NETCLAW_GATEWAY__PORT={port}",
        "-e", f"NETCLAW_PROVIDERS__LOCAL__BASE_URL={scripted.base_url}",
        "-e", "NETCLAW_MODELS__MAIN__MODEL=scripted",
        "--health-interval", "1s", "--health-start-period", "1s",
        image,
    ]  # fmt: skip
    try:
        started = time.monotonic()
        docker(*run)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{base}/healthz", timeout=1).status_code == 200, 60, "the container")
        cold_start = time.monotonic() - started
        assert docker("exec", name, "id", "-u").stdout.strip() != "0"
        modes = docker("exec", name, "stat", "-c", "%a %n", "/var/lib/netclaw", "/var/lib/netclaw/netclaw.db",
                       "/var/lib/netclaw/control.token").stdout.split("\n")  # fmt: skip
        assert [m.split()[0] for m in modes if m] == ["700", "600", "600"]
        token = docker("exec", name, "cat", "/var/lib/netclaw/control.token").stdout.strip()
        auth = {"Authorization": f"Bearer {token}"}
        reply = httpx.post(
            f"{base}/api/sessions/cli:docker/messages",
            json={"text": "hello from a container"},
            headers=auth,
            params={"wait": "1"},
            timeout=30,
        )
        assert reply.status_code == 200 and reply.json()["reply"] == "echo: hello from a container"
        wait_until(
            lambda: json.loads(docker("inspect", name).stdout)[0]["State"]["Health"]["Status"] == "healthy",
            30,
            "HEALTHCHECK healthy",
        )
        stopping = time.monotonic()
        docker("stop", "-t", "30", name)
        assert time.monotonic() - stopping < 10
        assert json.loads(docker("inspect", name).stdout)[0]["State"]["ExitCode"] == 0
        # The same volume: the session and the token are still there.
        docker("rm", name)
        docker(*run)
        wait_until(lambda: httpx.get(f"{base}/healthz", timeout=1).status_code == 200, 60, "the restart")
        session = httpx.get(f"{base}/api/sessions/cli:docker", headers=auth, timeout=10)
        assert session.status_code == 200 and session.json()["turns"] == 1
        print(f"container cold start to healthy: {cold_start:.2f}s")
    finally:
        docker("rm", "-f", name, check=False)
        docker("volume", "rm", "-f", volume, check=False)
