"""A small synchronous client of the daemon's HTTP API, for the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from netclaw.config import Settings
from netclaw.errors import ClientError, DaemonNotRunning
from netclaw.process.lock import running_url
from netclaw.security.control_token import read_control_token


class DaemonClient:
    def __init__(self, settings: Settings, *, timeout: float = 30.0) -> None:
        host = settings.gateway.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        # The daemon running on this data_dir says where it listens: after a changed
        # gateway.port and a reload it still serves the port it started on.
        self.base_url = running_url(settings.data_dir) or f"http://{host}:{settings.gateway.port}"
        self._token = read_control_token(settings)
        self._token_source = (
            f"${settings.gateway.control_token_env}"
            if settings.gateway.control_token_env
            else str(settings.data_dir / "control.token")
        )
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)
        # A waited-for turn may run up to the session's turn timeout, plus the daemon's margin.
        self.turn_timeout = settings.session.turn_timeout_s + 60
        self.drain_timeout = settings.cluster.drain_s + 60  # a drain waits for running turns

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        if not self._token:
            if self._token_source.startswith("$"):  # the operator provides it; the daemon never writes one
                raise ClientError(
                    f"no control token in {self._token_source} (gateway.control_token_env): set it to "
                    "the daemon's control token"
                )
            self.health()  # no token is most often "never started": say that if it is so
            raise ClientError(
                f"no control token found in {self._token_source}; start the daemon once with this "
                "config (`netclaw run`) so it creates one, or point --config at the daemon's config"
            )
        return {"Authorization": f"Bearer {self._token}", **(extra or {})}

    def _request(
        self, method: str, path: str, *, accept: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise DaemonNotRunning(
                f"cannot reach the netclaw daemon at {self.base_url} ({exc}); start it with `netclaw run`"
            ) from exc
        except httpx.TimeoutException as exc:
            raise ClientError(f"the daemon at {self.base_url} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise ClientError(f"talking to the daemon at {self.base_url} failed: {exc}") from exc
        if response.status_code == 401 and 401 not in accept and "Authorization" in kwargs.get("headers", {}):
            raise ClientError(
                f"the daemon at {self.base_url} refused the control token from {self._token_source}: "
                "it is another daemon's, or was replaced; is --config the config of the daemon "
                "listening there?",
                status=401,
                code=_error_code(response),
            )
        if response.status_code >= 400 and response.status_code not in accept:
            raise ClientError(_error_text(response), status=response.status_code, code=_error_code(response))
        return response

    def health(self) -> dict[str, Any]:
        """The health report; a degraded daemon (503) still answers with one."""
        result: dict[str, Any] = self._request("GET", "/healthz", accept=(503,)).json()
        return result

    def send(
        self,
        session_id: str,
        text: str,
        *,
        wait: bool = False,
        user: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        body: dict[str, Any] = {"text": text}
        if user:
            body["user"] = user
        kwargs: dict[str, Any] = {"json": body, "headers": self._headers(extra)}
        if wait:
            kwargs["timeout"] = httpx.Timeout(30.0, read=self.turn_timeout)
        result: dict[str, Any] = self._request(
            "POST",
            f"/api/sessions/{_sid(session_id)}/messages",
            params={"wait": "1"} if wait else None,
            **kwargs,
        ).json()
        return result

    def sessions(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "/api/sessions", headers=self._headers()).json()
        return result

    def session(self, session_id: str, *, context: bool = False) -> dict[str, Any]:
        params = {"view": "context"} if context else None
        result: dict[str, Any] = self._request(
            "GET", f"/api/sessions/{_sid(session_id)}", params=params, headers=self._headers()
        ).json()
        return result

    def children(self, session_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request(
            "GET", f"/api/sessions/{_sid(session_id)}/children", headers=self._headers()
        ).json()
        return result

    def cancel(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/api/sessions/{_sid(session_id)}/cancel", headers=self._headers()
        ).json()
        return result

    def reset(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/api/sessions/{_sid(session_id)}/reset", headers=self._headers()
        ).json()
        return result

    def model(self, session_id: str, name: str | None = None) -> dict[str, Any]:
        """The session's model; with ``name``, choose it (``default``: back to main)."""
        if name is None:
            response = self._request(
                "GET", f"/api/sessions/{_sid(session_id)}/model", headers=self._headers()
            )
        else:
            response = self._request(
                "PUT",
                f"/api/sessions/{_sid(session_id)}/model",
                json={"model": name},
                headers=self._headers(),
            )
        result: dict[str, Any] = response.json()
        return result

    def delete(self, session_id: str, *, memories: bool = False) -> None:
        params = {"memories": "1"} if memories else None
        self._request("DELETE", f"/api/sessions/{_sid(session_id)}", params=params, headers=self._headers())

    def memories(
        self, *, query: str | None = None, audience: str | None = None, session: str | None = None
    ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("q", query), ("audience", audience), ("session", session)) if v}
        result: list[dict[str, Any]] = self._request(
            "GET", "/api/memories", params=params, headers=self._headers()
        ).json()
        return result

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any control API call: the answer's JSON (None for an empty answer)."""
        response = self._request(method, path, headers=self._headers(), **kwargs)
        return response.json() if response.content else None

    def approvals(self, session_id: str | None = None) -> list[dict[str, Any]]:
        path = f"/api/sessions/{_sid(session_id)}/approvals" if session_id else "/api/approvals"
        result: list[dict[str, Any]] = self._request("GET", path, headers=self._headers()).json()
        return result

    def decide(self, session_id: str, approval_id: str, decision: str, user: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST",
            f"/api/sessions/{_sid(session_id)}/approvals/{approval_id}",
            json={"decision": decision, "user": user},
            headers=self._headers(),
        ).json()
        return result

    def reminders(self, session_id: str | None = None) -> list[dict[str, Any]]:
        params = {"session": session_id} if session_id else None
        result: list[dict[str, Any]] = self._request(
            "GET", "/api/reminders", params=params, headers=self._headers()
        ).json()
        return result

    def add_reminder(self, session_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/api/sessions/{_sid(session_id)}/reminders", json=fields, headers=self._headers()
        ).json()
        return result

    def delete_reminder(self, reminder_id: str) -> None:
        self._request("DELETE", f"/api/reminders/{reminder_id}", headers=self._headers())

    def usage(self, by: str, since: str | None = None) -> list[dict[str, Any]]:
        params = {"by": by, **({"since": since} if since else {})}
        result: list[dict[str, Any]] = self._request(
            "GET", "/api/usage", params=params, headers=self._headers()
        ).json()
        return result

    def questions(self, session_id: str | None = None) -> list[dict[str, Any]]:
        path = f"/api/sessions/{_sid(session_id)}/questions" if session_id else "/api/questions"
        result: list[dict[str, Any]] = self._request("GET", path, headers=self._headers()).json()
        return result

    def answer(
        self, session_id: str, question_id: str, action: str, content: dict[str, Any] | None, user: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"action": action, "user": user}
        if content is not None:
            body["content"] = content
        result: dict[str, Any] = self._request(
            "POST",
            f"/api/sessions/{_sid(session_id)}/questions/{quote(question_id, safe='')}",
            json=body,
            headers=self._headers(),
        ).json()
        return result

    def mcp_servers(self) -> dict[str, Any]:
        servers: dict[str, Any] = self._request("GET", "/api/mcp", headers=self._headers()).json()["servers"]
        return servers

    def mcp_view(self, name: str, what: str) -> Any:
        """``tools``, ``resources`` or ``prompts`` of one MCP server, as the daemon gets them."""
        return self._request("GET", f"/api/mcp/{quote(name, safe='')}/{what}", headers=self._headers()).json()

    def mcp_reconnect(self, name: str) -> None:
        self._request("POST", f"/api/mcp/{quote(name, safe='')}/reconnect", headers=self._headers())

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics`` (no token needed)."""
        return self._request("GET", "/metrics").text

    # -- several nodes ----------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "/api/cluster", headers=self._headers()).json()
        return result

    def drain(self, node: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST",
            f"/api/cluster/nodes/{quote(node, safe='')}/drain",
            headers=self._headers(),
            timeout=self.drain_timeout,
        ).json()
        return result

    def resume(self, node: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/api/cluster/nodes/{quote(node, safe='')}/resume", headers=self._headers()
        ).json()
        return result

    def owner(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "GET", f"/api/sessions/{_sid(session_id)}/owner", headers=self._headers()
        ).json()
        return result

    def move(self, session_id: str, node: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "POST", f"/api/sessions/{_sid(session_id)}/move", params={"to": node}, headers=self._headers()
        ).json()
        return result

    def edit_memory(self, memory_id: str, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "PATCH", f"/api/memories/{memory_id}", json={"text": text}, headers=self._headers()
        ).json()
        return result

    def forget(self, memory_id: str) -> None:
        self._request("DELETE", f"/api/memories/{memory_id}", headers=self._headers())

    def events(self, session_id: str, filter_spec: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (event, data) from the session's SSE stream until the connection closes."""
        try:
            with self._http.stream(
                "GET",
                f"/api/sessions/{_sid(session_id)}/events",
                params={"filter": filter_spec},
                headers=self._headers(),
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ClientError(
                        _error_text(response), status=response.status_code, code=_error_code(response)
                    )
                event = "message"
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        yield event, json.loads(line[5:].strip())
                        event = "message"
        except httpx.ConnectError as exc:
            raise DaemonNotRunning(
                f"cannot reach the netclaw daemon at {self.base_url}; start it with `netclaw run`"
            ) from exc
        except httpx.HTTPError as exc:
            raise ClientError(f"the event stream from {self.base_url} broke: {exc}") from exc


def _sid(session_id: str) -> str:
    """A session id as a path segment: a sub-agent's ``/`` escaped (``agent:cli:x%2F1``)."""
    return quote(session_id, safe=":")


def _error_text(response: httpx.Response) -> str:
    try:
        err = response.json()["error"]
        return f"{err['message']} ({err['code']}, HTTP {response.status_code})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:300]}"


def _error_code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None
