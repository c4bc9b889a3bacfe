"""A daemon to open in a browser: the real daemon in this process against the scripted
provider, with a clock the test moves for reminders and a ``deploy`` tool that waits for a
person's approval. Shared by the browser tests and ``python -m tests.browser.screenshots``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.tools import Tool, ToolContext
from tests.conftest import DaemonHandle, settings_data
from tests.fakes.clock import FakeClock
from tests.fakes.scripted_openai import ScriptedOpenAIThread

CHROMIUM = os.environ.get("NETCLAW_CHROMIUM", "/usr/bin/chromium")
# Debian's chromium, driven by Playwright; never a downloaded browser. No network but loopback.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def need_chromium() -> None:
    """Skip (saying why) where no browser test can run; fail instead where CI requires them
    (``REQUIRE_CHROMIUM_FOR_TESTS=1``)."""
    import pytest

    reason = chromium_missing()
    if reason is None:
        return
    if os.environ.get("REQUIRE_CHROMIUM_FOR_TESTS") == "1":
        pytest.fail(f"REQUIRE_CHROMIUM_FOR_TESTS=1 but {reason}")
    pytest.skip(reason)


def chromium_missing() -> str | None:
    """Why no browser test can run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set NETCLAW_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[dev]')"
    return None


@dataclass
class Recorder:
    """The ``deploy`` tool: counts its runs (the thing a person approves)."""

    calls: list[Mapping[str, Any]] = field(default_factory=list)
    ran: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls.append(dict(args))
        self.ran.set()
        return f"deployed {args.get('what', '?')}"


@dataclass
class Room:
    handle: DaemonHandle
    scripted: ScriptedOpenAIThread
    clock: FakeClock
    deploy: Recorder

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def token(self) -> str:
        return self.handle.token


# The model has a price, so the usage page counts money and draws its charts.
PRICED_MAIN = {
    "provider": "local",
    "model": "scripted",
    "context_window": 32768,
    "max_output_tokens": 1024,
    "price": {"input": 3.0, "output": 15.0},  # per million tokens
}


@contextmanager
def open_room(data_dir: Path, **sections: Any) -> Iterator[Room]:
    # A second model a person may choose for a session (the session page's Model form).
    sections.setdefault("models", {"main": PRICED_MAIN, "big": {**PRICED_MAIN, "model": "scripted-big"}})
    with ScriptedOpenAIThread() as scripted:
        config = settings_data(
            data_dir, scripted.base_url, audiences={"personal": {"approve": ["deploy"]}}, **sections
        )
        clock = FakeClock(time.time())
        daemon = Daemon(Settings(**config), clock=clock)
        daemon.start()
        handle = DaemonHandle(daemon)
        try:
            recorder = Recorder()
            assert daemon.tools is not None
            schema = {"type": "object", "properties": {"what": {"type": "string"}}}
            daemon.tools.register(Tool("deploy", "Deploy something.", schema, recorder))
            yield Room(handle, scripted, clock, recorder)
        finally:
            handle.stop()


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def log_in(page: Any, room: Room) -> None:
    page.goto(f"{room.base_url}/ui/login")
    page.get_by_label("Control token").fill(room.token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/ui/sessions")
