"""The pages beside the sessions: approvals across sessions, reminders, memories, usage
and health (with the running config, secrets hidden)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from aiohttp import web

from netclaw.errors import ApiError
from netclaw.gateway import check_session_id
from netclaw.persistence import MemoryEditRefused
from netclaw.ui._charts import usage_view
from netclaw.ui._redact import config_text
from netclaw.ui._room import PREFIX, Room
from netclaw.workers.scheduler import NewReminder, Scheduler

USAGE_DAYS = (7, 14, 30, 90)
WHEN_KINDS = {"in": "in_s", "at": "at", "every": "every_s", "cron": "cron"}
MAX_MEMORIES_SHOWN = 200


async def all_approvals_fragment(room: Room, request: web.Request) -> web.Response:
    return room.render(
        request,
        "_all_approvals.html",
        approvals=await room.approvals.all_approvals(),
        back=f"{PREFIX}/approvals",
    )


class OtherPages:
    def __init__(self, room: Room) -> None:
        self.room = room
        self.reads, self.control = room.reads, room.control

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/approvals", self.approvals),
            web.get("/reminders", self.reminders),
            web.post("/reminders", self.add_reminder),
            web.post("/reminders/{id}/pause", self.pause_reminder),
            web.post("/reminders/{id}/resume", self.resume_reminder),
            web.post("/reminders/{id}/delete", self.delete_reminder),
            web.get("/memories", self.memories),
            web.post("/memories/{id}/delete", self.delete_memory),
            web.post("/memories/{id}/edit", self.edit_memory),
            web.get("/usage", self.usage),
            web.get("/health", self.health),
        ]

    # -- approvals ------------------------------------------------------------------------------

    async def approvals(self, request: web.Request) -> web.Response:
        if request.headers.get("HX-Target") == "all-approvals":
            return await all_approvals_fragment(self.room, request)
        return self.room.render(
            request,
            "approvals.html",
            title="Approvals",
            approvals=await self.room.approvals.all_approvals(),
            back=f"{PREFIX}/approvals",
        )

    # -- reminders ------------------------------------------------------------------------------

    def _scheduler(self) -> Scheduler:
        if self.room.scheduler is None:
            raise ApiError(503, "scheduler_unavailable", "reminders are not available in this daemon")
        return self.room.scheduler

    async def _reminder_context(self, request: web.Request) -> dict[str, Any]:
        session = request.query.get("session", "")
        if session:
            check_session_id(session)
        found = await self._scheduler().listing(session or None)
        return {"title": "Reminders", "reminders": found, "session": session}

    async def reminders(self, request: web.Request) -> web.Response:
        return self.room.fragment_or_page(
            request,
            "reminders.html",
            {"reminder-list": "_reminders_list.html"},
            **await self._reminder_context(request),
            form={},
            message=None,
        )

    async def add_reminder(self, request: web.Request) -> web.Response:
        scheduler = self._scheduler()
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        session_id = check_session_id(form.get("session", "").strip())
        kind = form.get("when_kind", "in")
        if kind not in WHEN_KINDS:
            raise ApiError(400, "invalid_when_kind", f"when must be one of {', '.join(WHEN_KINDS)}")
        value = form.get("when", "").strip()
        if not value:
            raise ApiError(400, "invalid_when", "say when: a duration (10m), a time, a period or a cron line")
        schedule = scheduler.schedule_of({WHEN_KINDS[kind]: value, "timezone": form.get("timezone") or None})
        name = form.get("name", "").strip()[:100] or None
        await scheduler.add(NewReminder(session_id, form.get("text", ""), schedule, "ui", "latest", name))
        return await self.room.after_form(request, f"{PREFIX}/reminders", lambda: self._list(request))

    async def _list(self, request: web.Request) -> web.Response:
        return self.room.render(request, "_reminders_list.html", **await self._reminder_context(request))

    async def pause_reminder(self, request: web.Request) -> web.Response:
        if not await self._scheduler().pause(request.match_info["id"]):
            raise ApiError(404, "reminder_not_found", "no such reminder")
        return await self.room.after_form(request, f"{PREFIX}/reminders", lambda: self._list(request))

    async def resume_reminder(self, request: web.Request) -> web.Response:
        if await self._scheduler().resume(request.match_info["id"]) is None:
            raise ApiError(404, "reminder_not_found", "no such reminder")
        return await self.room.after_form(request, f"{PREFIX}/reminders", lambda: self._list(request))

    async def delete_reminder(self, request: web.Request) -> web.Response:
        if not await self._scheduler().cancel(request.match_info["id"]):
            raise ApiError(404, "reminder_not_found", "no such reminder")
        return await self.room.after_form(request, f"{PREFIX}/reminders", lambda: self._list(request))

    # -- memories -------------------------------------------------------------------------------

    async def _memory_context(self, request: web.Request) -> dict[str, Any]:
        q = request.query.get("q", "").strip()[:200]
        audience = request.query.get("audience", "")
        if audience and audience not in ("personal", "team", "public"):
            raise ApiError(400, "invalid_audience", "audience must be personal, team or public")
        found = await self.reads.memories(query=q or None, audience=audience or None)
        return {
            "title": "Memories",
            "memories": found[:MAX_MEMORIES_SHOWN],
            "more": len(found) > MAX_MEMORIES_SHOWN,
            "q": q,
            "audience": audience,
            "refused": None,  # an edit refused (its message), under the memory refused_id
            "refused_id": None,
        }

    async def memories(self, request: web.Request) -> web.Response:
        return self.room.fragment_or_page(
            request,
            "memories.html",
            {"memory-list": "_memories_list.html"},
            **await self._memory_context(request),
        )

    async def delete_memory(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 18 or not await self.control.forget(int(raw)):
            raise ApiError(404, "memory_not_found", f"no memory {raw[:40]!r}")
        back = f"{PREFIX}/memories"

        async def fragment() -> web.Response:
            return self.room.render(request, "_memories_list.html", **await self._memory_context(request))

        return await self.room.after_form(request, back, fragment)

    async def edit_memory(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
            raise ApiError(404, "memory_not_found", f"no memory {raw[:40]!r}")
        text = (await request.post()).get("text")
        if not isinstance(text, str):
            raise ApiError(400, "invalid_text", "the memory's new text is missing")
        refused: str | None = None
        try:
            if await self.control.edit_memory(int(raw), text) is None:
                raise ApiError(404, "memory_not_found", f"no memory {raw}")
        except MemoryEditRefused as exc:
            if "HX-Request" not in request.headers:  # a plain form: the error page says why
                raise ApiError(
                    409 if exc.conflict is not None else 400, "memory_edit_refused", str(exc)
                ) from exc
            refused = str(exc)  # shown under the memory, its text as it was

        async def fragment() -> web.Response:
            context = {**await self._memory_context(request), "refused": refused, "refused_id": int(raw)}
            return self.room.render(request, "_memories_list.html", **context)

        return await self.room.after_form(request, f"{PREFIX}/memories", fragment)

    # -- usage ----------------------------------------------------------------------------------

    async def usage(self, request: web.Request) -> web.Response:
        try:
            days = int(request.query.get("days", "14"))
        except ValueError:
            days = 14
        days = days if days in USAGE_DAYS else 14
        today = dt.datetime.fromtimestamp(self.room.clock(), dt.UTC).date()
        start = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time(), dt.UTC).timestamp()
        by_day, by_model, by_session = await asyncio.gather(
            self.reads.usage("day", start),
            self.reads.usage("model", start),
            self.reads.usage("session", start),
        )
        view = usage_view(
            [r.to_json() for r in by_day],
            [r.to_json() for r in by_model],
            [r.to_json() for r in by_session],
            today=today,
            days=days,
            priced=any(m.price is not None for m in self.reads.settings.models.named().values()),
            currency=self.reads.settings.spend.currency,
        )
        return self.room.fragment_or_page(
            request,
            "usage.html",
            {"usage-charts": "_usage_charts.html"},
            title="Usage",
            usage=view,
            choices=USAGE_DAYS,
        )

    # -- health ---------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        report = dict(self.room.health()) if self.room.health is not None else {"status": "ok"}
        scheduler = self.room.scheduler
        reminders = await scheduler.listing() if scheduler is not None else []
        upcoming = [r.next_fire for r in reminders if r.next_fire is not None]
        context = {
            "title": "Health",
            "report": report,
            "nodes": await self.reads.cluster_nodes(),
            "node_id": self.room.settings.cluster.node if self.reads.clustered else None,
            "journal_backend": self.room.settings.journal.backend,
            "scheduler": {
                "running": scheduler is not None and scheduler.running,
                "reminders": len(reminders),
                "paused": sum(1 for r in reminders if r.paused),
                "next_fire": min(upcoming) if upcoming else None,
                "fired": scheduler.fired if scheduler is not None else 0,
            },
            "config": config_text(self.room.settings),
        }
        return self.room.fragment_or_page(
            request, "health.html", {"health-body": "_health_body.html"}, **context
        )
