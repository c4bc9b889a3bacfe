"""Fixtures for end-to-end tests: the daemon and the CLI run as real subprocesses.

Every daemon gets its own free port and a data_dir under tmp_path; its provider is a
scripted OpenAI-compatible server on 127.0.0.1 (the ``scripted`` fixture runs one in a
thread of the test process). Every process started here is killed at teardown, pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes._scripted_server import said
from tests.fakes.scripted_openai import ScriptedOpenAIThread

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0  # a bound, not a pause: start-up on a loaded 2-core machine took over 15 s
SYSTEM_PROMPT = "You are the netclaw e2e test agent ZX-17. Answer in one line."


# -- small helpers -------------------------------------------------------------------------------


def free_port() -> int:
    """A port nobody listens on right now, below the kernel's ephemeral range: a daemon
    restarted on the same port must find it free, and a port from that range (what binding
    port 0 gives) can meanwhile become the local end of any outgoing connection (seen: a
    restart refused, "address already in use", while a homeserver's clients were busy)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 20_000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port below {low} after 200 tries")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def subprocess_env(*, source_tree: bool = True, **extra: str) -> dict[str, str]:
    """The test process's environment without NETCLAW_* overrides (hermetic), plus ``extra``.

    ``source_tree``: put this repository first on PYTHONPATH so ``python -m netclaw.cli``
    runs the code under test whatever the working directory.
    """
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("NETCLAW_")}
    env.pop("PYTHONPATH", None)
    if source_tree:
        env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def config_data(data_dir: Path, base_url: str, port: int, **sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "data_dir": str(data_dir),
        "providers": {"local": {"type": "openai", "base_url": base_url, "timeout_s": 60, "max_retries": 1}},
        "models": {
            "main": {
                "provider": "local",
                "model": "scripted",
                "context_window": 32768,
                "max_output_tokens": 1024,
            }
        },
        "gateway": {"host": "127.0.0.1", "port": port},
        "agent": {"system_prompt": SYSTEM_PROMPT},
        "tools": {"workspace_dir": str(data_dir.parent / "workspace")},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
            last_error = exc
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last error: {last_error!r})")


def run_cli(
    *args: str,
    input: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 30.0,
    executable: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``netclaw ARGS`` (as ``python -m netclaw.cli`` unless ``executable`` is given)."""
    argv = [*(executable or [sys.executable, "-m", "netclaw.cli"]), *args]
    return subprocess.run(
        argv,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env if env is not None else subprocess_env(),
        cwd=cwd or REPO_ROOT,
        timeout=timeout,
        check=False,
    )


def user_text(request: dict[str, Any]) -> str | None:
    """The last user message's text in a chat-completions request body (a turn's volatile
    tail is netclaw's note, not the user's)."""
    for message in reversed(request.get("messages") or []):
        content = message.get("content")
        if message.get("role") == "user" and not (isinstance(content, str) and not said(content)):
            return said(content) if isinstance(content, str) else json.dumps(content)
    return None


def admitted_inputs(db_path: Path, session_id: str) -> list[dict[str, Any]]:
    """The user messages of InputAdmitted journal rows, read from the SQLite file read-only."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE type='InputAdmitted' AND persistence_id=? ORDER BY seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(payload)["message"] for (payload,) in rows]


def snapshot_count(db_path: Path, session_id: str) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT COUNT(*) FROM snapshots WHERE persistence_id=?", (session_id,)).fetchone()
    finally:
        conn.close()
    return int(row[0])


def journal_rows(db_path: Path, session_id: str, type_name: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE type=? AND persistence_id=? ORDER BY seq",
            (type_name, session_id),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(payload) for (payload,) in rows]


# -- the daemon as a subprocess ------------------------------------------------------------------


class DaemonProcess:
    """One ``netclaw run`` subprocess; logs go to files so a full pipe never blocks it."""

    def __init__(
        self,
        config: Path,
        data_dir: Path,
        port: int,
        log_dir: Path,
        *,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.config = config
        self.token = token  # the control token, when it comes from a variable (not data_dir)
        self.data_dir = data_dir
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{time.monotonic_ns()}"
        self.stdout_path = log_dir / f"daemon-{stamp}.out"
        self.stderr_path = log_dir / f"daemon-{stamp}.err"
        self._out = self.stdout_path.open("wb")
        self._err = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "netclaw.cli", "run", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            env=env if env is not None else subprocess_env(),
            cwd=cwd or REPO_ROOT,
        )
        self.http: httpx.Client | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> DaemonProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode} before it was ready:\n{self.stderr()}"
                )
            try:
                response = httpx.get(f"{self.base_url}/healthz", timeout=1.0)
                if response.status_code == 200 and response.json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            raise AssertionError(f"daemon not ready within {timeout:g}s:\n{self.stderr()}")
        token = self.token or (self.data_dir / "control.token").read_text(encoding="utf-8").strip()
        self.http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )
        return self

    # -- API ------------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        assert self.http is not None, "daemon not ready"
        return self.http

    def post(
        self,
        session_id: str,
        text: str,
        *,
        wait: bool = False,
        timeout: float = 30.0,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        return self._client().post(
            f"/api/sessions/{session_id}/messages",
            json={"text": text, "user": "e2e"},
            params={"wait": "1"} if wait else None,
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else None,
            timeout=timeout,
        )

    def acked(self, session_id: str, text: str, *, idempotency_key: str | None = None) -> str:
        """POST without waiting; assert the 202 and return the message id."""
        response = self.post(session_id, text, idempotency_key=idempotency_key)
        assert response.status_code == 202, (response.status_code, response.text)
        body = response.json()
        assert body["session_id"] == session_id
        return str(body["message_id"])

    def session(self, session_id: str, view: str = "transcript") -> dict[str, Any]:
        response = self._client().get(f"/api/sessions/{session_id}", params={"view": view})
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def sessions(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._client().get("/api/sessions").json()
        return result

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._client().get("/healthz").json()
        return result

    # -- signals and teardown ---------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def sigkill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._close_client()

    def sigterm(self, timeout: float) -> tuple[int | None, float]:
        """SIGTERM; (exit code or None if still running after ``timeout``, seconds taken)."""
        started = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - started

    def _close_client(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None

    def close(self) -> None:
        self._close_client()
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self._out.close()
        self._err.close()


class Daemons:
    """Starts daemons for one test and kills whatever is still running at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[DaemonProcess] = []

    def spawn(self, config: Path, data_dir: Path, port: int, **kwargs: Any) -> DaemonProcess:
        daemon = DaemonProcess(config, data_dir, port, self.log_dir, **kwargs)
        self.started.append(daemon)
        return daemon

    def start(self, config: Path, data_dir: Path, port: int, **kwargs: Any) -> DaemonProcess:
        return self.spawn(config, data_dir, port, **kwargs).wait_ready()

    def close(self) -> None:
        for daemon in self.started:
            daemon.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    group = Daemons(tmp_path / "logs")
    try:
        yield group
    finally:
        group.close()


class Setup:
    """A config file, its data_dir and port, for one daemon (restartable on the same data)."""

    def __init__(self, root: Path, base_url: str, **sections: Any) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.port = free_port()
        self.config = write_json(
            root / "netclaw.json", config_data(self.data_dir, base_url, self.port, **sections)
        )

    @property
    def db_path(self) -> Path:
        return self.data_dir / "netclaw.db"


@pytest.fixture
def setup(request: pytest.FixtureRequest, tmp_path: Path, scripted: ScriptedOpenAIThread) -> Setup:
    """Config sections can come from indirect parametrization: ``parametrize("setup", [{...}])``."""
    sections: dict[str, Any] = getattr(request, "param", None) or {}
    return Setup(tmp_path / "site", scripted.base_url, **sections)


@pytest.fixture
def start(setup: Setup, daemons: Daemons) -> Callable[[], DaemonProcess]:
    """Start (or restart) the daemon of ``setup``. (``setup`` first: the daemons are killed
    at teardown before the scripted server they talk to stops.)"""

    def start_one() -> DaemonProcess:
        return daemons.start(setup.config, setup.data_dir, setup.port)

    return start_one
