"""Webhook deliveries, durably: which session a delivery went to (by route and
Idempotency-Key, with the body it came with), and which signed requests were already
accepted (so a captured request replayed within its timestamp window starts nothing new).

Idempotency keys are remembered for ``RETENTION_S`` (7 days), signatures until their
timestamp window closes; both are pruned as new deliveries arrive."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Protocol

import aiosqlite

from netclaw.errors import IdempotencyKeyReused, JournalError

RETENTION_S = 7 * 24 * 3600.0  # the same window as sessions' replay identities
PRUNE_EVERY_S = 600.0


class DeliveryLog(Protocol):
    """Webhook deliveries as the webhook channel needs them (SQLite here; PostgreSQL in
    :mod:`netclaw.persistence.postgres`)."""

    async def session_for(self, route: str, key: str, new_session_id: str, body_sha256: str) -> str: ...

    async def first_key_of(self, route: str, signature: str, key: str, expires: float) -> str: ...

    async def close(self) -> None: ...


class SqliteDeliveryLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: aiosqlite.Connection | None = None
        self._pruned_at = 0.0

    async def open(self) -> SqliteDeliveryLog:
        try:
            self._conn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._conn.execute("PRAGMA busy_timeout=5000")
            await self._conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the webhook delivery log in {self.path}: {exc}") from exc
        return self

    async def session_for(self, route: str, key: str, new_session_id: str, body_sha256: str) -> str:
        """The session of the first delivery with this key, recording ``new_session_id`` if
        this is the first. Atomic, so two concurrent retries agree. A key that came with
        another body is refused (IdempotencyKeyReused: a 409)."""
        conn = self._require()
        now = time.time()
        try:
            await conn.execute(
                "INSERT INTO webhook_deliveries (route, key, session_id, created, body_sha256) VALUES (?,?,?,?,?)"
                " ON CONFLICT(route, key) DO UPDATE SET session_id=excluded.session_id,"
                " created=excluded.created, body_sha256=excluded.body_sha256"
                " WHERE webhook_deliveries.created < ?",
                (route, key, new_session_id, now, body_sha256, now - RETENTION_S),
            )
            # Read whole (a cursor stepped once keeps its read transaction open; another
            # request's write on this connection would then meet a stale snapshot: "locked").
            rows = await conn.execute_fetchall(
                "SELECT session_id, body_sha256 FROM webhook_deliveries WHERE route = ? AND key = ?",
                (route, key),
            )
            row = next(iter(rows), None)
            await self._prune(now)
        except sqlite3.Error as exc:
            raise JournalError(f"webhook delivery log failed: {exc}") from exc
        if row is None:
            return new_session_id
        if row[1] is not None and row[1] != body_sha256:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {key[:60]!r} was already used on route {route!r} with a different body"
            )
        return str(row[0])

    async def first_key_of(self, route: str, signature: str, key: str, expires: float) -> str:
        """The idempotency key of the first delivery that carried this signature (``key``
        when this is the first): a replayed signed request is the same delivery."""
        conn = self._require()
        try:
            await conn.execute(
                "INSERT OR IGNORE INTO webhook_signatures (route, signature, key, expires) VALUES (?,?,?,?)",
                (route, signature, key, expires),
            )
            rows = await conn.execute_fetchall(
                "SELECT key FROM webhook_signatures WHERE route = ? AND signature = ?", (route, signature)
            )
            row = next(iter(rows), None)
        except sqlite3.Error as exc:
            raise JournalError(f"webhook delivery log failed: {exc}") from exc
        return str(row[0]) if row else key

    async def _prune(self, now: float) -> None:
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        conn = self._require()
        await conn.execute("DELETE FROM webhook_deliveries WHERE created < ?", (now - RETENTION_S,))
        await conn.execute("DELETE FROM webhook_signatures WHERE expires < ?", (now,))

    def _require(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise JournalError("the webhook delivery log is closed")
        return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
