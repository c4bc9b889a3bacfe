"""Durable memory on PostgreSQL: full-text search over a generated ``tsvector``
('english': stemmed, like SQLite's porter tokenizer), ranked with ``ts_rank``; the same
audience and scope rules, dedup key and limits as :mod:`netclaw.persistence._memory`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from netclaw.persistence._memory import MAX_MEMORY_CHARS, Memory, NewMemory, normalise, search_terms
from netclaw.persistence.postgres._schema import PooledStore

_COLUMNS = "id, text, kind, session_id, audience, created, turn, scope"
_MAX_LIMIT = 100


def ts_query(text: str, *, stop_words: bool = False) -> str | None:
    """A ``to_tsquery`` for free user text: its words OR-ed (letters and digits only, so no
    tsquery syntax survives). None when nothing searchable is left."""
    terms = search_terms(text, stop_words=stop_words)
    return " | ".join(terms) if terms else None


class PostgresMemoryStore(PooledStore):
    table = "memories"
    what = "the memory store"

    async def open(self) -> PostgresMemoryStore:
        await self._open()
        return self

    async def add(
        self,
        items: Sequence[NewMemory],
        *,
        session_id: str,
        audience: str,
        turn: int | None = None,
        scope: str | None = None,
    ) -> list[Memory]:
        now = time.time()
        values: list[Any] = []
        rows = 0
        for item in items:
            text = item.text.strip()[:MAX_MEMORY_CHARS].rstrip()
            if text:
                values += [text, item.kind, session_id, audience, now, normalise(text), turn, scope]
                rows += 1
        if not rows:
            return []
        # One statement: atomic; DO NOTHING skips duplicates (within the batch too).
        found = await self.fetch(
            "INSERT INTO memories (text, kind, session_id, audience, created, norm, turn, scope) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * rows)
            + f" ON CONFLICT (audience, norm) DO NOTHING RETURNING {_COLUMNS}",
            values,
        )
        return sorted((_memory(r) for r in found), key=lambda m: m.id)

    def may_have(self, audience: str) -> bool:
        return True  # other nodes write too: only a search can tell

    async def search(
        self, query: str, *, audience: str | None = None, scope: str | None = None, limit: int = 5
    ) -> list[Memory]:
        match = ts_query(query)
        if match is None or limit < 1:
            return []
        where, params = _filters(audience=audience, session_id=None)
        if scope is not None:
            where.append("(scope = %s OR scope IS NULL)")
            params.append(scope)
        return await self._ranked(match, where, params, min(limit, _MAX_LIMIT))

    async def listing(
        self,
        *,
        query: str | None = None,
        audience: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        where, params = _filters(audience=audience, session_id=session_id)
        limit = max(1, min(limit, 1000))
        if query is not None and query.strip():
            match = ts_query(query, stop_words=True)  # a person's search: every word they typed
            return [] if match is None else await self._ranked(match, where, params, limit)
        sql = f"SELECT {_COLUMNS} FROM memories" + (f" WHERE {' AND '.join(where)}" if where else "")
        rows = await self.fetch(sql + " ORDER BY created DESC, id DESC LIMIT %s", [*params, limit])
        return [_memory(r) for r in rows]

    async def _ranked(self, match: str, where: list[str], params: list[Any], limit: int) -> list[Memory]:
        rows = await self.fetch(
            f"SELECT {_COLUMNS} FROM memories, to_tsquery('english', %s) AS q WHERE search @@ q"
            + "".join(f" AND {w}" for w in where)
            + " ORDER BY ts_rank(search, q) DESC, id DESC LIMIT %s",
            [match, *params, limit],
        )
        return [_memory(r) for r in rows]

    async def delete(self, memory_id: int) -> bool:
        return await self.execute("DELETE FROM memories WHERE id = %s", (memory_id,)) > 0

    async def delete_session(self, session_id: str) -> int:
        return await self.execute("DELETE FROM memories WHERE session_id = %s", (session_id,))

    async def count(self, audience: str | None = None) -> int:
        if audience is None:
            rows = await self.fetch("SELECT COUNT(*) FROM memories")
        else:
            rows = await self.fetch("SELECT COUNT(*) FROM memories WHERE audience = %s", (audience,))
        return int(rows[0][0])


def _filters(*, audience: str | None, session_id: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if audience is not None:
        where.append("audience = %s")
        params.append(audience)
    if session_id is not None:
        where.append("session_id = %s")
        params.append(session_id)
    return where, params


def _memory(r: Sequence[Any]) -> Memory:
    return Memory(
        id=int(r[0]),
        text=str(r[1]),
        kind=str(r[2]),
        session_id=str(r[3]),
        audience=str(r[4]),
        created=float(r[5]),
        turn=int(r[6]) if r[6] is not None else None,
        scope=str(r[7]) if r[7] is not None else None,
    )
