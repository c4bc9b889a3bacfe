"""The audit table and named API tokens on PostgreSQL: the queries of
:class:`netclaw.persistence._access.AccessLogic`, on a pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from netclaw.persistence._access import AccessLogic
from netclaw.persistence.postgres._schema import PooledStore


class PostgresAccessStore(PooledStore, AccessLogic):
    table = "api_tokens"
    what = "the audit and token store"
    speaker_sql = (
        "json_build_object('message', json_build_object('id', payload::jsonb->'message'->>'id',"
        " 'speaker', payload::jsonb->'message'->>'speaker',"
        " 'user', payload::jsonb->'message'->>'user'))::text"
    )

    async def open(self) -> PostgresAccessStore:
        await self._open()
        return self

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self.fetch(sql.replace("?", "%s"), params)

    async def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await self.execute(sql.replace("?", "%s"), params)
