"""The HTTP server: health, control API and SSE subscriptions (aiohttp, on the I/O loop).

Every handler goes through the gateway, by the roles an operator plays
(:class:`~netclaw.gateway.Operator`: input, control, reads, approvals) and chat commands
(:class:`~netclaw.gateway.Commands`); errors take the shape and the middleware of
:mod:`netclaw.http.web`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from netclaw import outputs as out
from netclaw.attachments import MAX_FILES, IncomingFile
from netclaw.cluster import SUBMIT_PATH, forwarded
from netclaw.commands import DEFAULT_MODEL, Command, parse_command
from netclaw.errors import ApiError, NotPermitted
from netclaw.gateway import (
    MAX_NAME_CHARS,
    CommandDone,
    Commands,
    Inbound,
    Operator,
    SessionSummary,
    TurnOutcome,
    parse_prompt_or_fail,
)
from netclaw.http.access import Access, Principal, actor, principal
from netclaw.http.cluster import VIEW as SESSION_VIEW
from netclaw.http.cluster import ClusterHttp, alone_routes
from netclaw.http.web import (
    SseStreams,
    errors_middleware,
    flag,
    idempotency_key,
    identity_for,
    parse_since,
    read_body,
    read_json_object,
    retry_after_header,
    scrub_middleware,
    submission_response,
    trace_middleware,
    wait_flag,
)
from netclaw.identifiers import check_label, check_session_id
from netclaw.messages import ChatMessage
from netclaw.persistence import AccessLogic, Memory, MemoryEditRefused
from netclaw.process.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from netclaw.process.metrics import Metrics
from netclaw.reminders import check_catch_up, check_name, check_text
from netclaw.security.roles import may_command, refusal
from netclaw.workers.scheduler import NewReminder, Scheduler

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_048_576
# A message may carry files (base64: 4/3 of their size) up to the attachment limits.
MAX_MESSAGE_BODY_BYTES = 48 * 1_048_576
_MEMORY_ID = re.compile(r"[0-9]{1,18}")
MAX_USER_CHARS = 200


class Api:
    def __init__(
        self,
        operator: Operator,
        commands: Commands,
        token: str,
        health_extra: Callable[[], Mapping[str, Any]] | None = None,
        scheduler: Scheduler | None = None,
        metrics: Metrics | None = None,
        cluster: ClusterHttp | None = None,
        access: AccessLogic | None = None,
    ) -> None:
        self.intake, self.control, self.reads = operator.intake, operator.control, operator.reads
        self.approvals = operator.approvals
        self.commands = commands  # a message that is a chat command
        self.cluster = cluster  # several nodes: the cluster's routes, and forwarding
        self.metrics = metrics
        self.scheduler = scheduler
        reads = self.reads
        # Who may call what: tokens from ``access`` (the tokens and audit store), if kept.
        self.access = Access(access, self.control, token, lambda: reads.settings)
        self._health_extra = health_extra
        self._streams = SseStreams()

    def app(self) -> web.Application:
        middlewares = [scrub_middleware, errors_middleware, trace_middleware, self.access.middleware]
        if self.cluster is not None:  # a session's calls are answered by the node serving it
            middlewares.append(self.cluster.middleware)
        app = web.Application(middlewares=middlewares, client_max_size=MAX_MESSAGE_BODY_BYTES)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_get("/api/sessions", self.list_sessions)
        app.router.add_get("/api/sessions/{id}", self.get_session, name=SESSION_VIEW)
        app.router.add_post("/api/sessions/{id}/messages", self.post_message)
        app.router.add_get("/api/sessions/{id}/events", self.events)
        app.router.add_post("/api/sessions/{id}/cancel", self.cancel)
        app.router.add_post("/api/sessions/{id}/reset", self.reset)
        app.router.add_get("/api/sessions/{id}/model", self.get_model)
        app.router.add_put("/api/sessions/{id}/model", self.put_model)
        app.router.add_delete("/api/sessions/{id}", self.delete_session)
        app.router.add_get("/api/sessions/{id}/approvals", self.list_approvals)
        app.router.add_get("/api/sessions/{id}/children", self.list_children)
        app.router.add_post("/api/sessions/{id}/approvals/{approval_id}", self.decide)
        app.router.add_get("/api/approvals", self.all_approvals)
        app.router.add_get("/api/reminders", self.list_reminders)
        app.router.add_post("/api/sessions/{id}/reminders", self.add_reminder)
        app.router.add_delete("/api/reminders/{id}", self.delete_reminder)
        app.router.add_get("/api/memories", self.list_memories)
        app.router.add_delete("/api/memories/{id}", self.delete_memory)
        app.router.add_patch("/api/memories/{id}", self.edit_memory)
        app.router.add_get("/api/usage", self.usage)
        app.router.add_post(SUBMIT_PATH, self.forwarded_message)
        self.access.routes(app)
        app.router.add_routes(alone_routes() if self.cluster is None else self.cluster.routes())
        app.on_shutdown.append(self._streams.close_all)
        return app

    # -- handlers -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """What ``/healthz`` answers: sessions by phase, channels, MCP servers, the journal,
        and ``degraded`` with the reasons when something enabled is down."""
        resident = self.reads.resident_phases()
        by_phase: dict[str, int] = {}
        for phase in resident.values():
            by_phase[phase] = by_phase.get(phase, 0) + 1
        body: dict[str, Any] = {
            "status": "ok",
            "sessions": {"resident": len(resident), "by_phase": by_phase},
        }
        if self._health_extra is not None:
            body.update(self._health_extra())
        if body.get("cluster", {}).get("state") == "draining":
            # Taking no sessions: a load balancer should send its requests elsewhere.
            body["status"] = "draining"
            return body
        if body.get("problems"):
            # Something enabled is down (a channel, an MCP server): degraded, and why.
            body["status"] = "degraded"
            body["reason"] = "; ".join(body["problems"])
        return body

    async def healthz(self, request: web.Request) -> web.Response:
        body = self.health()
        if body["status"] in ("degraded", "draining"):
            return web.json_response(body, status=503, headers={"Retry-After": retry_after_header()})
        return web.json_response(body)

    async def metrics_text(self, request: web.Request) -> web.Response:
        """Prometheus text format, no auth: counts only, no content."""
        if self.metrics is None:
            raise ApiError(404, "not_found", "this daemon keeps no metrics")
        return web.Response(body=self.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def list_sessions(self, request: web.Request) -> web.Response:
        sessions = await self.reads.list_sessions()
        return web.json_response([_summary_json(s) | {"pending": s.pending} for s in sessions])

    async def get_session(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        view = request.query.get("view", "transcript")
        if view not in ("transcript", "context"):
            raise ApiError(400, "invalid_view", f"view must be 'transcript' or 'context', not {view!r}")
        found = await self.reads.get_session(session_id, context=view == "context")
        if found is None:
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        messages = _with_failures([_message_json(m) for m in found.messages], found.failures)
        messages += [{**_message_json(m), "pending": True} for m in found.queued]
        body = {**_summary_json(found.summary), "view": view, "messages": messages}
        if view == "context":
            body["tools"] = list(found.tools)
        return web.json_response(body)

    async def post_message(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        wait = wait_flag(request)
        key = idempotency_key(request)
        raw = await read_body(request, MAX_MESSAGE_BODY_BYTES)
        if len(raw) > MAX_BODY_BYTES:  # files: decoding megabytes is no work for the I/O loop
            body, files = await asyncio.to_thread(_message_with_files, raw)
            if not files:
                raise ApiError(
                    413,
                    "body_too_large",
                    f"the body is larger than {MAX_BODY_BYTES} bytes (and has no files)",
                )
        else:
            body, files = _message_with_files(raw)
        text = body.get("text", "" if files else None)
        if not isinstance(text, str):
            raise ApiError(400, "invalid_text", "'text' is required and must be a string")
        # Identifiers from outside: one line each, no control characters (they reach the log).
        user = _optional_label(body, "user", MAX_USER_CHARS)
        user_name = _optional_label(body, "user_name", MAX_NAME_CHARS)
        who = principal(request)
        inbound = Inbound(
            session_id,
            text,
            user=user,
            identity=identity_for(key),
            user_name=user_name,
            files=files,
            speaker=who.speaker,
            speaker_role=who.role,
        )
        prompt = parse_prompt_or_fail(text)
        if prompt is not None:  # an MCP prompt: the message, or an answer instead
            submitted = await self.commands.submit_prompt(
                inbound,
                prompt,
                wait=wait,
            )
            if isinstance(submitted, CommandDone):
                return web.json_response(
                    {"session_id": session_id, "command": submitted.command, "notice": submitted.notice}
                )
            return submission_response(*submitted)
        command = parse_command(text) if not files else None
        if command is not None:  # a chat command: answered, never model input
            if not may_command(self.reads.settings, who.role, command.name):
                raise NotPermitted(refusal(who.role, f"/{command.name}"))
            done = await self.commands.command(session_id, command, by=user or actor(request))
            return web.json_response(
                {"session_id": session_id, "command": done.command, "notice": done.notice}
            )
        admission, outcome = await self.intake.submit(inbound, wait=wait)
        return submission_response(admission, outcome)

    async def forwarded_message(self, request: web.Request) -> web.Response:
        """Input another node received for a session this node owns (:mod:`netclaw.cluster`):
        taken here, never forwarded again; answered once durable, as on one node."""
        if not forwarded(request):
            raise ApiError(400, "not_forwarded", f"{SUBMIT_PATH} is for the nodes of a cluster")
        raw = await read_body(request, MAX_MESSAGE_BODY_BYTES)
        body = (
            await asyncio.to_thread(read_json_object, raw)
            if len(raw) > MAX_BODY_BYTES
            else read_json_object(raw)
        )
        inbound = body.get("inbound")
        timeout = body.get("turn_timeout")
        if not isinstance(inbound, dict) or not isinstance(timeout, int | float | None):
            raise ApiError(
                400, "invalid_body", "expected {'inbound': {...}, 'wait': bool, 'turn_timeout': number|null}"
            )
        admission, outcome = await self.intake.submit(
            Inbound.from_json(inbound), wait=bool(body.get("wait")), turn_timeout=timeout, forwarded=True
        )
        return web.json_response(
            {
                "admission": {
                    "session_id": admission.session_id,
                    "message_id": admission.message_id,
                    "duplicate": admission.duplicate,
                },
                "outcome": outcome.to_dict() if outcome is not None else None,
            }
        )

    # -- control ----------------------------------------------------------------------------

    async def _known(self, request: web.Request) -> str:
        session_id = check_session_id(request.match_info["id"])
        if not await self.reads.knows(session_id):
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        return session_id

    async def cancel(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        self._may_command(request, "stop")
        turn = await self.control.cancel(session_id, by=actor(request))
        return web.json_response(
            {"cancelled": True, "turn": turn} if turn is not None else {"cancelled": False}
        )

    async def reset(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        self._may_command(request, "reset")
        await self.control.reset(session_id, by=actor(request))
        return web.json_response({"session_id": session_id})

    async def get_model(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        return web.json_response((await self.reads.model_of(session_id)).to_json())

    async def put_model(self, request: web.Request) -> web.Response:
        """``{"model": NAME}`` chooses the session's model from its next turn on;
        ``{"model": null}`` (or ``"default"``) goes back to models.main. Like ``/model``,
        it needs the ``model`` command in the caller's role."""
        self._may_command(request, "model")
        session_id = await self._known(request)
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        if "model" not in body or not isinstance(body["model"], str | None):
            raise ApiError(400, "invalid_model", 'expected {"model": NAME} (or null: back to models.main)')
        name = body["model"]
        wanted = None if name is None or name.lower() == DEFAULT_MODEL else name
        choice = await self.control.pin_model(session_id, wanted, by=actor(request))
        return web.json_response(choice.to_json())

    async def delete_session(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        memories = flag(request, "memories")
        if not await self.control.delete(session_id, memories=memories, by=actor(request)):
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        return web.Response(status=204)

    def _may_command(self, request: web.Request, command: Command) -> Principal:
        who = principal(request)
        if not may_command(self.reads.settings, who.role, command):
            raise NotPermitted(refusal(who.role, f"/{command}"))
        return who

    async def list_approvals(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        return web.json_response([a.to_json() for a in await self.approvals.approvals(session_id)])

    async def list_children(self, request: web.Request) -> web.Response:
        """The session's sub-agents (``agent:<id>/<n>``), oldest first, with their phase."""
        session_id = await self._known(request)
        phases = self.reads.resident_phases()
        records = await self.reads.children(session_id)
        return web.json_response([r.as_json(phases.get(r.child)) for r in records])

    async def all_approvals(self, request: web.Request) -> web.Response:
        return web.json_response([a.to_json() for a in await self.approvals.all_approvals()])

    async def decide(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        approval_id = request.match_info["approval_id"]
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        decision = body.get("decision")
        if not isinstance(decision, str):
            raise ApiError(400, "invalid_decision", "'decision' is required: approve, deny or always")
        user = check_label("user", body.get("user", actor(request)), max_chars=MAX_USER_CHARS)
        taken = await self.approvals.decide(session_id, approval_id, decision, by=user)
        return web.json_response({"id": approval_id, "decision": taken})

    def _scheduler(self) -> Scheduler:
        if self.scheduler is None:
            raise ApiError(503, "scheduler_unavailable", "reminders are not available in this daemon")
        return self.scheduler

    async def list_reminders(self, request: web.Request) -> web.Response:
        session = request.query.get("session")
        if session is not None:
            check_session_id(session)
        found = await self._scheduler().listing(session)
        return web.json_response([r.to_json() for r in found])

    async def add_reminder(self, request: web.Request) -> web.Response:
        scheduler = self._scheduler()
        session_id = check_session_id(request.match_info["id"])
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        unknown = sorted(
            set(body) - {"text", "at", "in_s", "every_s", "cron", "timezone", "catch_up", "name"}
        )
        if unknown:
            raise ApiError(400, "invalid_field", f"unknown field(s): {', '.join(unknown)}")
        # Every field is checked (each InvalidInput a 400 naming it) before the store is written.
        catch_up = check_catch_up(body.get("catch_up", "latest"))
        name = check_name(body.get("name"))
        text = check_text(body.get("text"))
        schedule = scheduler.schedule_of(body)
        reminder = await scheduler.add(NewReminder(session_id, text, schedule, "api", catch_up, name))
        return web.json_response({"id": reminder.id, "next_fire": reminder.next_fire}, status=201)

    async def delete_reminder(self, request: web.Request) -> web.Response:
        if not await self._scheduler().cancel(request.match_info["id"]):
            raise ApiError(404, "reminder_not_found", f"no reminder {request.match_info['id'][:80]!r}")
        return web.Response(status=204)

    async def list_memories(self, request: web.Request) -> web.Response:
        session = request.query.get("session")
        if session is not None:
            check_session_id(session)
        audience = request.query.get("audience")
        if audience is not None and audience not in ("personal", "team", "public"):
            raise ApiError(400, "invalid_audience", "audience must be personal, team or public")
        found = await self.reads.memories(query=request.query.get("q"), audience=audience, session_id=session)
        return web.json_response([_memory_json(m) for m in found])

    async def delete_memory(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not _MEMORY_ID.fullmatch(raw):  # ASCII digits: "²".isdigit() is True, int("²") fails
            raise ApiError(404, "memory_not_found", f"no memory {raw[:40]!r}")
        if not await self.control.forget(int(raw), by=actor(request)):
            raise ApiError(404, "memory_not_found", f"no memory {raw}")
        return web.Response(status=204)

    async def edit_memory(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not _MEMORY_ID.fullmatch(raw):
            raise ApiError(404, "memory_not_found", f"no memory {raw[:40]!r}")
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        unknown = sorted(set(body) - {"text"})
        if unknown:
            raise ApiError(400, "unknown_field", f"unknown field(s): {', '.join(unknown)[:200]}; only 'text'")
        text = body.get("text")
        if not isinstance(text, str):
            raise ApiError(400, "invalid_text", "'text' is required: the memory's new wording, a string")
        try:
            edited = await self.control.edit_memory(int(raw), text, by=actor(request))
        except MemoryEditRefused as exc:
            status, code = (409, "memory_conflict") if exc.conflict is not None else (400, "invalid_text")
            raise ApiError(status, code, str(exc)) from exc
        if edited is None:
            raise ApiError(404, "memory_not_found", f"no memory {raw}")
        return web.json_response(_memory_json(edited))

    async def usage(self, request: web.Request) -> web.Response:
        by = request.query.get("by", "session")
        if by not in ("session", "day", "model"):
            raise ApiError(400, "invalid_by", f"by must be session, day or model, not {by[:40]!r}")
        since = request.query.get("since")
        rows = await self.reads.usage(by, parse_since(since) if since else None)  # type: ignore[arg-type]
        currency = self.reads.settings.spend.currency
        return web.json_response([{**row.to_json(), "currency": currency} for row in rows])

    async def events(self, request: web.Request) -> web.StreamResponse:
        session_id = check_session_id(request.match_info["id"])
        try:
            mask = out.OutputFilter.parse(request.query.get("filter"))
        except ValueError as exc:
            raise ApiError(400, "invalid_filter", str(exc)) from exc
        return await self._streams.serve(request, session_id, self.reads.subscribe(session_id, mask))


# -- helpers ------------------------------------------------------------------------------------


def _optional_label(body: Mapping[str, Any], field: str, max_chars: int) -> str | None:
    value = body.get(field)
    return None if value is None else check_label(field, value, max_chars=max_chars)


def _summary_json(summary: SessionSummary) -> dict[str, Any]:
    return {
        "id": summary.id,
        "channel": summary.channel,
        "title": summary.title,
        "phase": summary.phase,
        "turns": summary.turns,
        "last_activity": summary.last_activity,
        "resident": summary.resident,
    }


def _with_failures(
    messages: list[dict[str, Any]], failures: Mapping[str, TurnOutcome]
) -> list[dict[str, Any]]:
    """The transcript with an entry where a turn ended without an answer (failed, cancelled,
    timed out), at the end of that turn, so people see what happened. Never model input."""
    if not failures:
        return messages
    shown: list[dict[str, Any]] = []
    open_failure: tuple[dict[str, Any], TurnOutcome] | None = None
    for message in messages:
        if message["role"] == "user" and message.get("kind", "chat") == "chat":
            if open_failure is not None:
                shown.append(_failure_json(*open_failure))
            outcome = failures.get(message["id"])
            open_failure = (message, outcome) if outcome is not None else None
        shown.append(message)
    if open_failure is not None:
        shown.append(_failure_json(*open_failure))
    return shown


def _failure_json(user: dict[str, Any], outcome: TurnOutcome) -> dict[str, Any]:
    error = outcome.error or {}
    code = error.get("code", outcome.status)
    reason = error.get("message", f"the turn {outcome.status}")
    return {
        "id": f"{user['id']}:outcome",
        "role": "system",
        "kind": "turn_outcome",
        "content": f"turn {outcome.turn} {outcome.status}: {reason} ({code})",
        "status": outcome.status,
        "ts": user["ts"],
    }


def _memory_json(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "audience": m.audience,
        "kind": m.kind,
        "text": m.text,
        "source_session": m.session_id,
        "source_turn": m.turn,
        "created_at": m.created,
        "superseded_by": m.superseded_by,  # a changed fact replaced it: kept, no longer recalled
    }


def _message_with_files(raw: bytes) -> tuple[dict[str, Any], list[IncomingFile]]:
    """A message body and the files in its ``files`` list, decoded; ApiError 400 naming the
    first thing wrong."""
    body = read_json_object(raw)
    listed = body.get("files", [])
    if not isinstance(listed, list):
        raise ApiError(400, "invalid_files", "'files' must be a list of {name, mime_type, data_base64}")
    if len(listed) > MAX_FILES:
        raise ApiError(400, "invalid_files", f"at most {MAX_FILES} files per message ({len(listed)} given)")
    files = []
    for i, item in enumerate(listed):
        if not isinstance(item, dict):
            raise ApiError(400, "invalid_files", f"files[{i}] must be an object")
        name, mime, data = (
            item.get("name"),
            item.get("mime_type", "application/octet-stream"),
            item.get("data_base64"),
        )
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "invalid_files", f"files[{i}].name must be a non-empty string")
        if not isinstance(mime, str):
            raise ApiError(400, "invalid_files", f"files[{i}].mime_type must be a string")
        if not isinstance(data, str):
            raise ApiError(400, "invalid_files", f"files[{i}].data_base64 must be a base64 string")
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ApiError(
                400, "invalid_files", f"files[{i}].data_base64 is not valid base64: {exc}"
            ) from exc
        files.append(IncomingFile(name, mime, decoded))
    return body, files


def _message_json(m: ChatMessage) -> dict[str, Any]:
    """A message as the API shows it: the stored form without internal bookkeeping
    (replay identities, provider round-trip data)."""
    data = m.to_dict()
    data.pop("identity", None)
    data.pop("extra", None)
    for file in data.get("files", ()):
        file.pop("text", None)  # the file is named, not repeated
    return data


def webhook_app(routes: list[web.RouteDef]) -> web.Application:
    """The second listener (``gateway.webhook_host``/``webhook_port``): the webhook routes
    alone, with the API's error shape and body limit, and nothing of the control API."""
    app = web.Application(
        middlewares=[scrub_middleware, errors_middleware, trace_middleware], client_max_size=MAX_BODY_BYTES
    )
    app.router.add_routes(routes)
    return app
