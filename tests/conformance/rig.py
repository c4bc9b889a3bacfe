"""The rig a case gets: one channel's driver, the kit model, and the daemon between them.

- :class:`InProcess`: the daemon embedded in the test process (its own loop thread), as
  the integration tests run it — fast; one per driver per test module.
- :class:`Subprocess`: ``netclaw run`` as a child process started through the driver's
  launcher, which a case may SIGKILL and start again on the same data (the outbox, an
  approval across a restart).

Both configure the daemon the same way (:func:`kit_sections`): the channel against its
fake, and the roles the cases rely on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pykka
import pytest

from netclaw.config import settings_model
from netclaw.daemon import Daemon as NetclawDaemon
from tests.conformance.driver import ChannelDriver, Daemon, Person
from tests.conformance.model import KitModel
from tests.conftest import DaemonHandle, settings_data
from tests.e2e.conftest import DaemonProcess, config_data, free_port, subprocess_env, write_json
from tests.fakes.scripted_openai import ScriptedOpenAIThread

T = TypeVar("T")

TIMEOUT_S = 20.0  # a bound on waiting for what a case expects, not a pause
LIMITED_TOOLS = ["remember"]  # bob's role: current_time is not among them
GATED_TOOL = "current_time"  # carol's role: its calls wait for a decision, which she may make


def kit_sections(
    driver: ChannelDriver, workspace: Path, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The daemon's config: the channel against its fake; bob in a role without
    ``current_time``; carol in a role whose ``current_time`` calls wait for an approval
    she may decide; alice in no role (the audience's rules alone). ``extra``: sections a
    module's cases add (speech endpoints, more providers)."""
    return {
        **(extra or {}),
        **driver.sections(),
        "roles": {
            "limited": {"members": [driver.speaker("bob")], "tools": LIMITED_TOOLS},
            "gated": {"members": [driver.speaker("carol")], "approve_tools": [GATED_TOOL], "approve": True},
        },
        "tools": {"workspace_dir": str(workspace)},
    }


def wait_for(predicate: Callable[[], T], what: str, timeout: float = TIMEOUT_S) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


class Rig:
    """What every case uses; ``daemon`` is set once the daemon is up."""

    def __init__(self, driver: ChannelDriver, model: KitModel) -> None:
        self.driver = driver
        self.model = model
        self.daemon: Daemon | None = None

    @property
    def control(self) -> Any:
        assert self.daemon is not None, "the daemon is not up"
        return self.daemon.control

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        """The session's messages ([] while it does not exist yet)."""
        response = self.control.get(f"/api/sessions/{session_id}")
        if response.status_code == 404:
            return []
        response.raise_for_status()
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    def user_texts(self, session_id: str) -> list[str]:
        from tests.conformance.model import last_user_text

        return [last_user_text({"messages": [m]}) for m in self.transcript(session_id) if m["role"] == "user"]

    def replied(self, conversation: str, text: str, timeout: float = TIMEOUT_S) -> list[str]:
        """Wait until ``text`` is among the bot's messages in ``conversation``; returns them."""

        def shown() -> list[str]:
            found = self.driver.bot_messages(conversation)
            return found if text in found else []

        return wait_for(
            shown,
            f"{text[:60]!r} in {self.driver.name} conversation {conversation} "
            f"(shown: {self.driver.bot_messages(conversation)!r:.300})",
            timeout,
        )

    def start_conversation(self, text: str, *, person: Person = "alice") -> str:
        """``person`` starts a conversation with ``text`` and gets the echo: its conversation."""
        said = self.driver.say(text, person=person)
        conversation = self.driver.conversation_of(said)
        self.replied(conversation, f"echo: {text}")
        return conversation


class InProcess(Rig):
    """The daemon in this process."""

    @contextlib.contextmanager
    def running(
        self, root: Path, provider: ScriptedOpenAIThread, extra: dict[str, Any] | None = None
    ) -> Iterator[InProcess]:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in self.driver.env().items():
                patch.setenv(key, value)
            self.driver.in_process(patch)
            data = settings_data(
                root / "data", provider.base_url, **kit_sections(self.driver, root / "workspace", extra)
            )
            daemon = NetclawDaemon(settings_model()(**data))  # with every channel's section
            daemon.start()
            handle = DaemonHandle(daemon)
            try:
                self.daemon = Daemon(daemon.base_url, handle.http)
                self.driver.attach(self.daemon)
                yield self
            finally:
                handle.stop()
                pykka.ActorRegistry.stop_all()


class Subprocess(Rig):
    """``netclaw run`` as a child process, restartable on the same data_dir."""

    def __init__(
        self,
        driver: ChannelDriver,
        model: KitModel,
        root: Path,
        provider_url: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(driver, model)
        self.root = root
        self.data_dir = root / "data"
        self.port = free_port()
        sections = kit_sections(driver, root / "workspace", extra)
        self.config = write_json(
            root / "netclaw.json", config_data(self.data_dir, provider_url, self.port, **sections)
        )
        self.process: DaemonProcess | None = None
        self._all: list[DaemonProcess] = []

    def start(self) -> DaemonProcess:
        """Start the daemon (again) and wait until it serves and its channel is attached."""
        argv = [*self.driver.launcher(), "run", "--config", str(self.config)]
        process = DaemonProcess(
            self.config,
            self.data_dir,
            self.port,
            self.root / "logs",
            argv=argv,
            env={**subprocess_env(), **self.driver.env()},
        )
        self._all.append(process)
        process.wait_ready()
        assert process.http is not None
        self.process = process
        self.daemon = Daemon(process.base_url, process.http)
        self.driver.attach(self.daemon)
        return process

    def sigkill(self) -> None:
        assert self.process is not None
        self.process.sigkill()
        self.process = None
        self.daemon = None

    def close(self) -> None:
        for process in self._all:
            process.close()
