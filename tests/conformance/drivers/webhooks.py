"""The webhook driver: plain HTTP to the daemon's ``POST /webhooks/<route>``, with the
route's bearer secret. There is no platform to fake: the sender is the test.

Each person is a route of their own (``kit-alice`` …: on webhooks the speaker roles see is
the route, ``webhook:<route>``); a conversation is ``<route>:<session key>`` and continues
when the sender posts the same key again. What people see is the session's replies (what
``?wait=1`` would have answered); approvals are decided through the control API (the
channel declares ``approvals="api"``), whoever ``person`` is. No edits, files or chat
commands: the cases that need them are skipped.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx
import pytest

from adapters.channel import Capabilities
from adapters.webhook import CHANNEL
from tests.conformance.driver import PEOPLE, Daemon, Decision, Edit, Person, Prompt, Said

SECRET_ENV = "KIT_WEBHOOK_SECRET"
SECRET = "kit-webhook-secret-0123456789-abcdefghijklmnop"


def route_of(person: Person) -> str:
    return f"kit-{person}"


class WebhooksDriver:
    name: ClassVar[str] = "webhooks"
    chat_commands: ClassVar[bool] = False

    def __init__(self) -> None:
        self._daemon: Daemon | None = None

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def sections(self) -> dict[str, Any]:
        route = {
            "auth": {"type": "bearer", "secret_env": SECRET_ENV},
            "session_key": "$.conversation",
            "text": "$.text",
            "rate_limit_per_minute": 1000,
        }
        return {"webhooks": {"routes": {route_of(p): route for p in PEOPLE}}}

    def env(self) -> dict[str, str]:
        return {SECRET_ENV: SECRET}

    def launcher(self) -> list[str]:
        return [sys.executable, "-m", "netclaw.cli"]

    def in_process(self, patch: pytest.MonkeyPatch) -> None:
        return None

    def attach(self, daemon: Daemon) -> None:
        self._daemon = daemon

    @property
    def daemon(self) -> Daemon:
        assert self._daemon is not None, "the daemon is not attached"
        return self._daemon

    @property
    def capabilities(self) -> Capabilities:
        return CHANNEL.capabilities

    def speaker(self, person: Person) -> str:
        return f"webhook:{route_of(person)}"

    # -- people ----------------------------------------------------------------------------------

    def say(
        self,
        text: str,
        conversation: str | None = None,
        *,
        person: Person = "alice",
        mention: bool = True,
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> Said:
        assert not files, "webhooks take no files"
        if conversation is None:  # a new session key, on the person's own route
            conversation = f"{route_of(person)}:{uuid.uuid4().hex[:16]}"
        route, key = conversation.split(":")
        delivery = (route, {"conversation": key, "text": text}, uuid.uuid4().hex)
        self._post(delivery)
        return Said(text, person, conversation, delivery)

    def _post(self, delivery: tuple[str, dict[str, Any], str]) -> None:
        route, body, key = delivery
        response = httpx.post(
            f"{self.daemon.base_url}/webhooks/{route}",
            json=body,
            headers={"Authorization": f"Bearer {SECRET}", "Idempotency-Key": key},
            timeout=30,
        )
        assert response.status_code in (200, 202), (response.status_code, response.text)

    def redeliver(self, said: Said) -> None:
        self._post(said.ref)  # the sender retries: the same body and Idempotency-Key

    def conversation_of(self, said: Said, timeout: float = 10.0) -> str:
        assert said.conversation is not None
        return said.conversation

    def session_of(self, conversation: str) -> str:
        return f"webhook:{conversation}"

    def press(self, prompt: Prompt, decision: Decision, *, person: Person = "alice") -> None:
        response = self.daemon.control.post(
            f"/api/sessions/{prompt.ref}/approvals/{prompt.approval_id}", json={"decision": decision}
        )
        assert response.status_code == 200, (response.status_code, response.text)

    # -- what people see ---------------------------------------------------------------------------

    def _replies(self, session_id: str) -> list[str]:
        response = self.daemon.control.get(f"/api/sessions/{session_id}")
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return [
            str(m["content"])
            for m in response.json()["messages"]
            if m["role"] == "assistant" and isinstance(m.get("content"), str) and m["content"]
        ]

    def bot_messages(self, conversation: str) -> list[str]:
        return self._replies(self.session_of(conversation))

    def everywhere(self) -> list[str]:
        sessions = self.daemon.control.get("/api/sessions").json()
        return [
            text for s in sessions if str(s["id"]).startswith("webhook:") for text in self._replies(s["id"])
        ]

    def told(self, person: Person) -> list[str]:
        return []  # an HTTP sender is told in the response; approvals go through the control API

    def edits(self, conversation: str) -> list[Edit]:
        return []

    def prompts(self, conversation: str) -> list[Prompt]:
        session_id = self.session_of(conversation)
        response = self.daemon.control.get(f"/api/sessions/{session_id}/approvals")
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return [Prompt(a["id"], str(a.get("tool", "")), session_id) for a in response.json()]

    def files_received(self, conversation: str) -> list[tuple[str, bytes]]:
        return []


DRIVER = WebhooksDriver
