"""The HTTP server: health, control API and SSE subscriptions (aiohttp, on the I/O loop).

Every error answer is ``{"error": {"code", "message"}}``; bad input is a 4xx
naming what was wrong, never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from netclaw.config import Settings
from netclaw.errors import ConfigError, JournalError, NetclawError, SessionUnavailable
from netclaw.gateway import Gateway, Inbound, InvalidInput, check_session_id
from netclaw.messages import ChatMessage
from netclaw.persistence import Journal
from netclaw.sessions import (
    Admission,
    OutputFilter,
    OutputQueue,
    SessionManager,
    SessionState,
    TurnOutcome,
    build_context,
    load_state,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_048_576
MAX_IDEMPOTENCY_KEY = 200
SSE_HEARTBEAT_S = 15.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers: dict[str, str] = {}

    def with_header(self, name: str, value: str) -> ApiError:
        self.headers[name] = value
        return self


def submission_response(admission: Admission, outcome: TurnOutcome | None) -> web.Response:
    """The answer to a submitted message: 202 once durable; with ``wait``, 200 and the reply,
    or 502 with the turn's error."""
    answer: dict[str, Any] = {"session_id": admission.session_id, "message_id": admission.message_id}
    if admission.duplicate:
        answer["duplicate"] = True
    if outcome is None:
        return web.json_response(answer, status=202)
    answer["turn"] = outcome.turn
    if outcome.status != "completed":
        err = outcome.error or {"code": "turn_failed", "message": f"the turn {outcome.status}"}
        return error_response(502, err["code"], err["message"], {**answer, "status": outcome.status})
    answer["reply"] = outcome.reply
    return web.json_response(answer, status=200)


def error_response(
    http_status: int, code: str, message: str, extra: Mapping[str, Any] | None = None
) -> web.Response:
    body = {"error": {"code": code, "message": message}, **(extra or {})}
    return web.json_response(body, status=http_status)


# -- the control token --------------------------------------------------------------------------


def load_control_token(settings: Settings) -> str:
    """The configured variable's value, else ``<data_dir>/control.token`` (created 0600)."""
    name = settings.gateway.control_token_env
    if name:
        value = os.environ.get(name, "")
        if not value.strip():
            raise ConfigError(
                f"gateway.control_token_env names {name}, but that environment variable is empty or unset"
            )
        return value.strip()
    path = settings.data_dir / "control.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("%s was readable by others (mode %o); restricting it to 0600", path, mode)
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise ConfigError(f"{path} is empty; delete it and a new token is created") from None
        return token
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token


def read_control_token(settings: Settings) -> str | None:
    """For clients: the token without creating anything."""
    name = settings.gateway.control_token_env
    if name:
        return os.environ.get(name) or None
    path = Path(settings.data_dir) / "control.token"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


# -- the application ----------------------------------------------------------------------------


class Api:
    def __init__(
        self,
        settings: Settings,
        gateway: Gateway,
        manager: SessionManager,
        journal: Journal,
        token: str,
        health_extra: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.manager = manager
        self.journal = journal
        self._token = token.encode()
        self._health_extra = health_extra
        self._streams: set[asyncio.Task[Any]] = set()

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors_middleware, self._auth_middleware],
            client_max_size=MAX_BODY_BYTES,
        )
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/api/sessions", self.list_sessions)
        app.router.add_get("/api/sessions/{id}", self.get_session)
        app.router.add_post("/api/sessions/{id}/messages", self.post_message)
        app.router.add_get("/api/sessions/{id}/events", self.events)
        app.on_shutdown.append(self._close_streams)
        return app

    # -- middlewares ----------------------------------------------------------------------

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            response = error_response(exc.status, exc.code, exc.message)
            response.headers.update(exc.headers)
            return response
        except InvalidInput as exc:
            return error_response(400, "invalid_" + exc.field, str(exc))
        except SessionUnavailable as exc:
            return error_response(503, exc.code, str(exc))
        except JournalError as exc:
            log.error("journal error answering %s %s: %s", request.method, request.path, exc)
            return error_response(503, exc.code, f"the journal is unavailable: {exc}")
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(exc.status, _http_code(exc.status), exc.reason)
        except NetclawError as exc:
            return error_response(500, exc.code, str(exc))
        except Exception:
            log.exception("unhandled error answering %s %s", request.method, request.path)
            return error_response(500, "internal", "internal error; see the daemon log")

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api/"):
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer" or not given:
                raise ApiError(401, "unauthorized", "missing 'Authorization: Bearer <token>' header")
            if not hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), self._token):
                raise ApiError(401, "unauthorized", "the control token is wrong")
        return await handler(request)

    # -- handlers -------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        resident = self.manager.resident()
        by_phase: dict[str, int] = {}
        for phase in resident.values():
            by_phase[phase.value] = by_phase.get(phase.value, 0) + 1
        body: dict[str, Any] = {
            "status": "ok",
            "sessions": {"resident": len(resident), "by_phase": by_phase},
        }
        if self._health_extra is not None:
            body.update(self._health_extra())
        return web.json_response(body)

    async def list_sessions(self, request: web.Request) -> web.Response:
        resident = self.manager.resident()
        rows = await self.journal.list_sessions()
        return web.json_response(
            [
                {
                    "id": r.id,
                    "channel": r.channel,
                    "title": r.title,
                    "phase": resident[r.id].value if r.id in resident else "passivated",
                    "turns": r.turns,
                    "last_activity": r.last_activity,
                    "resident": r.id in resident,
                    "pending": r.pending,
                }
                for r in rows
            ]
        )

    async def get_session(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        view = request.query.get("view", "transcript")
        if view not in ("transcript", "context"):
            raise ApiError(400, "invalid_view", f"view must be 'transcript' or 'context', not {view!r}")
        state = await load_state(self.journal, session_id)
        if state.seq == 0:
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        resident = self.manager.resident()
        body = _session_summary(state, resident.get(session_id))
        if view == "context":
            messages = [_message_json(m) for m in build_context(state, self.settings.agent.system_prompt)]
        else:
            messages = [_message_json(m) for m in state.transcript]
            messages += [{**_message_json(m), "pending": True} for m in state.inbox]
        body["view"] = view
        body["messages"] = messages
        return web.json_response(body)

    async def post_message(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        wait = _flag(request.query.get("wait"))
        body = await _json_object(request)
        text = body.get("text")
        if not isinstance(text, str):
            raise ApiError(400, "invalid_text", "'text' is required and must be a string")
        user = body.get("user")
        if user is not None and not isinstance(user, str):
            raise ApiError(400, "invalid_user", "'user' must be a string")
        key = request.headers.get("Idempotency-Key")
        identity = None
        if key is not None:
            key = key.strip()
            if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
                raise ApiError(
                    400,
                    "invalid_idempotency_key",
                    f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable characters",
                )
            identity = f"idem:{key}"
        admission, outcome = await self.gateway.submit(
            Inbound(session_id, text, user=user, identity=identity), wait=wait
        )
        return submission_response(admission, outcome)

    async def events(self, request: web.Request) -> web.StreamResponse:
        session_id = check_session_id(request.match_info["id"])
        try:
            mask = OutputFilter.parse(request.query.get("filter"))
        except ValueError as exc:
            raise ApiError(400, "invalid_filter", str(exc)) from exc
        queue = OutputQueue(asyncio.get_running_loop())
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        sub_id = self.gateway.subscribe(session_id, mask, queue)
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        try:
            while True:
                try:
                    output = await asyncio.wait_for(queue.get(), SSE_HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if output is None:
                    if queue.overflowed:
                        await _sse(
                            response,
                            "error",
                            {
                                "session_id": session_id,
                                "code": "subscriber_overflow",
                                "message": "this stream fell too far behind and was closed; reconnect",
                            },
                        )
                    break
                await _sse(response, output.event, output.data)
        except ConnectionResetError:
            pass  # the client went away; the finally unsubscribes it
        finally:
            queue.close()
            if task is not None:
                self._streams.discard(task)
            with contextlib.suppress(Exception):
                self.gateway.unsubscribe(session_id, sub_id)
        return response

    async def _close_streams(self, app: web.Application) -> None:
        for task in list(self._streams):
            task.cancel()


# -- helpers ------------------------------------------------------------------------------------


async def _sse(response: web.StreamResponse, event: str, data: Mapping[str, Any]) -> None:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


async def _json_object(request: web.Request) -> dict[str, Any]:
    return read_json_object(await request.read())


def read_json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; ApiError 400 naming what is wrong."""
    if not raw.strip():
        raise ApiError(400, "invalid_json", "the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "invalid_json", "the request body is not valid JSON: nested too deeply") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the request body must be a JSON object")
    return body


def _flag(value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() in ("1", "true", "yes", ""):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ApiError(400, "invalid_wait", f"wait must be 1 or 0, not {value!r}")


def _http_code(status: int) -> str:
    return {
        400: "bad_request",
        401: "unauthorized",
        404: "not_found",
        405: "method_not_allowed",
        413: "body_too_large",
    }.get(status, f"http_{status}")


def _session_summary(state: SessionState, phase: Any) -> dict[str, Any]:
    return {
        "id": state.session_id,
        "channel": state.channel,
        "title": state.title,
        "phase": phase.value if phase is not None else "passivated",
        "turns": state.turns,
        "last_activity": state.last_activity,
        "resident": phase is not None,
    }


def _message_json(m: ChatMessage) -> dict[str, Any]:
    """A message as the API shows it: the stored form without internal bookkeeping
    (replay identities, provider round-trip data)."""
    out = m.to_dict()
    out.pop("identity", None)
    out.pop("extra", None)
    return out
