"""Reminders on PostgreSQL: the same store as SQLite's (:mod:`netclaw.persistence._reminders`),
for several nodes whose schedulers all look at it: :meth:`PostgresReminderStore.due`
claims what it returns (``FOR UPDATE SKIP LOCKED``), so each fire is made by one node;
a claim its node never settled (it died) expires after ``claim_s``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from netclaw.persistence._reminders import Reminder, reminder_from_row, reminder_row
from netclaw.persistence.postgres._schema import PooledStore

_COLUMNS = "id, session_id, text, schedule, next_fire, catch_up, created_by, created_at, name, deliver, fired"
_VALUES = "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s"


class PostgresReminderStore(PooledStore):
    table = "reminders"
    what = "the reminder store"

    def __init__(self, dsn: str, *, node_id: str = "netclaw", claim_s: float = 30.0) -> None:
        super().__init__(dsn)
        self.node_id = node_id
        self.claim_s = claim_s

    async def open(self) -> PostgresReminderStore:
        await self._open()
        return self

    async def add(self, reminder: Reminder) -> None:
        await self.execute(f"INSERT INTO reminders ({_COLUMNS}) VALUES ({_VALUES})", reminder_row(reminder))

    async def upsert(self, reminder: Reminder) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS.split(", ")[1:])
        await self.execute(
            f"INSERT INTO reminders ({_COLUMNS}) VALUES ({_VALUES}) ON CONFLICT (id) DO UPDATE SET {updates}",
            reminder_row(reminder),
        )

    async def get(self, reminder_id: str) -> Reminder | None:
        rows = await self.fetch(f"SELECT {_COLUMNS} FROM reminders WHERE id = %s", (reminder_id,))
        return _reminder(rows[0]) if rows else None

    async def listing(self, session_id: str | None = None) -> list[Reminder]:
        order = " ORDER BY next_fire IS NULL, next_fire, id"
        if session_id is None:
            rows = await self.fetch(f"SELECT {_COLUMNS} FROM reminders" + order)
        else:
            rows = await self.fetch(
                f"SELECT {_COLUMNS} FROM reminders WHERE session_id = %s" + order, (session_id,)
            )
        return [_reminder(r) for r in rows]

    async def count(self, session_id: str) -> int:
        rows = await self.fetch("SELECT COUNT(*) FROM reminders WHERE session_id = %s", (session_id,))
        return int(rows[0][0])

    async def delete(self, reminder_id: str) -> bool:
        return await self.execute("DELETE FROM reminders WHERE id = %s", (reminder_id,)) > 0

    async def delete_where(self, created_by_prefix: str, keep: Sequence[str]) -> int:
        """Delete reminders created by ``created_by_prefix`` (e.g. ``config:``) not in ``keep``."""
        return await self.execute(
            "DELETE FROM reminders WHERE created_by LIKE %s AND NOT (id = ANY(%s))",
            (created_by_prefix.replace("%", r"\%").replace("_", r"\_") + "%", list(keep)),
        )

    async def set_next_fire(self, reminder_id: str, next_fire: float | None) -> bool:
        return (
            await self.execute(
                "UPDATE reminders SET next_fire = %s, claimed_by = NULL, claimed_until = NULL WHERE id = %s",
                (next_fire, reminder_id),
            )
            > 0
        )

    async def earliest(self) -> float | None:
        # A reminder another node claimed is due again for us only when its claim expires.
        rows = await self.fetch(
            "SELECT MIN(GREATEST(next_fire, COALESCE(claimed_until, next_fire)))"
            " FROM reminders WHERE next_fire IS NOT NULL"
        )
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def due(self, now: float, limit: int = 100) -> list[Reminder]:
        """The due reminders no other node is firing, claimed for this one."""
        rows = await self.fetch(
            f"UPDATE reminders SET claimed_by = %s, claimed_until = %s WHERE id IN ("
            " SELECT id FROM reminders WHERE next_fire IS NOT NULL AND next_fire <= %s"
            " AND (claimed_until IS NULL OR claimed_until <= %s OR claimed_by = %s)"
            " ORDER BY next_fire LIMIT %s FOR UPDATE SKIP LOCKED)"
            f" RETURNING {_COLUMNS}",
            (self.node_id, now + self.claim_s, now, now, self.node_id, limit),
        )
        return sorted((_reminder(r) for r in rows), key=lambda r: r.next_fire or 0.0)

    async def fired(self, reminder_id: str, scheduled: float, next_fire: float | None) -> None:
        """The fire scheduled at ``scheduled`` was admitted: move on (a one-shot is done and
        goes). Only if still at that fire, so a concurrent change is not overwritten."""
        if next_fire is None:
            await self.execute(
                "DELETE FROM reminders WHERE id = %s AND next_fire = %s", (reminder_id, scheduled)
            )
        else:
            await self.execute(
                "UPDATE reminders SET next_fire = %s, fired = fired + 1, claimed_by = NULL,"
                " claimed_until = NULL WHERE id = %s AND next_fire = %s",
                (next_fire, reminder_id, scheduled),
            )


def _reminder(row: Sequence[Any]) -> Reminder:
    return reminder_from_row(dict(zip(_COLUMNS.split(", "), row, strict=True)))
