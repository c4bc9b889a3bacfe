"""Shared fixtures: a scripted provider, settings in a temp dir, and the real daemon
embedded in the test process (its own loop thread, HTTP on 127.0.0.1, port 0)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pykka
import pytest

from netclaw.config import Settings, settings_model
from netclaw.daemon import Daemon
from netclaw.security.control_token import read_control_token
from tests.fakes.scripted_openai import ScriptedOpenAIThread


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a module's tests on one xdist worker only where they share a module-scoped
    fixture (a homeserver, an installed venv, a container): each worker would otherwise
    build its own. Every other test is handed out one by one (``--dist loadgroup``), so
    a file of long end-to-end tests no longer keeps one worker busy while the others idle."""
    for item in items:
        if item.get_closest_marker("netclaw_image") is not None:
            # Builds of the same Dockerfile share cached layers, and one test's `docker rmi`
            # of its tag can delete a layer another build is about to use ("No such image"):
            # one worker builds them all, one after another.
            item.add_marker(pytest.mark.xdist_group("netclaw-image"))
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture
def scripted() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        yield server


def wait_until(
    predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition", interval: float = 0.02
) -> Any:
    """Poll ``predicate`` until it returns something truthy (which is returned)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
    return value


def settings_data(data_dir: Path, base_url: str, /, **sections: Any) -> dict[str, Any]:
    """A config dict for tests: fast retries, port 0, the given base_url; sections override."""
    data: dict[str, Any] = {
        "data_dir": str(data_dir),
        "providers": {"local": {"type": "openai", "base_url": base_url, "timeout_s": 10, "max_retries": 2}},
        "models": {
            "main": {
                "provider": "local",
                "model": "scripted",
                "context_window": 32768,
                "max_output_tokens": 1024,
            }
        },
        "gateway": {"host": "127.0.0.1", "port": 0},
        "tools": {"workspace_dir": str(data_dir.parent / "workspace")},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture
def make_settings(tmp_path: Path, scripted: ScriptedOpenAIThread) -> Callable[..., Settings]:
    def make(**sections: Any) -> Settings:
        return settings_model()(**settings_data(tmp_path / "data", scripted.base_url, **sections))

    return make


class DaemonHandle:
    """A started in-process daemon plus an authorised HTTP client for it."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._stopped = False
        token = read_control_token(daemon.settings)
        assert token is not None
        self.token = token
        self.http = httpx.Client(
            base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    @property
    def base_url(self) -> str:
        return self.daemon.base_url

    def send(self, session_id: str, text: str, *, wait: bool = False, **kwargs: Any) -> httpx.Response:
        params = {"wait": "1"} if wait else None
        return self.http.post(
            f"/api/sessions/{session_id}/messages", json={"text": text}, params=params, **kwargs
        )

    def transcript(self, session_id: str, view: str = "transcript") -> list[dict[str, Any]]:
        response = self.http.get(f"/api/sessions/{session_id}", params={"view": view})
        response.raise_for_status()
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    def stop(self) -> None:
        if self._stopped:  # tests that restart stop a daemon early; teardown stops it again
            return
        self._stopped = True
        self.http.close()
        self.daemon.stop()


@pytest.fixture
def start_daemon(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., DaemonHandle]]:
    """Call with config sections to start a daemon; all are stopped at teardown."""
    handles: list[DaemonHandle] = []

    def start(**sections: Any) -> DaemonHandle:
        daemon = Daemon(make_settings(**sections))
        daemon.start()
        handle = DaemonHandle(daemon)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()
    survivors = pykka.ActorRegistry.get_all()
    pykka.ActorRegistry.stop_all()
    assert not survivors, f"actors survived daemon shutdown: {survivors}"


@pytest.fixture
def daemon(start_daemon: Callable[..., DaemonHandle]) -> DaemonHandle:
    return start_daemon()


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.fixture(autouse=True)
def _quiet_httpx() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)


# -- PostgreSQL (the scale-out backend): one throwaway server per test run -------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """The real PostgreSQL server, started once for the run in a temp dir (skipped where it
    is not installed, unless CI requires it)."""
    from tests.postgres import server_for_tests

    yield from server_for_tests()


@pytest.fixture
def pg_dsn(postgres: Any) -> str:
    """A fresh database on the run's server, migrated."""
    from netclaw.persistence.postgres import prepare_postgres

    dsn: str = postgres.create_database()
    prepare_postgres(dsn)
    return dsn
