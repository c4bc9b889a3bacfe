"""The sessions page and one session, live: transcript, context view, approvals with
buttons, controls (stop, reset, compact), a message box, its reminders.

Live updates: the page's script follows ``/ui/sessions/{id}/events``, the session's
outputs as SSE (the same stream the API serves, behind the login cookie), and asks for
server-rendered fragments (transcript, approvals, status) when something was recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import replace
from typing import Any

from aiohttp import web

from netclaw import outputs as out
from netclaw.errors import ApiError, NetclawError, SessionUnavailable
from netclaw.gateway import (
    Inbound,
    PendingApproval,
    SessionSummary,
    SessionView,
    StatusReport,
    TurnOutcome,
    check_session_id,
)
from netclaw.http.web import sse_event
from netclaw.lineage import ChildRecord, child_id
from netclaw.ui._pages import all_approvals_fragment
from netclaw.ui._room import PREFIX, Room
from netclaw.ui._timeline import timelines
from netclaw.ui._views import (
    PER_PAGE,
    PHASES,
    Boundary,
    Entry,
    Listed,
    Page,
    context_lines,
    page_window,
    path_id,
    transcript_entries,
)

STATUS_TIMEOUT_S = 2.0  # the sessions page asks resident sessions for model and context
DECIDED_BY = "control room"
MAX_MESSAGE_CHARS = 200_000
TIMELINE_TURNS = 10  # the Timeline view: the latest turns


class SessionPages:
    def __init__(self, room: Room) -> None:
        self.room = room
        self.intake, self.control, self.reads = room.intake, room.control, room.reads
        self.approvals = room.approvals

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/sessions", self.sessions),
            web.get("/sessions/{id}", self.session),
            web.get("/sessions/{id}/transcript", self.transcript),
            web.get("/sessions/{id}/status", self.status_fragment),
            web.get("/sessions/{id}/approvals", self.approvals_fragment),
            web.get("/sessions/{id}/events", self.events),
            web.post("/sessions/{id}/messages", self.send),
            web.post("/sessions/{id}/cancel", self.cancel),
            web.post("/sessions/{id}/reset", self.reset),
            web.post("/sessions/{id}/compact", self.compact),
            web.post("/sessions/{id}/model", self.choose_model),
            web.post("/sessions/{id}/approvals/{approval_id}", self.decide),
        ]

    # -- the list -------------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "")[:200]
        channel = request.query.get("channel", "")[:50]
        phase = request.query.get("phase", "")
        if phase and phase not in PHASES:
            raise ApiError(400, "invalid_phase", f"phase must be one of {', '.join(PHASES)}")
        try:
            number = int(request.query.get("page", "1"))
        except ValueError:
            number = 1
        number = max(number, 1)
        found = await self.reads.find_sessions(
            text=q.strip(), channel=channel, phase=phase, offset=(number - 1) * PER_PAGE, limit=PER_PAGE
        )
        clamped, pages, offset = page_window(found.total, number)
        if clamped != number:  # past the last page: show the last one
            number = clamped
            found = await self.reads.find_sessions(
                text=q.strip(), channel=channel, phase=phase, offset=offset, limit=PER_PAGE
            )
        ids = [s.id for s in found.sessions]
        today = dt.datetime.fromtimestamp(self.room.clock(), dt.UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        spent = {row.key: row.to_json() for row in await self.reads.usage("session", today.timestamp(), ids)}
        priced = any(m.price is not None for m in self.reads.settings.models.named().values())
        page = Page(
            rows=tuple(_listed(s, spent.get(s.id), priced) for s in found.sessions),
            total=found.total,
            page=number,
            pages=pages,
            q=q,
            channel=channel,
            phase=phase,
            channels=tuple(found.channels),
        )
        page = await self._with_status(page)
        return self.room.fragment_or_page(
            request,
            "sessions.html",
            {"session-table": "_sessions_table.html"},
            title="Sessions",
            page=page,
            phases=PHASES,
        )

    async def _with_status(self, page: Page) -> Page:
        """Model and context of the page's resident sessions (a sleeping one is not woken)."""

        async def status(row: Listed) -> Listed:
            if not row.resident:
                return row
            try:
                report = await asyncio.wait_for(self.reads.status(row.id), STATUS_TIMEOUT_S)
            except (TimeoutError, NetclawError):
                return row
            return _with_report(row, report)

        rows = await asyncio.gather(*(status(r) for r in page.rows))
        return replace(page, rows=tuple(rows))

    # -- one session ----------------------------------------------------------------------------

    async def _view(self, session_id: str, *, context: bool = False) -> SessionView:
        found = await self.reads.get_session(session_id, context=context)
        if found is None:
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        return found

    async def session(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        view = request.query.get("view", "transcript")
        if view not in ("transcript", "context", "timeline"):
            raise ApiError(400, "invalid_view", "view must be transcript, context or timeline")
        found = await self._view(session_id, context=view == "context")
        owner = await self.reads.owner_of(session_id) if self.reads.clustered else None
        report = None if owner is not None else await self._status(session_id)
        reminders = await self.room.scheduler.listing(session_id) if self.room.scheduler is not None else []
        context: dict[str, Any] = {
            "title": found.summary.title or session_id,
            "session": found.summary,
            "report": report,
            "owner": owner,
            "view": view,
            "reminders": reminders,
            "approvals": await self._approvals(session_id),
            "models": list(self.reads.settings.models.named()),
            "children": await self._children(session_id) if report is not None else [],
        }
        if view == "context":
            context["lines"] = context_lines(found.messages)
        elif view == "timeline":
            records = await self.reads.turn_records(session_id)
            context["timelines"] = timelines(records, TIMELINE_TURNS, now=self.room.clock())
        else:
            context["entries"] = self._entries(found)
        return self.room.render(request, "session.html", **context)

    def _entries(self, found: SessionView) -> list[Entry]:
        failures = {message_id: _failure_text(outcome) for message_id, outcome in found.failures.items()}
        boundary = Boundary(found.kept_from, found.compactions, found.trimmed, found.summarized, found.resets)
        return transcript_entries(found.messages, failures=failures, boundary=boundary, queued=found.queued)

    async def _status(self, session_id: str) -> StatusReport | None:
        try:
            return await asyncio.wait_for(self.reads.status(session_id), STATUS_TIMEOUT_S * 5)
        except (TimeoutError, NetclawError):
            return None

    async def _children(self, session_id: str) -> list[tuple[str, ChildRecord]]:
        """The session's sub-agents (id, record), oldest first."""
        try:
            records = await asyncio.wait_for(self.reads.children(session_id), STATUS_TIMEOUT_S * 5)
        except (TimeoutError, NetclawError):
            return []
        return [(child_id(r.task.parent, r.task.n), r) for r in records]

    async def _approvals(self, session_id: str) -> list[PendingApproval]:
        with contextlib.suppress(SessionUnavailable):
            return await self.approvals.approvals(session_id)
        return []

    async def transcript(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        found = await self._view(session_id)
        return self.room.render(request, "_transcript.html", entries=self._entries(found))

    async def status_fragment(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        found = await self._view(session_id)
        return self.room.render(
            request, "_status.html", session=found.summary, report=await self._status(session_id)
        )

    async def approvals_fragment(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        return self.room.render(
            request, "_approvals.html", approvals=await self._approvals(session_id), back=_page_of(session_id)
        )

    async def events(self, request: web.Request) -> web.StreamResponse:
        session_id = check_session_id(request.match_info["id"])
        if not await self.reads.knows(session_id):
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        scrubber = await self.room.scrubber()

        def encode(output: out.Output) -> bytes:
            return scrubber.scrub(sse_event(output).decode()).encode()

        subscription = self.reads.subscribe(session_id, out.OutputFilter.ALL)
        return await self.room.streams.serve(request, session_id, subscription, encode)

    # -- acting on it ---------------------------------------------------------------------------

    async def _form(self, request: web.Request) -> dict[str, str]:
        form = await request.post()
        return {k: v for k, v in form.items() if isinstance(v, str)}

    async def send(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        text = (await self._form(request)).get("text", "")
        if not text.strip():
            raise ApiError(400, "invalid_text", "write a message first")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ApiError(400, "invalid_text", f"a message may have at most {MAX_MESSAGE_CHARS} characters")
        await self.intake.submit(Inbound(session_id, text, user="control-room", user_name="operator"))
        return await self.room.after_form(request, _page_of(session_id), lambda: self._note(request, "Sent."))

    async def cancel(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        turn = await self.control.cancel(session_id, by=DECIDED_BY)
        note = f"Stopped turn {turn}." if turn is not None else "Nothing is running."
        return await self.room.after_form(request, _page_of(session_id), lambda: self._note(request, note))

    async def reset(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        await self.control.reset(session_id, by=DECIDED_BY)
        note = "Started afresh: the model no longer sees the earlier conversation (the transcript is kept)."
        return await self.room.after_form(request, _page_of(session_id), lambda: self._note(request, note))

    async def compact(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        note = await self.control.compact(session_id)
        return await self.room.after_form(request, _page_of(session_id), lambda: self._note(request, note))

    async def choose_model(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        name = (await self._form(request)).get("model", "")
        wanted = None if name in ("", "main") else name
        choice = await self.control.pin_model(session_id, wanted, by=DECIDED_BY)
        note = f"From the next turn on: {choice.model} ({choice.model_id})."
        return await self.room.after_form(request, _page_of(session_id), lambda: self._note(request, note))

    async def decide(self, request: web.Request) -> web.Response:
        session_id = await self._known(request)
        approval_id = request.match_info["approval_id"][:100]
        form = await self._form(request)
        decision = form.get("decision", "")
        await self.approvals.decide(session_id, approval_id, decision, by=DECIDED_BY)
        back = form.get("back", "")
        back = back if back in (f"{PREFIX}/approvals", _page_of(session_id)) else _page_of(session_id)
        if back == f"{PREFIX}/approvals":
            return await self.room.after_form(
                request, back, lambda: all_approvals_fragment(self.room, request)
            )
        return await self.room.after_form(request, back, lambda: self.approvals_fragment(request))

    async def _known(self, request: web.Request) -> str:
        session_id = check_session_id(request.match_info["id"])
        if not await self.reads.knows(session_id):
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        return session_id

    async def _note(self, request: web.Request, text: str) -> web.Response:
        return self.room.render(request, "_note.html", note=text)


def _page_of(session_id: str) -> str:
    return f"{PREFIX}/sessions/{path_id(session_id)}"


def _listed(s: SessionSummary, spent: dict[str, Any] | None, priced: bool) -> Listed:
    """A row of the sessions page; money only once prices are configured (else it is 0)."""
    tokens = int(spent["input_tokens"]) + int(spent["output_tokens"]) if spent else 0
    cost = spent.get("cost") if spent and priced else None
    return Listed(
        id=s.id,
        channel=s.channel,
        title=s.title,
        phase=s.phase,
        turns=s.turns,
        last_activity=s.last_activity,
        resident=s.resident,
        pending=s.pending,
        tokens_today=tokens,
        cost_today=float(cost) if isinstance(cost, int | float) else None,
    )


def _with_report(row: Listed, report: StatusReport) -> Listed:
    return replace(
        row,
        model=report.model,
        context_tokens=report.context_tokens,
        context_window=report.context_window,
        phase=report.phase,
    )


def _failure_text(outcome: TurnOutcome) -> str:
    error = outcome.error or {}
    reason = error.get("message", f"the turn {outcome.status}")
    return f"Turn {outcome.turn} {outcome.status}: {reason}"
