"""The durable reminder store (SQLite): what is scheduled, and when it fires next.

The scheduler asks only for the earliest ``next_fire`` (an index lookup, whatever the
number of reminders) and for what is due; listing and the per-session count serve
people and the model. :class:`ReminderStore` is the interface a PostgreSQL store
implements too.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiosqlite

from netclaw.errors import JournalError
from netclaw.reminders import CatchUp, Schedule


@dataclass(frozen=True, slots=True)
class Reminder:
    id: str
    session_id: str
    text: str
    schedule: Schedule
    next_fire: float | None
    catch_up: CatchUp
    created_by: str
    created_at: float
    name: str | None = None
    deliver: dict[str, str] | None = None
    fired: int = 0

    @property
    def paused(self) -> bool:
        """A paused reminder has no next fire (a one-shot that fired is deleted instead)."""
        return self.next_fire is None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "text": self.text,
            "next_fire": self.next_fire,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "schedule": self.schedule.to_json(),
            "catch_up": self.catch_up,
            "fired": self.fired,
        }
        if self.schedule.cron is not None:
            body["cron"] = self.schedule.cron
        if self.name:
            body["name"] = self.name
        if self.deliver:
            body["deliver"] = self.deliver
        return body


class ReminderStore(Protocol):
    async def add(self, reminder: Reminder) -> None: ...
    async def upsert(self, reminder: Reminder) -> None: ...
    async def get(self, reminder_id: str) -> Reminder | None: ...
    async def listing(self, session_id: str | None = None) -> list[Reminder]: ...
    async def count(self, session_id: str) -> int: ...
    async def delete(self, reminder_id: str) -> bool: ...
    async def delete_where(self, created_by_prefix: str, keep: Sequence[str]) -> int: ...
    async def earliest(self) -> float | None: ...
    async def due(self, now: float, limit: int = 100) -> list[Reminder]: ...
    async def fired(self, reminder_id: str, scheduled: float, next_fire: float | None) -> None: ...
    async def set_next_fire(self, reminder_id: str, next_fire: float | None) -> bool:
        """Pause (None: never due) or resume a reminder; False when there is none."""
        ...

    async def close(self) -> None: ...


_COLUMNS = "id, session_id, text, schedule, next_fire, catch_up, created_by, created_at, name, deliver, fired"


class SqliteReminderStore:
    def __init__(self, path: Path, *, synchronous: str = "full") -> None:
        self.path = path
        self._synchronous = synchronous
        self._conn: aiosqlite.Connection | None = None

    async def open(self) -> SqliteReminderStore:
        try:
            self._conn = await aiosqlite.connect(self.path, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            await self._conn.execute(f"PRAGMA synchronous={self._synchronous.upper()}")
            await self._conn.execute("PRAGMA busy_timeout=5000")
            await self._conn.execute("SELECT 1 FROM reminders LIMIT 0")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the reminder store in {self.path}: {exc}") from exc
        return self

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def add(self, reminder: Reminder) -> None:
        await self._write(
            f"INSERT INTO reminders ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", reminder_row(reminder)
        )

    async def upsert(self, reminder: Reminder) -> None:
        await self._write(
            f"INSERT OR REPLACE INTO reminders ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            reminder_row(reminder),
        )

    async def get(self, reminder_id: str) -> Reminder | None:
        rows = await self._read(f"SELECT {_COLUMNS} FROM reminders WHERE id = ?", (reminder_id,))
        return reminder_from_row(rows[0]) if rows else None

    async def listing(self, session_id: str | None = None) -> list[Reminder]:
        if session_id is None:
            rows = await self._read(
                f"SELECT {_COLUMNS} FROM reminders ORDER BY next_fire IS NULL, next_fire, id"
            )
        else:
            rows = await self._read(
                f"SELECT {_COLUMNS} FROM reminders WHERE session_id = ? ORDER BY next_fire IS NULL, next_fire, id",
                (session_id,),
            )
        return [reminder_from_row(r) for r in rows]

    async def count(self, session_id: str) -> int:
        rows = await self._read("SELECT COUNT(*) FROM reminders WHERE session_id = ?", (session_id,))
        return int(rows[0][0])

    async def delete(self, reminder_id: str) -> bool:
        return await self._write("DELETE FROM reminders WHERE id = ?", (reminder_id,)) > 0

    async def delete_where(self, created_by_prefix: str, keep: Sequence[str]) -> int:
        """Delete reminders created by ``created_by_prefix`` (e.g. ``config:``) not in ``keep``."""
        marks = ",".join("?" * len(keep)) or "''"
        return await self._write(
            f"DELETE FROM reminders WHERE created_by LIKE ? AND id NOT IN ({marks})",
            (created_by_prefix + "%", *keep),
        )

    async def earliest(self) -> float | None:
        rows = await self._read("SELECT MIN(next_fire) FROM reminders WHERE next_fire IS NOT NULL")
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def due(self, now: float, limit: int = 100) -> list[Reminder]:
        rows = await self._read(
            f"SELECT {_COLUMNS} FROM reminders WHERE next_fire IS NOT NULL AND next_fire <= ? "
            "ORDER BY next_fire LIMIT ?",
            (now, limit),
        )
        return [reminder_from_row(r) for r in rows]

    async def fired(self, reminder_id: str, scheduled: float, next_fire: float | None) -> None:
        """The fire scheduled at ``scheduled`` was admitted: move on (a one-shot is done and
        goes). Only if still at that fire, so a concurrent change is not overwritten."""
        if next_fire is None:
            await self._write(
                "DELETE FROM reminders WHERE id = ? AND next_fire = ?", (reminder_id, scheduled)
            )
        else:
            await self._write(
                "UPDATE reminders SET next_fire = ?, fired = fired + 1 WHERE id = ? AND next_fire = ?",
                (next_fire, reminder_id, scheduled),
            )

    async def set_next_fire(self, reminder_id: str, next_fire: float | None) -> bool:
        return (
            await self._write("UPDATE reminders SET next_fire = ? WHERE id = ?", (next_fire, reminder_id)) > 0
        )

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        if self._conn is None:
            raise JournalError("the reminder store is closed")
        try:
            return list(await self._conn.execute_fetchall(sql, params))
        except (sqlite3.Error, ValueError) as exc:
            raise JournalError(f"reading reminders failed: {exc}") from exc

    async def _write(self, sql: str, params: Sequence[Any] = ()) -> int:
        if self._conn is None:
            raise JournalError("the reminder store is closed")
        try:
            cursor = await self._conn.execute(sql, params)
            return cursor.rowcount
        except (sqlite3.Error, ValueError) as exc:
            raise JournalError(f"writing reminders failed: {exc}") from exc


def reminder_row(r: Reminder) -> tuple[Any, ...]:
    """The stored columns, in ``_COLUMNS`` order (either database)."""
    return (
        r.id,
        r.session_id,
        r.text,
        json.dumps(r.schedule.to_json()),
        r.next_fire,
        r.catch_up,
        r.created_by,
        r.created_at,
        r.name,
        json.dumps(r.deliver) if r.deliver else None,
        r.fired,
    )


def reminder_from_row(row: Mapping[str, Any] | sqlite3.Row) -> Reminder:
    """A stored row, by column name (either database)."""
    return Reminder(
        id=row["id"],
        session_id=row["session_id"],
        text=row["text"],
        schedule=Schedule.from_json(json.loads(row["schedule"])),
        next_fire=row["next_fire"],
        catch_up=row["catch_up"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        name=row["name"],
        deliver=json.loads(row["deliver"]) if row["deliver"] else None,
        fired=int(row["fired"]),
    )
