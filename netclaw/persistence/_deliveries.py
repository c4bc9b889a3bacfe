"""Which session a webhook delivery went to, by route and Idempotency-Key (durable)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import aiosqlite

from netclaw.errors import JournalError

RETENTION_S = 7 * 24 * 3600.0  # the same window as sessions' replay identities


class DeliveryLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: aiosqlite.Connection | None = None

    async def open(self) -> DeliveryLog:
        try:
            self._conn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._conn.execute("PRAGMA busy_timeout=5000")
            await self._conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the webhook delivery log in {self.path}: {exc}") from exc
        return self

    async def session_for(self, route: str, key: str, new_session_id: str) -> str:
        """The session of the first delivery with this key, recording ``new_session_id`` if
        this is the first. Atomic, so two concurrent retries agree."""
        if self._conn is None:
            raise JournalError("the webhook delivery log is closed")
        now = time.time()
        try:
            await self._conn.execute(
                "INSERT INTO webhook_deliveries (route, key, session_id, created) VALUES (?,?,?,?)"
                " ON CONFLICT(route, key) DO UPDATE SET session_id=excluded.session_id, created=excluded.created"
                " WHERE webhook_deliveries.created < ?",
                (route, key, new_session_id, now, now - RETENTION_S),
            )
            cursor = await self._conn.execute(
                "SELECT session_id FROM webhook_deliveries WHERE route = ? AND key = ?", (route, key)
            )
            row = await cursor.fetchone()
        except sqlite3.Error as exc:
            raise JournalError(f"webhook delivery log failed: {exc}") from exc
        return str(row[0]) if row else new_session_id

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
