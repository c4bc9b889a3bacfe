"""A throwaway Synapse homeserver for tests: the real ``matrix-synapse`` from PyPI, in its own
virtualenv (its pins are not ours), on 127.0.0.1 with SQLite in a temporary directory, no
federation, no TLS, rate limits raised for tests. Found through ``$SYNAPSE_PYTHON_FOR_TESTS``
(that venv's python) or ``/opt/synapse/bin/python``; tests skip, saying so, without it
(``.ci/run`` installs it, and sets REQUIRE_SYNAPSE_FOR_TESTS so CI never skips).

:class:`MatrixUser` is a person on that server, driving the client-server API over plain
HTTP (httpx): what a Matrix client would send, independent of the library netclaw uses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

PYTHON_ENV = "SYNAPSE_PYTHON_FOR_TESTS"
DEFAULT_PYTHON = "/opt/synapse/bin/python"
REQUIRE_ENV = "REQUIRE_SYNAPSE_FOR_TESTS"  # CI sets it: a missing Synapse fails, never skips
START_TIMEOUT_S = 90.0  # a bound, not a pause: start-up takes a few seconds, more on a busy machine
SERVER_NAME = "localhost"

# Every limit a test could meet, raised (the defaults allow one message every 5 s).
_OPEN = {"per_second": 10000, "burst_count": 10000}
RATE_LIMITS: dict[str, Any] = {
    "rc_message": _OPEN,
    "rc_registration": _OPEN,
    "rc_login": {"address": _OPEN, "account": _OPEN, "failed_attempts": _OPEN},
    "rc_joins": {"local": _OPEN, "remote": _OPEN},
    "rc_joins_per_room": _OPEN,
    "rc_invites": {"per_room": _OPEN, "per_user": _OPEN, "per_issuer": _OPEN},
    "rc_room_creation": _OPEN,
    "rc_media_create": _OPEN,
    "rc_admin_redaction": _OPEN,
    "rc_presence": {"per_user": _OPEN},
}


def synapse_python() -> str | None:
    """The python of the venv Synapse is installed in, if there is one."""
    for candidate in (os.environ.get(PYTHON_ENV), DEFAULT_PYTHON):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SynapseServer:
    """``start()`` → write a config, start ``synapse.app.homeserver``, wait for /health;
    ``register(name)``; ``stop()``."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = Path(tempfile.mkdtemp(prefix="netclaw-synapse-"))
        self.secret = secrets.token_hex(16)
        self.log = self.root / "synapse.out"
        self._proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> list[str]:
        """The whole config, written here rather than by ``--generate-config`` (a second
        Synapse process, ~2 s): the keys it would generate are random strings and an
        ed25519 signing key, whose file holds an unpadded base64 seed."""
        seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        signing_key = self.root / "signing.key"
        signing_key.write_text(f"ed25519 a_test {seed}\n", encoding="utf-8")
        config = {
            "server_name": SERVER_NAME,
            "pid_file": str(self.root / "homeserver.pid"),
            "signing_key_path": str(signing_key),
            "macaroon_secret_key": secrets.token_hex(32),
            "form_secret": secrets.token_hex(32),
            "public_baseurl": f"{self.url}/",
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.root / "homeserver.db")}},
            "log_config": None,
            "media_store_path": str(self.root / "media"),
            "registration_shared_secret": self.secret,
            "enable_registration": False,
            "federation_domain_whitelist": [],
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "report_stats": False,
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            "max_upload_size": "50M",
            # Registering hashes the password: the fewest rounds bcrypt takes (12 cost ~0.5 s a user).
            "bcrypt_rounds": 4,
            **RATE_LIMITS,
        }
        path = self.root / "homeserver.yaml"
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")  # JSON is YAML
        return ["--config-path", str(path)]

    def start(self) -> SynapseServer:
        config = self._write_config()
        log = self.log.open("wb")
        self._proc = subprocess.Popen(
            [self.python, "-m", "synapse.app.homeserver", *config],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Synapse exited with {self._proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).text == "OK":
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"Synapse did not answer /health within {START_TIMEOUT_S:g}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-5000:] if self.log.exists() else ""

    def register(self, name: str, *, admin: bool = False, password: str = "") -> MatrixUser:
        """A new user through the shared-secret admin registration API; logged in."""
        password = password or secrets.token_hex(8)
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=10).json()["nonce"]
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(
            b"\x00".join(
                [nonce.encode(), name.encode(), password.encode(), b"admin" if admin else b"notadmin"]
            )
        )
        response = httpx.post(
            endpoint,
            json={
                "nonce": nonce,
                "username": name,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
            timeout=30,
        )
        response.raise_for_status()
        body = response.json()
        return MatrixUser(self.url, body["user_id"], body["access_token"], password)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


def require_synapse() -> str:
    """The python of Synapse's venv. Skips the test, saying why, when no Synapse is
    installed (fails instead under REQUIRE_SYNAPSE_FOR_TESTS)."""
    python = synapse_python()
    if python is None:
        why = (
            f"Synapse is not installed: set {PYTHON_ENV} to the python of a venv with "
            f"matrix-synapse, or install it in /opt/synapse (see .ci/run)"
        )
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(why)
        pytest.skip(why)
    return python


def synapse_for_tests() -> Iterator[SynapseServer]:
    """A started server for a fixture to yield, stopped after (:func:`require_synapse`)."""
    server = SynapseServer(require_synapse()).start()
    try:
        yield server
    finally:
        server.stop()


# -- a person on the homeserver -----------------------------------------------------------------


def quoted(value: str) -> str:
    return urllib.parse.quote(value, safe="")


class MatrixUser:
    """One Matrix user over the plain client-server API (what their client would send)."""

    def __init__(self, url: str, user_id: str, token: str, password: str) -> None:
        self.url = url
        self.user_id = user_id
        self.token = token
        self.password = password
        self.http = httpx.Client(
            base_url=f"{url}/_matrix/client/v3", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path} → {response.status_code}: {response.text}")
        return response.json()

    def create_room(self, *, invite: list[str] = (), encrypted: bool = False, direct: bool = False) -> str:  # type: ignore[assignment]
        body: dict[str, Any] = {"preset": "private_chat", "invite": list(invite), "is_direct": direct}
        if encrypted:
            body["initial_state"] = [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
        room: str = self.call("POST", "/createRoom", json=body)["room_id"]
        return room

    def invite(self, room: str, user_id: str) -> None:
        self.call("POST", f"/rooms/{quoted(room)}/invite", json={"user_id": user_id})

    def join(self, room: str) -> None:
        self.call("POST", f"/join/{quoted(room)}", json={})

    def send(self, room: str, content: dict[str, Any], event_type: str = "m.room.message") -> str:
        txn = secrets.token_hex(8)
        event: str = self.call("PUT", f"/rooms/{quoted(room)}/send/{event_type}/{txn}", json=content)[
            "event_id"
        ]
        return event

    def say(self, room: str, text: str, *, mention: str | None = None, thread: str | None = None) -> str:
        """A text message: ``mention`` a user (as Element does: m.mentions and a pill), in
        ``thread`` (an m.thread relation to its root)."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if mention is not None:
            content["body"] = f"{mention}: {text}"
            content["m.mentions"] = {"user_ids": [mention]}
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        return self.send(room, content)

    def react(self, room: str, event_id: str, key: str) -> str:
        return self.send(
            room,
            {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}},
            "m.reaction",
        )

    def upload(self, name: str, data: bytes, mime_type: str) -> str:
        response = httpx.post(
            f"{self.url}/_matrix/media/v3/upload",
            params={"filename": name},
            content=data,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": mime_type},
            timeout=30,
        )
        response.raise_for_status()
        uri: str = response.json()["content_uri"]
        return uri

    def download(self, mxc: str) -> bytes:
        server, _, media = mxc.removeprefix("mxc://").partition("/")
        response = httpx.get(
            f"{self.url}/_matrix/client/v1/media/download/{server}/{media}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.content

    def messages(self, room: str, limit: int = 200) -> list[dict[str, Any]]:
        """The room's events, oldest first (what a client scrolling back would see)."""
        body = self.call("GET", f"/rooms/{quoted(room)}/messages", params={"dir": "b", "limit": limit})
        events: list[dict[str, Any]] = list(reversed(body["chunk"]))
        return events

    def members(self, room: str) -> dict[str, str]:
        """user id → membership."""
        state = self.call("GET", f"/rooms/{quoted(room)}/state")
        return {e["state_key"]: e["content"]["membership"] for e in state if e["type"] == "m.room.member"}

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.1)
        return value

    def close(self) -> None:
        self.http.close()


def shown_messages(events: list[dict[str, Any]], sender: str) -> list[dict[str, Any]]:
    """``sender``'s messages as a client shows them: each edit (m.replace) applied to its
    original, redacted ones gone; oldest first. Each keeps ``event_id``, ``content`` (the
    latest) and ``edits`` (how many times it was edited)."""
    shown: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("sender") != sender or event.get("type") != "m.room.message":
            continue
        content = event.get("content") or {}
        if not content:  # redacted
            shown.pop(event["event_id"], None)
            continue
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            original = shown.get(relation.get("event_id", ""))
            if original is not None:
                original["content"] = content.get("m.new_content") or {}
                original["edits"] += 1
            continue
        shown[event["event_id"]] = {
            "event_id": event["event_id"],
            "content": content,
            "edits": 0,
            "raw": event,
        }
    return list(shown.values())
