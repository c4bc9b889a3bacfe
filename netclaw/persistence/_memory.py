"""Durable memory: facts worth keeping beyond one conversation, found by words and meaning.

Memories are written by the compaction flush, extraction at passivation and the
``remember`` tool, and recalled into the volatile context before a turn. Each belongs to
one audience (personal / team / public) and is only ever found by searches in that
audience, so what was said in a private session cannot surface in a shared one.

Recall is hybrid (:mod:`netclaw.persistence._recall`): FTS5's BM25 ranking fused with the
similarity of each memory's embedding (:mod:`netclaw.persistence._embeddings`), under a
relevance floor. A write looks before it adds: a near duplicate is not stored twice, and a
changed fact supersedes the memory it changes (kept, no longer recalled).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
import time
import unicodedata
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import numpy as np

from netclaw.errors import JournalError, NetclawError
from netclaw.history import MEMORY_KINDS
from netclaw.persistence._embeddings import Embedder, Vectors
from netclaw.persistence._recall import CANDIDATES, VectorIndex, WriteDecision, decide_write, fuse

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 2000
MAX_QUERY_TERMS = 16
RECALL_HEADER = "Relevant memories (from earlier conversations):"

_MAX_LIMIT = 100

# Common English words that would match nearly every memory and only add noise to bm25.
_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    ok okay please thanks thank hi hello hey yes yeah also us let lets get got
    """.split()
)
# Letters and digits only: the same split as FTS5's unicode61 tokenizer (underscore separates).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Memory:
    id: int
    text: str
    kind: str
    session_id: str  # where it was learnt
    audience: str
    created: float  # unix seconds
    turn: int | None = None  # the turn of that session (None: from before provenance was kept)
    scope: str | None = None  # where it was made ("slack:C123"); None: the whole audience
    superseded_by: int | None = None  # the memory that replaced it (a changed fact); None: live
    replaces: int | None = None  # set by ``add`` only: the memory this new one superseded


@dataclass(frozen=True, slots=True)
class NewMemory:
    text: str
    kind: str = "fact"
    # The memory this one changes, as the model said (the remember tool): superseded if it
    # is a live memory of the same audience; otherwise the write decides as for any other.
    replaces: int | None = None

    def __post_init__(self) -> None:
        # Fail where the bad value is made, not later as a CHECK constraint error.
        if self.kind not in MEMORY_KINDS:
            raise ValueError(f"unknown memory kind {self.kind!r}; expected one of {', '.join(MEMORY_KINDS)}")


class MemoryStore(Protocol):
    async def add(
        self,
        items: Sequence[NewMemory],
        *,
        session_id: str,
        audience: str,
        turn: int | None = None,
        scope: str | None = None,
    ) -> list[Memory]:
        """Store new items; returns only those newly stored (duplicates, near duplicates and
        blanks are skipped; one that changes an existing fact says which in ``replaces``)."""
        ...

    async def search(
        self,
        query: str,
        *,
        audience: str | None = None,
        scope: str | None = None,
        limit: int = 5,
        used: bool = False,
    ) -> list[Memory]:
        """The most relevant live memories for free text, best first (hybrid recall, relevance
        floor); ``audience=None`` searches all. With ``scope``, only memories made there or
        audience-wide ones (scope NULL). ``used``: what is found goes to the model (a turn's
        recall, the search_memory tool), so it counts as recently used: ranked a little
        higher, kept longer under the audience's cap."""
        ...

    def may_have(self, audience: str) -> bool:
        """False only when the store knows it holds no memory of ``audience`` (then a
        session skips recall: no round trip to the loop for nothing). Cheap, any thread."""
        ...

    async def listing(
        self,
        *,
        query: str | None = None,
        audience: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        """Memories for people to look through: matching ``query`` (the same recall, best
        first) or newest first (superseded ones too, marked)."""
        ...

    def embedding_status(self) -> EmbeddingStatus:
        """How far the memories are embedded with the configured model (for /status)."""
        ...

    async def edit(self, memory_id: int, text: str) -> Memory | None:
        """A person's correction: the memory keeps its id and provenance, says ``text`` now
        (recalled by its new words and meaning), and counts as just confirmed. None: no such
        memory. Raises :class:`MemoryEditRefused` for an empty text, or one another memory
        of its audience already says."""
        ...

    async def delete(self, memory_id: int) -> bool: ...

    async def delete_session(self, session_id: str) -> int:
        """Forget everything learnt in a session; returns how many memories went."""
        ...

    async def count(self, audience: str | None = None) -> int: ...

    async def close(self) -> None: ...


class MemoryEditRefused(NetclawError):
    """An edit that would leave a memory empty, or the same as another of its audience
    (``conflict``: that memory's id)."""

    def __init__(self, message: str, conflict: int | None = None) -> None:
        super().__init__(message)
        self.conflict = conflict


def edited_text(text: str) -> str:
    """The text an edit stores (trimmed and cut like a new memory's), or the refusal."""
    text = text.strip()[:MAX_MEMORY_CHARS].rstrip()
    if not text:
        raise MemoryEditRefused("a memory cannot be empty; to forget it, delete it")
    try:  # JSON can carry lone surrogates ("\ud800") that no UTF-8 store accepts
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MemoryEditRefused("the text contains characters that are not valid Unicode") from exc
    return text


def duplicate_refusal(other: int) -> MemoryEditRefused:
    return MemoryEditRefused(
        f"memory {other} of the same audience already says this; delete one of them instead", other
    )


@dataclass(frozen=True, slots=True)
class EmbeddingStatus:
    model: str | None  # None: embeddings off (keyword recall only)
    pending: int  # memories not yet embedded with it: recall finds those by keywords only

    @property
    def state(self) -> str:
        if self.model is None:
            return "off"
        return f"re-embedding ({self.pending} to go)" if self.pending else "ready"


def normalise(text: str) -> str:
    """The dedup key: casefolded, whitespace collapsed, trailing punctuation stripped."""
    collapsed = " ".join(text.casefold().split())
    end = len(collapsed)
    while end and (collapsed[end - 1].isspace() or unicodedata.category(collapsed[end - 1]).startswith("P")):
        end -= 1
    # Punctuation-only text still needs a key of its own.
    return collapsed[:end] or collapsed


def search_terms(text: str, *, stop_words: bool = False) -> list[str]:
    """The words of free user text worth searching for: distinct, casefolded, letters and
    digits only (no query syntax can survive), without stop words (recall matches a
    chat message; ``stop_words``: keep them, for a person who searched for exactly that
    word), at most ``MAX_QUERY_TERMS``."""
    terms: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group().casefold()
        if len(word) < 2 or (word in _STOP_WORDS and not stop_words) or word in terms:
            continue
        terms.append(word)
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return terms


def fts_query(text: str, *, stop_words: bool = False, every: bool = False) -> str | None:
    """A safe FTS5 query for free user text: its distinct words, each quoted, OR-ed
    (``every``: AND-ed).

    Quoting makes every term a literal phrase, so operators (``NEAR``, ``AND``,
    ``*``, ``:``, ``-``, ``^``) and stray quotes in the text are just words.
    None when nothing searchable is left.
    """
    terms = search_terms(text, stop_words=stop_words)  # the pattern excludes '"': no escaping needed
    return (" AND " if every else " OR ").join(f'"{word}"' for word in terms) if terms else None


def format_recall(memories: Sequence[Memory], char_budget: int = 1500) -> str | None:
    """The recall block for the volatile context: whole items within ``char_budget`` chars.

    Items are taken in the given (relevance) order; one that does not fit is left
    out and smaller ones after it may still fit. None when nothing fits.
    """
    out = RECALL_HEADER
    added = 0
    for memory in memories:
        line = f"\n- [{memory.kind}] {' '.join(memory.text.split())}"  # one line per memory
        if len(out) + len(line) <= char_budget:
            out += line
            added += 1
    return out if added else None


_COLUMNS = "id, text, kind, session_id, audience, created, turn, scope, superseded_by"
_M_COLUMNS = "m.id, m.text, m.kind, m.session_id, m.audience, m.created, m.turn, m.scope, m.superseded_by"
_BACKFILL_BATCH = 256  # memories re-embedded per step: each step is one short write


# A memory's ``used`` time (a hint for ranking and the cap) is saved at most this often.
USED_SAVE_INTERVAL_S = 86_400.0
# A long message is embedded by its start, where its question usually is: the encoder's
# cost grows with the text (about 2 ms for a sentence, 13 for 500 characters, 38 for 2,000).
QUERY_CHARS = 500


def to_blob(vector: Vectors) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


class HybridRecall:
    """The half of hybrid recall that is the same on both backends: the embedder, the
    in-memory vector index, the memories still to embed, fusion. A store feeds it the rows
    it reads and the keyword ranking it computes; embedding and scoring run in a worker
    thread (CPU work, never on the loop)."""

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self.index: VectorIndex | None = VectorIndex(embedder.dim) if embedder is not None else None
        self.pending: set[int] = set()  # live memories without a vector of this model
        # When this process last saved each memory's ``used`` time (what a restart knows is
        # the database's, so the first recall after one may save again).
        self._used_saved: dict[int, float] = {}
        self._backfill: asyncio.Task[None] | None = None

    @property
    def model(self) -> str | None:
        return self.embedder.model if self.embedder is not None else None

    def load(self, rows: Iterable[Sequence[Any]]) -> None:
        """Index live rows ``(id, audience, scope, vector, vector_model, fresh)`` (``fresh``:
        when last told, confirmed or recalled); a row without a vector of this model waits
        for the background re-embedding."""
        if self.index is None or self.embedder is None:
            return
        for memory_id, audience, scope, blob, model, fresh in rows:
            if blob is not None and model == self.embedder.model and len(blob) == 4 * self.index.dim:
                vector = np.frombuffer(bytes(blob), dtype="<f4").astype(np.float32)
                self.index.put(int(memory_id), str(audience), scope, vector, float(fresh or 0.0))
                self.pending.discard(int(memory_id))
            elif int(memory_id) not in self.index:
                self.pending.add(int(memory_id))

    def known(self, memory_id: int) -> bool:
        """Indexed, or waiting to be embedded."""
        return memory_id in self.pending or (self.index is not None and memory_id in self.index)

    async def embed(self, texts: Sequence[str]) -> Vectors | None:
        if self.embedder is None or not texts:
            return None
        return await asyncio.to_thread(self.embedder.embed, list(texts))

    async def similar(
        self, text: str, audience: str | None, scope: str | None, k: int
    ) -> tuple[Vectors | None, list[tuple[int, float]]]:
        """The query's vector (None: embeddings off, or no word of it is known) and the ``k``
        nearest live memories."""
        embedder, index = self.embedder, self.index
        if embedder is None or index is None:
            return None, []

        def work() -> tuple[Vectors | None, list[tuple[int, float]]]:
            query = embedder.embed([text[:QUERY_CHARS]])[0]
            if not query.any():
                return None, []
            return query, index.nearest(query, audience, scope, k)

        return await asyncio.to_thread(work)

    def rank(
        self,
        query: Vectors | None,
        keyword_ids: Sequence[int],
        similar: Sequence[tuple[int, float]],
        limit: int,
        complete: Collection[int] = (),
    ) -> list[int]:
        """Fused and floored (``complete``: the keyword hits with every word of the query)."""
        if query is None or self.index is None:
            return fuse(keyword_ids, (), {}, limit=limit, embedded=False)
        similarity = dict(similar)
        similarity.update(self.index.similarity(query, (i for i in keyword_ids if i not in similarity)))
        fresh = self.index.freshness(similarity)
        return fuse(
            keyword_ids, similar, similarity, limit=limit, complete=complete, fresh=fresh, now=time.time()
        )

    async def neighbours(self, vector: Vectors | None, audience: str) -> list[tuple[int, float]]:
        if vector is None or self.index is None:
            return []
        return self.index.nearest(vector, audience, None, 5)

    def added(
        self, memory_id: int, audience: str, scope: str | None, vector: Vectors | None, fresh: float
    ) -> None:
        if self.index is not None and vector is not None:
            self.index.put(memory_id, audience, scope, vector, fresh)

    def confirmed(self, memory_id: int, when: float) -> None:
        if self.index is not None:
            self.index.touch(memory_id, when)

    def recalled(self, ids: Sequence[int], when: float) -> list[int]:
        """Recalled into a turn at ``when``: ranked as fresh from now on. Returns the ids
        whose time in the database is worth updating (at most once a day each: a turn that
        recalls does not write for it)."""
        stale = [i for i in ids if self._used_saved.get(i, 0.0) < when - USED_SAVE_INTERVAL_S]
        for memory_id in stale:
            self._used_saved[memory_id] = when
        for memory_id in ids:
            self.confirmed(memory_id, when)
        return stale

    async def record_use(
        self, ids: Sequence[int], save: Callable[[float, list[int]], Awaitable[object]]
    ) -> None:
        """What a search gave the model: fresh from now on; ``save`` writes the ``used``
        time of the ids due for it (a failure is logged: a hint, never worth a recall)."""
        now = time.time()
        stale = self.recalled(ids, now)
        if stale:
            try:
                await save(now, stale)
            except JournalError as exc:
                log.warning("memory: could not record a recall (%s)", exc)

    def dropped(self, ids: Iterable[int]) -> None:
        for memory_id in ids:
            self.pending.discard(memory_id)
            self._used_saved.pop(memory_id, None)
            if self.index is not None:
                self.index.drop(memory_id)

    def status(self) -> EmbeddingStatus:
        return EmbeddingStatus(self.model, len(self.pending))

    def start_backfill(
        self,
        texts: Callable[[list[int]], Awaitable[list[tuple[int, str, str, str | None, float]]]],
        save: Callable[[list[tuple[bytes, str, int]]], Awaitable[None]],
    ) -> None:
        """Embed the pending memories in the background, a batch at a time: each batch is
        saved before the next, so a restart goes on where this one stopped. Recall finds
        the pending ones by their words meanwhile."""
        if self.pending and self.embedder is not None and self._backfill is None:
            self._backfill = asyncio.get_running_loop().create_task(self._run_backfill(texts, save))

    async def _run_backfill(
        self,
        texts: Callable[[list[int]], Awaitable[list[tuple[int, str, str, str | None, float]]]],
        save: Callable[[list[tuple[bytes, str, int]]], Awaitable[None]],
    ) -> None:
        assert self.embedder is not None
        model = self.embedder.model
        log.info("memory: embedding %d memories with %s in the background", len(self.pending), model)
        try:
            while self.pending:
                batch = sorted(self.pending)[:_BACKFILL_BATCH]
                rows = await texts(batch)
                vectors = await self.embed([r[1] for r in rows])
                if rows and vectors is not None:
                    await save([(to_blob(v), model, r[0]) for r, v in zip(rows, vectors, strict=True)])
                    for (memory_id, _, audience, scope, fresh), vector in zip(rows, vectors, strict=True):
                        if memory_id in self.pending:  # not deleted meanwhile
                            self.added(memory_id, audience, scope, vector, fresh)
                self.pending.difference_update(batch)  # embedded now, or gone
            log.info("memory: every memory is embedded with %s", model)
        except JournalError as exc:
            log.warning("memory: re-embedding stopped (%s); it goes on at the next start", exc)
        finally:
            self._backfill = None

    async def close(self) -> None:
        task, self._backfill = self._backfill, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def log_forgotten(audience: str, cap: int | None, ids: Sequence[int]) -> None:
    log.info(
        "memory: the %s audience is over memory.max_per_audience (%s): forgot %d least recently"
        " told, confirmed or recalled (ids %s)",
        audience,
        cap,
        len(ids),
        ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else ""),
    )


def keep_order(ids: Sequence[int], memories: Iterable[Memory]) -> list[Memory]:
    by_id = {m.id: m for m in memories}
    return [by_id[i] for i in ids if i in by_id]


# What a memory is ranked and kept by: when it was last told, confirmed or recalled.
_FRESH = "max(created, coalesce(confirmed, 0), coalesce(used, 0))"


class SqliteMemoryStore:
    """Implements :class:`MemoryStore` on its own connection to the daemon's SQLite file."""

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "full",
        embedder: Embedder | None = None,
        max_per_audience: int | None = None,
    ) -> None:
        self.path = path
        self._cap = max_per_audience
        self._synchronous = synchronous
        self._conn: aiosqlite.Connection | None = None
        # Audiences with at least one memory. Recall runs before every turn; a search that
        # cannot match skips the database round trip. Exact because this process is the
        # only writer (the daemon holds the data_dir lock).
        self._audiences: set[str] = set()
        self._recall = HybridRecall(embedder)
        self._writing = asyncio.Lock()  # a write is a transaction of several statements

    async def open(self) -> SqliteMemoryStore:
        """Open the connection. Migrations (``prepare_database``) must have run."""
        try:
            self._conn = await aiosqlite.connect(self.path, isolation_level=None)
            mode = await (await self._conn.execute("PRAGMA journal_mode")).fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                raise JournalError(f"{self.path} is not in WAL mode; run migrations first")
            sync = "FULL" if self._synchronous == "full" else "NORMAL"
            await self._conn.execute(f"PRAGMA synchronous={sync}")
            await self._conn.execute("PRAGMA busy_timeout=5000")
            await self._conn.execute("SELECT 1 FROM memories_fts LIMIT 0")  # fail now, not on first use
            rows = await self._conn.execute_fetchall("SELECT DISTINCT audience FROM memories")
            self._audiences = {str(r[0]) for r in rows}
            if self._recall.embedder is not None:
                live = await self._conn.execute_fetchall(
                    f"SELECT id, audience, scope, vector, vector_model, {_FRESH} FROM memories"
                    " WHERE superseded_by IS NULL"
                )
                self._recall.load(live)
        except JournalError:
            await self.close()
            raise
        except (sqlite3.Error, ValueError) as exc:
            await self.close()
            raise JournalError(f"cannot open the memory store {self.path}: {exc}") from exc
        self._recall.start_backfill(self._texts, self._save_vectors)
        return self

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        if self._conn is None:
            raise JournalError("the memory store is closed")
        try:
            # One job on the connection's thread: a cancelled caller cannot split a statement.
            return list(await self._conn.execute_fetchall(sql, params))
        except (sqlite3.Error, ValueError) as exc:  # ValueError: aiosqlite's "Connection closed"
            raise JournalError(f"memory store failed: {exc}") from exc

    async def _texts(self, ids: list[int]) -> list[tuple[int, str, str, str | None, float]]:
        marks = ", ".join("?" * len(ids))
        rows = await self._fetch(
            f"SELECT id, text, audience, scope, {_FRESH} FROM memories"
            f" WHERE id IN ({marks}) AND superseded_by IS NULL",
            ids,
        )
        return [(int(r[0]), str(r[1]), str(r[2]), r[3], float(r[4])) for r in rows]

    async def _save_vectors(self, rows: list[tuple[bytes, str, int]]) -> None:
        if self._conn is None:
            raise JournalError("the memory store is closed")
        async with self._writing:
            try:
                await self._conn.executemany(
                    "UPDATE memories SET vector = ?, vector_model = ? WHERE id = ?", rows
                )
            except (sqlite3.Error, ValueError) as exc:
                raise JournalError(f"memory store failed: {exc}") from exc

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
        # Shielded: a cancelled caller (a turn's timeout) cannot leave a transaction open.
        return await asyncio.shield(self._add(cleaned, session_id, audience, turn, scope))

    async def _add(
        self, items: list[NewMemory], session_id: str, audience: str, turn: int | None, scope: str | None
    ) -> list[Memory]:
        vectors = await self._recall.embed([i.text for i in items])
        stored: list[Memory] = []
        dropped: list[int] = []
        forgotten: list[int] = []
        async with self._writing:
            try:
                # Inside the try: the ROLLBACK queues behind a BEGIN whose await was interrupted.
                await self._fetch("BEGIN IMMEDIATE")
                for n, item in enumerate(items):
                    vector = vectors[n] if vectors is not None else None
                    memory = await self._add_one(item, vector, session_id, audience, turn, scope)
                    if memory is not None:
                        stored.append(memory)
                        self._recall.added(memory.id, audience, scope, vector, memory.created)
                        if memory.replaces is not None:
                            dropped.append(memory.replaces)
                            self._recall.dropped([memory.replaces])
                if stored and self._cap is not None:
                    forgotten = await self._forget_over_cap(audience, self._cap)
                await self._fetch("COMMIT")
            except BaseException:
                with contextlib.suppress(JournalError):
                    await self._fetch("ROLLBACK")
                # The index follows the database: what this batch put there goes again.
                self._recall.dropped(m.id for m in stored)
                if dropped:
                    with contextlib.suppress(JournalError):
                        self._recall.load(
                            await self._fetch(
                                "SELECT id, audience, scope, vector, vector_model FROM memories"
                                f" WHERE id IN ({', '.join('?' * len(dropped))})",
                                dropped,
                            )
                        )
                raise
        if forgotten:
            self._recall.dropped(forgotten)
            log_forgotten(audience, self._cap, forgotten)
        if stored:
            self._audiences.add(audience)
        return [m for m in stored if m.id not in forgotten]

    async def _forget_over_cap(self, audience: str, cap: int) -> list[int]:
        """Delete the audience's live memories beyond ``cap``, least recently told,
        confirmed or recalled first (inside the add's transaction)."""
        (count,) = (
            await self._fetch(
                "SELECT COUNT(*) FROM memories WHERE audience = ? AND superseded_by IS NULL", [audience]
            )
        )[0]
        if count <= cap:
            return []
        rows = await self._fetch(
            "DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE audience = ? AND"
            f" superseded_by IS NULL ORDER BY {_FRESH}, id LIMIT ?) RETURNING id",
            [audience, count - cap],
        )
        return [int(r[0]) for r in rows]

    async def _add_one(
        self,
        item: NewMemory,
        vector: Vectors | None,
        session_id: str,
        audience: str,
        turn: int | None,
        scope: str | None,
    ) -> Memory | None:
        now, norm = time.time(), normalise(item.text)
        same = await self._fetch(
            "SELECT id, superseded_by FROM memories WHERE audience = ? AND norm = ?", [audience, norm]
        )
        if same and same[0][1] is None:  # told again, word for word
            await self._fetch("UPDATE memories SET confirmed = ? WHERE id = ?", [now, same[0][0]])
            self._recall.confirmed(same[0][0], now)
            return None
        decision = WriteDecision("add")
        near = [n for n in await self._recall.neighbours(vector, audience) if not same or n[0] != same[0][0]]
        if near:
            texts = dict(await self._fetch_texts([i for i, _ in near]))
            decision = decide_write(item.text, [(i, texts[i], c) for i, c in near if i in texts])
        if (
            item.replaces is not None
            and decision.action != "duplicate"
            and (not same or same[0][0] != item.replaces)
        ):
            told = await self._fetch(
                "SELECT id FROM memories WHERE id = ? AND audience = ? AND superseded_by IS NULL",
                [item.replaces, audience],
            )
            if told:  # only a live memory of this audience: never another audience's
                decision = WriteDecision("supersede", item.replaces)
        if decision.action == "duplicate":
            await self._fetch("UPDATE memories SET confirmed = ? WHERE id = ?", [now, decision.existing])
            if decision.existing is not None:
                self._recall.confirmed(decision.existing, now)
            return None
        blob = to_blob(vector) if vector is not None else None
        model = self._recall.model if vector is not None else None
        if same:  # a fact that had been superseded is true again: it comes back, told here
            rows = await self._fetch(
                "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, kind = ?, session_id = ?,"
                " created = ?, turn = ?, scope = ?, vector = ?, vector_model = ?, confirmed = NULL"
                f" WHERE id = ? RETURNING {_COLUMNS}",
                [item.kind, session_id, now, turn, scope, blob, model, same[0][0]],
            )
        else:
            rows = await self._fetch(
                "INSERT INTO memories (text, kind, session_id, audience, created, norm, turn, scope, vector,"
                f" vector_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING {_COLUMNS}",
                [item.text, item.kind, session_id, audience, now, norm, turn, scope, blob, model],
            )
        memory = _memory(rows[0])
        if decision.action == "supersede" and decision.existing is not None:
            await self._fetch(
                "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ?",
                [memory.id, now, decision.existing],
            )
            memory = replace(memory, replaces=decision.existing)
        return memory

    async def _fetch_texts(self, ids: list[int]) -> list[tuple[int, str]]:
        marks = ", ".join("?" * len(ids))
        rows = await self._fetch(
            f"SELECT id, text FROM memories WHERE id IN ({marks}) AND superseded_by IS NULL", ids
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def may_have(self, audience: str) -> bool:
        return audience in self._audiences  # this process is the only writer (the data_dir lock)

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
        if self._conn is None:
            raise JournalError("the memory store is closed")
        if limit < 1 or not self._audiences or (audience is not None and audience not in self._audiences):
            return []
        found = await self._hybrid(query, audience, scope, None, min(limit, _MAX_LIMIT), stop_words=False)
        if used and found:
            await self._recall.record_use([m.id for m in found], self._save_used)
        return found

    async def _save_used(self, when: float, ids: list[int]) -> None:
        async with self._writing:
            await self._fetch(
                f"UPDATE memories SET used = ? WHERE id IN ({', '.join('?' * len(ids))})", [when, *ids]
            )

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
        k = max(CANDIDATES, limit)
        (keyword, complete), (vector, similar) = await asyncio.gather(
            self._keyword_ids(query, stop_words, audience, scope, k),
            self._recall.similar(query, audience, scope, k),
        )
        ids = self._recall.rank(vector, keyword, similar, limit, complete)
        if not ids:
            return []
        where = f"id IN ({', '.join('?' * len(ids))}) AND superseded_by IS NULL"
        params: list[Any] = list(ids)
        if session_id is not None:
            where += " AND session_id = ?"
            params.append(session_id)
        return keep_order(
            ids,
            (_memory(r) for r in await self._fetch(f"SELECT {_COLUMNS} FROM memories WHERE {where}", params)),
        )

    async def _keyword_ids(
        self, query: str, stop_words: bool, audience: str | None, scope: str | None, k: int
    ) -> tuple[list[int], set[int]]:
        """The ``k`` best keyword hits (BM25), and those of them with every word of the query."""
        match = fts_query(query, stop_words=stop_words)
        if match is None:
            return [], set()
        where = "memories_fts MATCH ? AND m.superseded_by IS NULL" + (
            "" if audience is None else " AND m.audience = ?"
        )
        params: list[Any] = [match] if audience is None else [match, audience]
        if scope is not None:
            where += " AND (m.scope = ? OR m.scope IS NULL)"
            params.append(scope)
        rows = await self._fetch(
            "SELECT m.id FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid"
            f" WHERE {where} ORDER BY bm25(memories_fts), m.id DESC LIMIT ?",  # bm25: lower is better
            [*params, k],
        )
        ids = [int(r[0]) for r in rows]
        every = fts_query(query, stop_words=stop_words, every=True)
        if not ids or every is None or " AND " not in every:
            return ids, set(ids)  # one word: each hit has all of it
        found = await self._fetch(
            f"SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? AND rowid IN ({', '.join('?' * len(ids))})",
            [every, *ids],
        )
        return ids, {int(r[0]) for r in found}

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
            # The same recall as a turn's, with every word a person typed.
            return await self._hybrid(query, audience, None, session_id, limit, stop_words=True)
        where: list[str] = []
        params: list[Any] = []
        if audience is not None:
            where.append("m.audience = ?")
            params.append(audience)
        if session_id is not None:
            where.append("m.session_id = ?")
            params.append(session_id)
        sql = f"SELECT {_COLUMNS} FROM memories AS m" + (f" WHERE {' AND '.join(where)}" if where else "")
        rows = await self._fetch(sql + " ORDER BY m.created DESC, m.id DESC LIMIT ?", [*params, limit])
        return [_memory(r) for r in rows]

    async def edit(self, memory_id: int, text: str) -> Memory | None:
        # Shielded like add: a request whose client hangs up cannot leave a transaction open.
        return await asyncio.shield(self._edit(memory_id, text))

    async def _edit(self, memory_id: int, text: str) -> Memory | None:
        text = edited_text(text)
        vectors = await self._recall.embed([text])
        vector = vectors[0] if vectors is not None else None
        now = time.time()
        async with self._writing:
            try:
                # Inside the try: the ROLLBACK queues behind a BEGIN whose await was interrupted.
                await self._fetch("BEGIN IMMEDIATE")
                rows = await self._fetch(
                    "UPDATE memories SET text = ?, norm = ?, vector = ?, vector_model = ?, confirmed = ?"
                    " WHERE id = ? AND NOT EXISTS (SELECT 1 FROM memories AS o WHERE o.audience ="
                    " memories.audience AND o.norm = ? AND o.id != ?)"
                    f" RETURNING {_COLUMNS}",
                    [
                        text,
                        normalise(text),
                        to_blob(vector) if vector is not None else None,
                        self._recall.model if vector is not None else None,
                        now,
                        memory_id,
                        normalise(text),
                        memory_id,
                    ],
                )
                clash = (
                    []
                    if rows
                    else await self._fetch(
                        "SELECT o.id FROM memories AS m JOIN memories AS o ON o.audience = m.audience"
                        " AND o.norm = ? AND o.id != m.id WHERE m.id = ?",
                        [normalise(text), memory_id],
                    )
                )
                await self._fetch("COMMIT")
            except BaseException:
                with contextlib.suppress(JournalError):
                    await self._fetch("ROLLBACK")
                raise
        if clash:
            raise duplicate_refusal(int(clash[0][0]))
        if not rows:
            return None
        memory = _memory(rows[0])
        if memory.superseded_by is None:
            self._recall.added(memory.id, memory.audience, memory.scope, vector, now)
        return memory

    async def delete(self, memory_id: int) -> bool:
        async with self._writing:
            rows = await self._fetch("DELETE FROM memories WHERE id = ? RETURNING id", [memory_id])
        self._recall.dropped([memory_id])
        await self._refresh_audiences()
        return bool(rows)

    async def delete_session(self, session_id: str) -> int:
        async with self._writing:
            rows = await self._fetch("DELETE FROM memories WHERE session_id = ? RETURNING id", [session_id])
        self._recall.dropped(int(r[0]) for r in rows)
        await self._refresh_audiences()
        return len(rows)

    async def _refresh_audiences(self) -> None:
        rows = await self._fetch("SELECT DISTINCT audience FROM memories")
        self._audiences = {str(r[0]) for r in rows}

    async def count(self, audience: str | None = None) -> int:
        if audience is None:
            rows = await self._fetch("SELECT COUNT(*) FROM memories")
        else:
            rows = await self._fetch("SELECT COUNT(*) FROM memories WHERE audience = ?", [audience])
        return int(rows[0][0])

    async def close(self) -> None:
        await self._recall.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


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
