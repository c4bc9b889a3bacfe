"""A channel installed as its own package, with no change to netclaw: the complete example
of docs/channels/writing-a-channel.md (the *relay*), written out from the page as it is,
``pip install``ed into a venv beside netclaw, listed by ``netclaw channels`` and answering a
message through a running daemon. And a channel package that cannot even be imported:
reported by ``netclaw channels`` and ``/healthz``, never fatal to the daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.doc_blocks import block_after
from tests.e2e.conftest import Daemons, Setup, free_port, run_cli, subprocess_env, wait_until, write_json
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PAGE = "docs/channels/writing-a-channel.md"
FILES = (
    "netclaw-relay/pyproject.toml",
    "netclaw-relay/netclaw_relay/__init__.py",
    "netclaw-relay/netclaw_relay/adapter.py",
)
SECRET = "relay-secret-for-the-test-0123456789abcdef"

BROKEN_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "netclaw-broken"
version = "0.1"

[project.entry-points."netclaw.channels"]
broken = "netclaw_broken:CHANNEL"

[tool.hatch.build.targets.wheel]
packages = ["netclaw_broken"]
"""


class Platform:
    """The relay platform's side: its reply_url, keeping what the bot posted and edited."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.messages: dict[str, str] = {}  # id -> text as people see it now
        self.lock = threading.Lock()
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ok = self.headers.get("X-Relay-Secret") == SECRET
                with platform.lock:
                    platform.calls.append(body)
                    answer: dict[str, Any] = {}
                    if ok and body["op"] == "post":
                        answer["id"] = message_id = f"r{len(platform.messages) + 1}"
                        platform.messages[message_id] = body["text"]
                    elif ok and body["op"] == "edit":
                        platform.messages[body["id"]] = body["text"]
                data = json.dumps(answer).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/replies"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def texts(self) -> list[str]:
        with self.lock:
            return list(self.messages.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def platform() -> Iterator[Platform]:
    found = Platform()
    yield found
    found.close()


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv beside this netclaw (its site packages visible) with the page's relay package
    and a broken channel package installed by pip."""
    root = tmp_path_factory.mktemp("channel-package")
    for name in FILES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block_after(PAGE, f"example: {name}"), encoding="utf-8")
    broken = root / "netclaw-broken"
    (broken / "netclaw_broken").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT, encoding="utf-8")
    (broken / "netclaw_broken" / "__init__.py").write_text(
        "import a_library_that_is_not_installed  # noqa: F401\n", encoding="utf-8"
    )
    env = root / "venv"
    # No pip of its own (ensurepip takes seconds): this interpreter's pip installs into it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)], check=True
    )
    for package in (root / "netclaw-relay", broken):
        done = subprocess.run(
            # The build backend (hatchling) comes from netclaw's environment (its dev extra).
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(env / "bin" / "python"),
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                str(package),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"pip install {package.name} failed:\n{done.stdout}\n{done.stderr}"
    return env


def test_a_channel_package_installed_beside_netclaw_is_listed_and_answers(
    venv: Path, platform: Platform, scripted: ScriptedOpenAIThread, daemons: Daemons, tmp_path: Path
) -> None:
    section = json.loads(block_after(PAGE, "example: relay netclaw.json section"))
    section["relay"]["reply_url"] = platform.url
    setup = Setup(tmp_path / "site", scripted.base_url, **section)
    env = subprocess_env(RELAY_SECRET=SECRET)
    python = str(venv / "bin" / "python")

    listed = run_cli(
        "channels", "--config", str(setup.config), executable=[python, "-m", "netclaw.cli"], env=env
    )
    relay = next(line for line in listed.stdout.splitlines() if line.strip().startswith("relay"))
    assert "enabled" in relay and "[netclaw-relay 1.0]" in relay, listed.stdout
    assert "FAILED TO LOAD" in listed.stdout and "a_library_that_is_not_installed" in listed.stdout
    assert listed.returncode == 1, "a channel that fails to load makes `netclaw channels` exit 1"

    daemon = daemons.start(
        setup.config,
        setup.data_dir,
        setup.port,
        argv=[python, "-m", "netclaw.cli", "run", "--config", str(setup.config)],
        env=env,
    )
    message = {"id": "m1", "chat": "room1", "user": "alice", "text": "hello relay"}
    headers = {"X-Relay-Secret": SECRET}
    answer = httpx.post(f"{daemon.base_url}/relay/messages", json=message, headers=headers, timeout=10)
    assert answer.status_code == 202 and answer.json() == {"accepted": True, "duplicate": False}
    wait_until(
        lambda: any(t.endswith("hello relay") for t in platform.texts()),
        20,
        f"the reply (so far {platform.texts()})",
    )
    again = httpx.post(f"{daemon.base_url}/relay/messages", json=message, headers=headers, timeout=10)
    assert again.json() == {"accepted": True, "duplicate": True}
    assert [u for u in daemon.session("relay:room1")["messages"] if u["role"] == "user"].__len__() == 1

    refused = httpx.post(f"{daemon.base_url}/relay/messages", json=message, timeout=10)
    assert refused.status_code == 401
    elsewhere = httpx.post(
        f"{daemon.base_url}/relay/messages",
        json={**message, "id": "m2", "chat": "room2"},
        headers=headers,
        timeout=10,
    )
    assert elsewhere.status_code == 403, "room2 is not in the relay section's channels"

    running = run_cli(
        "channels", "--config", str(setup.config), executable=[python, "-m", "netclaw.cli"], env=env
    )
    relay = next(line for line in running.stdout.splitlines() if line.strip().startswith("relay"))
    assert "enabled, running" in relay, running.stdout


def test_a_channel_package_that_cannot_load_is_reported_and_the_daemon_runs(
    venv: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, tmp_path: Path
) -> None:
    port = free_port()
    data = tmp_path / "data"
    config = write_json(
        tmp_path / "netclaw.json",
        {
            "data_dir": str(data),
            "providers": {"local": {"type": "openai", "base_url": scripted.base_url}},
            "models": {"main": {"provider": "local", "model": "scripted"}},
            "gateway": {"host": "127.0.0.1", "port": port},
            "broken": {"enabled": True, "token_env": "WHATEVER"},  # as written: its model never loaded
        },
    )
    python = str(venv / "bin" / "python")
    daemon = daemons.spawn(
        config, data, port, argv=[python, "-m", "netclaw.cli", "run", "--config", str(config)]
    )
    health = wait_until(
        lambda: httpx.get(f"{daemon.base_url}/healthz", timeout=2).json(), 30, "the daemon to answer"
    )
    state = health["adapters"]["broken"]
    assert state["state"] == "disabled" and "a_library_that_is_not_installed" in state["detail"], state
    assert health["status"] == "degraded", "a configured channel that cannot run degrades the health"
    token = (data / "control.token").read_text(encoding="utf-8").strip()
    answer = httpx.post(
        f"{daemon.base_url}/api/sessions/cli:still-works/messages",
        params={"wait": "1"},
        json={"text": "hello"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200 and "hello" in answer.text, answer.text
