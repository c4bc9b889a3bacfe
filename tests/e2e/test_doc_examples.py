"""The shell examples of docs/http-api.md, docs/events.md and docs/cli.md, run as written
with bash, curl, openssl and `netclaw` against a real daemon. The one change: the pages
say port 5199, the test uses a free port. The daemon's config has the webhook route of
the page's own example."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.doc_blocks import block_after
from tests.e2e.conftest import Daemons, Setup, subprocess_env
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow

SECRET = "a-webhook-secret-of-at-least-32-bytes"


def script(page: str, marker: str, port: int) -> str:
    block = block_after(page, marker)
    assert "127.0.0.1:5199" in block, f"{page} {marker}: the example no longer says where the daemon is"
    return block.replace("127.0.0.1:5199", f"127.0.0.1:{port}")


def bash(text: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def site(tmp_path: Path, scripted: ScriptedOpenAIThread) -> Setup:
    routes = json.loads(block_after("docs/http-api.md", "example: webhooks"))
    return Setup(tmp_path / "site", scripted.base_url, webhooks=routes)


def test_the_api_and_webhook_examples_run_as_written(site: Setup, daemons: Daemons) -> None:
    env = subprocess_env(ALERTS_SECRET=SECRET)
    daemons.start(site.config, site.data_dir, site.port, env=env)

    # TOKEN=$(cat data/control.token) — run where the config (and its data/) is.
    done = bash(script("docs/http-api.md", "run: message", site.port), site.root)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["session_id"] == "cli:demo" and answer["reply"] == "echo: hi"

    done = bash(script("docs/http-api.md", "run: webhook", site.port), site.root, ALERTS_SECRET=SECRET)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["session_id"] == "webhook:alerts:db-1" and answer["message_id"], answer

    # `netclaw` finds ./netclaw.json where it runs, and the daemon through it. (This
    # repository's, whether or not an installed one is on PATH.)
    bin_dir = site.root / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "netclaw"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m netclaw.cli "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    done = bash(block_after("docs/cli.md", "run: reminders"), site.root, PATH=path)
    assert done.returncode == 0, done.stderr
    added = done.stdout.splitlines()
    assert len(added) == 2 and all(line.startswith("rem-") and ": next " in line for line in added), added


def test_the_event_stream_example_runs_as_written(site: Setup, daemons: Daemons) -> None:
    daemon = daemons.start(site.config, site.data_dir, site.port)
    token = (site.data_dir / "control.token").read_text(encoding="utf-8").strip()
    stream = subprocess.Popen(
        ["bash", "-c", script("docs/events.md", "run: events", site.port)],
        cwd=site.root,
        env=subprocess_env(TOKEN=token),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert stream.stdout is not None
        for line in stream.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()

    def wait_for(prefix: str) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line
        raise AssertionError(f"the stream never showed {prefix!r}")

    try:
        assert wait_for("event: ") == "event: joined"
        assert json.loads(wait_for("data: ").removeprefix("data: "))["session_id"] == "cli:demo"
        daemon.post("cli:demo", "hello", wait=True)
        wait_for("event: text_delta")
        delta = json.loads(wait_for("data: ").removeprefix("data: "))
        assert delta["turn"] == 1 and delta["delta"]
    finally:
        stream.kill()
        stream.wait(timeout=10)
