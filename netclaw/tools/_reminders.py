"""The reminder tools: the model schedules, lists and cancels reminders for its own session.

A reminder the model creates belongs to the calling session (and so to its audience);
the scheduler behind :class:`ReminderPort` checks whether that audience may create
reminders at all (public sessions may not, by default) and how many a session may have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from netclaw.errors import InvalidInput, JournalError, ToolError
from netclaw.persistence import Reminder
from netclaw.reminders import iso
from netclaw.tools._registry import Tool, ToolContext


class ReminderPort(Protocol):
    async def add_for_model(self, session_id: str, audience: str, fields: Mapping[str, Any]) -> Reminder: ...

    async def listing(self, session_id: str | None = None) -> list[Reminder]: ...

    async def cancel(self, reminder_id: str, *, session_id: str | None = None) -> bool: ...


_WHEN = {
    "at": {"type": "string", "description": "ISO-8601 time, e.g. 2026-12-01T09:00 (in `timezone`)"},
    "in_s": {"type": ["number", "string"], "description": "from now: seconds, or 10m, 2h, 1d"},
    "every_s": {
        "type": ["number", "string"],
        "description": "repeat: seconds, or 1h, 1d (at least 1 minute)",
    },
    "cron": {"type": "string", "description": "5-field cron, e.g. '0 9 * * 1-5' (in `timezone`)"},
    "timezone": {"type": "string", "description": "IANA timezone, default UTC"},
}


def reminder_tools(port: ReminderPort) -> list[Tool]:
    async def schedule(args: Mapping[str, Any], ctx: ToolContext) -> str:
        try:
            reminder = await port.add_for_model(ctx.session_id, ctx.audience, args)
        except InvalidInput as exc:
            raise ToolError(f"{exc} (field: {exc.field})") from exc
        except JournalError as exc:
            raise ToolError(f"reminders are unavailable right now: {exc}") from exc
        return f"scheduled {reminder.id}: {reminder.schedule.describe()}, next {_when(reminder.next_fire)}"

    async def listing(args: Mapping[str, Any], ctx: ToolContext) -> str:
        found = await port.listing(ctx.session_id)
        if not found:
            return "no reminders in this conversation"
        return "\n".join(
            f"{r.id}: {r.text[:120]!r} — {r.schedule.describe()}, next {_when(r.next_fire)}" for r in found
        )

    async def cancel(args: Mapping[str, Any], ctx: ToolContext) -> str:
        reminder_id = args.get("id")
        if not isinstance(reminder_id, str) or not reminder_id:
            raise ToolError("'id' is required: the reminder's id from list_reminders")
        if not await port.cancel(reminder_id, session_id=ctx.session_id):
            raise ToolError(f"no reminder {reminder_id!r} in this conversation; list_reminders shows them")
        return f"cancelled {reminder_id}"

    return [
        Tool(
            "schedule_reminder",
            "Schedule a reminder for this conversation: at a time, after a delay, repeating, or by cron. "
            "When it is due you receive its text as a message marked as a scheduled reminder.",
            {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "what to do or say then"}, **_WHEN},
                "required": ["text"],
                "additionalProperties": False,
            },
            schedule,
        ),
        Tool(
            "list_reminders",
            "The reminders scheduled in this conversation, with their ids and next times.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            listing,
        ),
        Tool(
            "cancel_reminder",
            "Cancel one of this conversation's reminders by id.",
            {
                "type": "object",
                "properties": {"id": {"type": "string"}},
                "required": ["id"],
                "additionalProperties": False,
            },
            cancel,
        ),
    ]


def _when(t: float | None) -> str:
    if t is None:
        return "never (done)"
    return iso(t).replace("+00:00", "Z")
