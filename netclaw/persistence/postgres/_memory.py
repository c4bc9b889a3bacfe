"""Durable memory on PostgreSQL: full-text search over a generated ``tsvector``
('english': stemmed, like SQLite's porter tokenizer), ranked with ``ts_rank``, fused with
vector similarity exactly as on SQLite (:class:`netclaw.persistence._memory.HybridRecall`:
the vectors are a ``bytea`` column scored on the node, so pgvector is not needed and the
results are the same); the same audience and scope rules, dedup key and limits as
:mod:`netclaw.persistence._memory`.

Other nodes write too: before each recall the node indexes the rows added since it last
looked (one indexed query), and what it fetches is re-checked (a memory deleted or
superseded elsewhere drops out of the index then)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg
import psycopg_pool

from netclaw.errors import JournalError
from netclaw.persistence._embeddings import Embedder, Vectors
from netclaw.persistence._memory import (
    MAX_MEMORY_CHARS,
    EmbeddingStatus,
    HybridRecall,
    Memory,
    NewMemory,
    duplicate_refusal,
    edited_text,
    keep_order,
    log_forgotten,
    normalise,
    search_terms,
    to_blob,
)
from netclaw.persistence._recall import CANDIDATES, WriteDecision, decide_write
from netclaw.persistence.postgres._schema import PooledStore

log = logging.getLogger(__name__)

_COLUMNS = "id, text, kind, session_id, audience, created, turn, scope, superseded_by"
# What a memory is ranked and kept by: when it was last told, confirmed or recalled
# (GREATEST skips NULLs).
_FRESH = "GREATEST(created, confirmed, used)"
_MAX_LIMIT = 100
_LATE_COMMITS = 1000  # ids are taken before commit: look this far back for late ones


def ts_query(text: str, *, stop_words: bool = False, every: bool = False) -> str | None:
    """A ``to_tsquery`` for free user text: its words OR-ed (``every``: AND-ed; letters and
    digits only, so no tsquery syntax survives). None when nothing searchable is left."""
    terms = search_terms(text, stop_words=stop_words)
    return (" & " if every else " | ").join(terms) if terms else None


class PostgresMemoryStore(PooledStore):
    table = "memories"
    what = "the memory store"

    def __init__(
        self,
        dsn: str,
        size: int = 2,
        *,
        embedder: Embedder | None = None,
        max_per_audience: int | None = None,
    ) -> None:
        super().__init__(dsn, size)
        self._recall = HybridRecall(embedder)
        self._cap = max_per_audience
        self._seen = 0  # the newest id this node has looked at for the index

    async def open(self) -> PostgresMemoryStore:
        await self._open()
        if self._recall.embedder is not None:
            await self._catch_up(0)
        self._recall.start_backfill(self._texts, self._save_vectors)
        return self

    async def _catch_up(self, after: int) -> None:
        """Index the live rows after id ``after`` this node has not seen: their ids first
        (cheap), then the vectors of the new ones only."""
        if after == 0:
            rows = await self.fetch(
                f"SELECT id, audience, scope, vector, vector_model, {_FRESH} FROM memories"
                " WHERE superseded_by IS NULL ORDER BY id"
            )
        else:
            ids = [
                int(r[0])
                for r in await self.fetch(
                    "SELECT id FROM memories WHERE id > %s AND superseded_by IS NULL", (after,)
                )
            ]
            new = [i for i in ids if not self._recall.known(i)]
            if not new:
                return
            rows = await self.fetch(
                f"SELECT id, audience, scope, vector, vector_model, {_FRESH} FROM memories"
                " WHERE id = ANY(%s) ORDER BY id",
                (new,),
            )
        self._recall.load(rows)
        if rows:
            self._seen = max(self._seen, int(rows[-1][0]))
        self._recall.start_backfill(self._texts, self._save_vectors)  # rows another node left without

    async def _texts(self, ids: list[int]) -> list[tuple[int, str, str, str | None, float]]:
        rows = await self.fetch(
            f"SELECT id, text, audience, scope, {_FRESH} FROM memories"
            " WHERE id = ANY(%s) AND superseded_by IS NULL",
            (ids,),
        )
        return [(int(r[0]), str(r[1]), str(r[2]), r[3], float(r[4])) for r in rows]

    async def _save_vectors(self, rows: list[tuple[bytes, str, int]]) -> None:
        async with self._transaction() as conn, conn.cursor() as cursor:
            await cursor.executemany("UPDATE memories SET vector = %s, vector_model = %s WHERE id = %s", rows)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> Any:
        if self._pool is None:
            raise JournalError(f"{self.what} is closed")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                yield conn
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise JournalError(f"{self.what} failed: {exc}") from exc

    async def add(
        self,
        items: Sequence[NewMemory],
        *,
        session_id: str,
        audience: str,
        turn: int | None = None,
        scope: str | None = None,
    ) -> list[Memory]:
        cleaned: list[NewMemory] = []
        for item in items:
            text = item.text.strip()[:MAX_MEMORY_CHARS].rstrip()
            if text:
                cleaned.append(NewMemory(text, item.kind, item.replaces))
        if not cleaned:
            return []
        return await asyncio.shield(self._add(cleaned, session_id, audience, turn, scope))

    async def _add(
        self, items: list[NewMemory], session_id: str, audience: str, turn: int | None, scope: str | None
    ) -> list[Memory]:
        vectors = await self._recall.embed([i.text for i in items])
        if vectors is not None:
            await self._catch_up(max(0, self._seen - _LATE_COMMITS))
        stored: list[tuple[Memory, Vectors | None]] = []
        forgotten: list[int] = []
        async with self._transaction() as conn:
            # One writer per audience at a time across the cluster: the look-before-add is
            # then a decision about what is really there.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('netclaw.memories:' || %s))", (audience,)
            )
            for n, item in enumerate(items):
                vector = vectors[n] if vectors is not None else None
                memory = await self._add_one(conn, item, vector, session_id, audience, turn, scope, stored)
                if memory is not None:
                    stored.append((memory, vector))
            if stored and self._cap is not None:
                forgotten = await self._forget_over_cap(conn, audience, self._cap)
        for memory, vector in stored:  # committed: now the index may have them
            self._recall.added(memory.id, audience, scope, vector, memory.created)
            if memory.replaces is not None:
                self._recall.dropped([memory.replaces])
        if forgotten:
            self._recall.dropped(forgotten)
            log_forgotten(audience, self._cap, forgotten)
        return [memory for memory, _ in stored if memory.id not in forgotten]

    async def _forget_over_cap(
        self, conn: psycopg.AsyncConnection[Any], audience: str, cap: int
    ) -> list[int]:
        """Delete the audience's live memories beyond ``cap``, least recently told,
        confirmed or recalled first (inside the add's transaction, under its lock)."""
        cursor = await conn.execute(
            "SELECT COUNT(*) FROM memories WHERE audience = %s AND superseded_by IS NULL", (audience,)
        )
        (count,) = await cursor.fetchone() or (0,)
        if count <= cap:
            return []
        cursor = await conn.execute(
            "DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE audience = %s AND"
            f" superseded_by IS NULL ORDER BY {_FRESH}, id LIMIT %s) RETURNING id",
            (audience, count - cap),
        )
        return [int(r[0]) for r in await cursor.fetchall()]

    async def _add_one(
        self,
        conn: psycopg.AsyncConnection[Any],
        item: NewMemory,
        vector: Vectors | None,
        session_id: str,
        audience: str,
        turn: int | None,
        scope: str | None,
        earlier: list[tuple[Memory, Vectors | None]],
    ) -> Memory | None:
        now, norm = time.time(), normalise(item.text)
        cursor = await conn.execute(
            "SELECT id, superseded_by FROM memories WHERE audience = %s AND norm = %s", (audience, norm)
        )
        same = await cursor.fetchall()
        if same and same[0][1] is None:
            await conn.execute("UPDATE memories SET confirmed = %s WHERE id = %s", (now, same[0][0]))
            self._recall.confirmed(same[0][0], now)
            return None
        decision = WriteDecision("add")
        near = [n for n in await self._recall.neighbours(vector, audience) if not same or n[0] != same[0][0]]
        # This batch's own rows are not in the index until it commits: compare with them too.
        if vector is not None:
            near += [(m.id, float(v @ vector)) for m, v in earlier if v is not None]
            near.sort(key=lambda hit: -hit[1])
        if near:
            cursor = await conn.execute(
                "SELECT id, text FROM memories WHERE id = ANY(%s) AND superseded_by IS NULL",
                ([i for i, _ in near],),
            )
            texts = {int(r[0]): str(r[1]) for r in await cursor.fetchall()}
            decision = decide_write(item.text, [(i, texts[i], c) for i, c in near if i in texts])
        if (
            item.replaces is not None
            and decision.action != "duplicate"
            and (not same or same[0][0] != item.replaces)
        ):
            cursor = await conn.execute(
                "SELECT id FROM memories WHERE id = %s AND audience = %s AND superseded_by IS NULL",
                (item.replaces, audience),
            )
            if await cursor.fetchone() is not None:  # only a live memory of this audience
                decision = WriteDecision("supersede", item.replaces)
        if decision.action == "duplicate":
            await conn.execute("UPDATE memories SET confirmed = %s WHERE id = %s", (now, decision.existing))
            if decision.existing is not None:
                self._recall.confirmed(decision.existing, now)
            return None
        blob = to_blob(vector) if vector is not None else None
        model = self._recall.model if vector is not None else None
        if same:
            cursor = await conn.execute(
                "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, kind = %s, session_id = %s,"
                " created = %s, turn = %s, scope = %s, vector = %s, vector_model = %s, confirmed = NULL"
                f" WHERE id = %s RETURNING {_COLUMNS}",
                (item.kind, session_id, now, turn, scope, blob, model, same[0][0]),
            )
        else:
            cursor = await conn.execute(
                "INSERT INTO memories (text, kind, session_id, audience, created, norm, turn, scope, vector,"
                " vector_model) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT (audience, norm) DO NOTHING RETURNING {_COLUMNS}",
                (item.text, item.kind, session_id, audience, now, norm, turn, scope, blob, model),
            )
        row = await cursor.fetchone()
        if row is None:
            return None  # another node stored the same words meanwhile
        memory = _memory(row)
        if decision.action == "supersede" and decision.existing is not None:
            await conn.execute(
                "UPDATE memories SET superseded_by = %s, superseded_at = %s WHERE id = %s",
                (memory.id, now, decision.existing),
            )
            memory = replace(memory, replaces=decision.existing)
        return memory

    def may_have(self, audience: str) -> bool:
        return True  # other nodes write too: only a search can tell

    def embedding_status(self) -> EmbeddingStatus:
        return self._recall.status()

    async def search(
        self,
        query: str,
        *,
        audience: str | None = None,
        scope: str | None = None,
        limit: int = 5,
        used: bool = False,
    ) -> list[Memory]:
        if limit < 1:
            return []
        found = await self._hybrid(query, audience, scope, None, min(limit, _MAX_LIMIT), stop_words=False)
        if used and found:
            await self._recall.record_use([m.id for m in found], self._save_used)
        return found

    async def _save_used(self, when: float, ids: list[int]) -> None:
        await self.execute("UPDATE memories SET used = GREATEST(used, %s) WHERE id = ANY(%s)", (when, ids))

    async def _hybrid(
        self,
        query: str,
        audience: str | None,
        scope: str | None,
        session_id: str | None,
        limit: int,
        *,
        stop_words: bool,
    ) -> list[Memory]:
        if self._recall.embedder is not None:
            await self._catch_up(max(0, self._seen - _LATE_COMMITS))
        k = max(CANDIDATES, limit)
        (keyword, complete), (vector, similar) = await asyncio.gather(
            self._keyword_ids(query, stop_words, audience, scope, k),
            self._recall.similar(query, audience, scope, k),
        )
        ids = self._recall.rank(vector, keyword, similar, limit, complete)
        if not ids:
            return []
        where, params = _filters(audience=audience, session_id=session_id)
        rows = await self.fetch(
            f"SELECT {_COLUMNS} FROM memories WHERE id = ANY(%s) AND superseded_by IS NULL"
            + "".join(f" AND {w}" for w in where),
            [ids, *params],
        )
        found = keep_order(ids, (_memory(r) for r in rows))
        if session_id is None:  # gone elsewhere (deleted, superseded): out of this node's index too
            self._recall.dropped(set(ids) - {m.id for m in found})
        return found

    async def _keyword_ids(
        self, query: str, stop_words: bool, audience: str | None, scope: str | None, k: int
    ) -> tuple[list[int], set[int]]:
        """The ``k`` best keyword hits, and those of them with every word of the query."""
        match = ts_query(query, stop_words=stop_words)
        every = ts_query(query, stop_words=stop_words, every=True)
        if match is None or every is None:
            return [], set()
        where, params = _filters(audience=audience, session_id=None)
        if scope is not None:
            where.append("(scope = %s OR scope IS NULL)")
            params.append(scope)
        rows = await self.fetch(
            "SELECT id, search @@ to_tsquery('english', %s) FROM memories, to_tsquery('english', %s) AS q"
            " WHERE search @@ q AND superseded_by IS NULL"
            + "".join(f" AND {w}" for w in where)
            + " ORDER BY ts_rank(search, q) DESC, id DESC LIMIT %s",
            [every, match, *params, k],
        )
        return [int(r[0]) for r in rows], {int(r[0]) for r in rows if r[1]}

    async def listing(
        self,
        *,
        query: str | None = None,
        audience: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        limit = max(1, min(limit, 1000))
        if query is not None and query.strip():
            return await self._hybrid(query, audience, None, session_id, limit, stop_words=True)
        where, params = _filters(audience=audience, session_id=session_id)
        sql = f"SELECT {_COLUMNS} FROM memories" + (f" WHERE {' AND '.join(where)}" if where else "")
        rows = await self.fetch(sql + " ORDER BY created DESC, id DESC LIMIT %s", [*params, limit])
        return [_memory(r) for r in rows]

    async def edit(self, memory_id: int, text: str) -> Memory | None:
        text = edited_text(text)
        vectors = await self._recall.embed([text])
        vector = vectors[0] if vectors is not None else None
        now, norm = time.time(), normalise(text)
        async with self._transaction() as conn:
            cursor = await conn.execute("SELECT audience FROM memories WHERE id = %s", (memory_id,))
            found = await cursor.fetchone()
            if found is None:
                return None
            # The same lock as a write to the audience: the clash check is about what is there.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('netclaw.memories:' || %s))", (found[0],)
            )
            cursor = await conn.execute(
                "SELECT id FROM memories WHERE audience = %s AND norm = %s AND id != %s",
                (found[0], norm, memory_id),
            )
            clash = await cursor.fetchone()
            if clash is not None:
                raise duplicate_refusal(int(clash[0]))
            cursor = await conn.execute(
                "UPDATE memories SET text = %s, norm = %s, vector = %s, vector_model = %s, confirmed = %s"
                f" WHERE id = %s RETURNING {_COLUMNS}",
                (
                    text,
                    norm,
                    to_blob(vector) if vector is not None else None,
                    self._recall.model if vector is not None else None,
                    now,
                    memory_id,
                ),
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        memory = _memory(row)
        if memory.superseded_by is None:
            self._recall.added(memory.id, memory.audience, memory.scope, vector, now)
        return memory

    async def delete(self, memory_id: int) -> bool:
        self._recall.dropped([memory_id])
        return await self.execute("DELETE FROM memories WHERE id = %s", (memory_id,)) > 0

    async def delete_session(self, session_id: str) -> int:
        rows = await self.fetch("DELETE FROM memories WHERE session_id = %s RETURNING id", (session_id,))
        self._recall.dropped(int(r[0]) for r in rows)
        return len(rows)

    async def count(self, audience: str | None = None) -> int:
        if audience is None:
            rows = await self.fetch("SELECT COUNT(*) FROM memories")
        else:
            rows = await self.fetch("SELECT COUNT(*) FROM memories WHERE audience = %s", (audience,))
        return int(rows[0][0])

    async def close(self) -> None:
        await self._recall.close()
        await super().close()


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
        superseded_by=int(r[8]) if r[8] is not None else None,
    )
