"""Webhook deliveries on PostgreSQL: the same rules as :mod:`netclaw.persistence._deliveries`
(one session per route and Idempotency-Key, the body it came with, signatures accepted
once), atomic across nodes: two retries of one delivery that reach two nodes agree."""

from __future__ import annotations

import time

from netclaw.errors import IdempotencyKeyReused
from netclaw.persistence._deliveries import PRUNE_EVERY_S, RETENTION_S
from netclaw.persistence.postgres._schema import PooledStore


class PostgresDeliveryLog(PooledStore):
    table = "webhook_deliveries"
    what = "the webhook delivery log"

    def __init__(self, dsn: str, size: int = 2) -> None:
        super().__init__(dsn, size)
        self._pruned_at = 0.0

    async def open(self) -> PostgresDeliveryLog:
        await self._open()
        return self

    async def session_for(self, route: str, key: str, new_session_id: str, body_sha256: str) -> str:
        now = time.time()
        # Two statements, not one: the SELECT takes a fresh snapshot, so it sees the row of
        # a concurrent first delivery that made our INSERT a no-op.
        await self.execute(
            "INSERT INTO webhook_deliveries (route, key, session_id, created, body_sha256)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (route, key) DO UPDATE SET session_id = excluded.session_id,"
            " created = excluded.created, body_sha256 = excluded.body_sha256"
            " WHERE webhook_deliveries.created < %s",
            (route, key, new_session_id, now, body_sha256, now - RETENTION_S),
        )
        rows = await self.fetch(
            "SELECT session_id, body_sha256 FROM webhook_deliveries WHERE route = %s AND key = %s",
            (route, key),
        )
        await self._prune(now)
        if not rows:
            return new_session_id
        session_id, stored_sha = rows[0]
        if stored_sha is not None and stored_sha != body_sha256:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {key[:60]!r} was already used on route {route!r} with a different body"
            )
        return str(session_id)

    async def first_key_of(self, route: str, signature: str, key: str, expires: float) -> str:
        await self.execute(
            "INSERT INTO webhook_signatures (route, signature, key, expires) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (route, signature) DO NOTHING",
            (route, signature, key, expires),
        )
        rows = await self.fetch(
            "SELECT key FROM webhook_signatures WHERE route = %s AND signature = %s", (route, signature)
        )
        return str(rows[0][0]) if rows else key

    async def _prune(self, now: float) -> None:
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        await self.execute("DELETE FROM webhook_deliveries WHERE created < %s", (now - RETENTION_S,))
        await self.execute("DELETE FROM webhook_signatures WHERE expires < %s", (now,))
