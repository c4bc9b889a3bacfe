"""Durable memory: facts worth keeping beyond one conversation, searchable with FTS5.

Memories are written by the compaction flush and the ``remember`` tool, and
recalled into the volatile context before a turn. Each belongs to one audience
(personal / team / public) and is only ever found by searches in that audience,
so what was said in a private session cannot surface in a shared one.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiosqlite

from netclaw.errors import JournalError
from netclaw.history import MEMORY_KINDS

MAX_MEMORY_CHARS = 2000
MAX_QUERY_TERMS = 16
RECALL_HEADER = "Relevant memories (from earlier conversations):"

_ROWS_PER_INSERT = 100  # 8 bound values a row; far below SQLite's variable limit
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


@dataclass(frozen=True, slots=True)
class NewMemory:
    text: str
    kind: str = "fact"

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
        """Store new items; returns only those newly stored (duplicates and blanks are skipped)."""
        ...

    async def search(
        self, query: str, *, audience: str | None = None, scope: str | None = None, limit: int = 5
    ) -> list[Memory]:
        """The most relevant memories for free text, best first; ``audience=None`` searches all.
        With ``scope``, only memories made there or audience-wide ones (scope NULL)."""
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
        """Memories for people to look through: matching ``query`` (best first) or newest first."""
        ...

    async def delete(self, memory_id: int) -> bool: ...

    async def delete_session(self, session_id: str) -> int:
        """Forget everything learnt in a session; returns how many memories went."""
        ...

    async def count(self, audience: str | None = None) -> int: ...

    async def close(self) -> None: ...


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


def fts_query(text: str, *, stop_words: bool = False) -> str | None:
    """A safe FTS5 query for free user text: its distinct words, each quoted, OR-ed.

    Quoting makes every term a literal phrase, so operators (``NEAR``, ``AND``,
    ``*``, ``:``, ``-``, ``^``) and stray quotes in the text are just words.
    None when nothing searchable is left.
    """
    terms = search_terms(text, stop_words=stop_words)  # the pattern excludes '"': no escaping needed
    return " OR ".join(f'"{word}"' for word in terms) if terms else None


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


_COLUMNS = "id, text, kind, session_id, audience, created, turn, scope"
_M_COLUMNS = "m.id, m.text, m.kind, m.session_id, m.audience, m.created, m.turn, m.scope"


class SqliteMemoryStore:
    """Implements :class:`MemoryStore` on its own connection to the daemon's SQLite file."""

    def __init__(self, path: Path, *, synchronous: str = "full") -> None:
        self.path = path
        self._synchronous = synchronous
        self._conn: aiosqlite.Connection | None = None
        # Audiences with at least one memory. Recall runs before every turn; a search that
        # cannot match skips the database round trip. Exact because this process is the
        # only writer (the daemon holds the data_dir lock).
        self._audiences: set[str] = set()

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
        except JournalError:
            await self.close()
            raise
        except (sqlite3.Error, ValueError) as exc:
            await self.close()
            raise JournalError(f"cannot open the memory store {self.path}: {exc}") from exc
        return self

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        if self._conn is None:
            raise JournalError("the memory store is closed")
        try:
            # One job on the connection's thread: a cancelled caller cannot split a statement.
            return list(await self._conn.execute_fetchall(sql, params))
        except (sqlite3.Error, ValueError) as exc:  # ValueError: aiosqlite's "Connection closed"
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
        now = time.time()
        rows: list[tuple[str, str, str, str, float, str, int | None, str | None]] = []
        for item in items:
            text = item.text.strip()[:MAX_MEMORY_CHARS].rstrip()
            if text:
                rows.append((text, item.kind, session_id, audience, now, normalise(text), turn, scope))
        stored: list[Memory] = []
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            # One statement, so atomic without an explicit transaction; DO NOTHING also
            # skips duplicates within the chunk, and RETURNING yields only inserted rows.
            sql = (
                "INSERT INTO memories (text, kind, session_id, audience, created, norm, turn, scope) VALUES "
                + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
                + f" ON CONFLICT (audience, norm) DO NOTHING RETURNING {_COLUMNS}"
            )
            found = await self._fetch(sql, [value for row in chunk for value in row])
            # RETURNING's row order is unspecified; callers get insertion order.
            stored.extend(sorted((_memory(r) for r in found), key=lambda m: m.id))
        if stored:
            self._audiences.add(audience)
        return stored

    def may_have(self, audience: str) -> bool:
        return audience in self._audiences  # this process is the only writer (the data_dir lock)

    async def search(
        self, query: str, *, audience: str | None = None, scope: str | None = None, limit: int = 5
    ) -> list[Memory]:
        if self._conn is None:
            raise JournalError("the memory store is closed")
        match = fts_query(query)
        if match is None or limit < 1 or not self._audiences:
            return []
        if audience is not None and audience not in self._audiences:
            return []
        where = "memories_fts MATCH ?" + ("" if audience is None else " AND m.audience = ?")
        params: list[Any] = [match] if audience is None else [match, audience]
        if scope is not None:
            where += " AND (m.scope = ? OR m.scope IS NULL)"
            params.append(scope)
        rows = await self._fetch(
            f"SELECT {_M_COLUMNS}"
            f" FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid"
            f" WHERE {where} ORDER BY bm25(memories_fts), m.id DESC LIMIT ?",  # bm25: lower is better
            [*params, min(limit, _MAX_LIMIT)],
        )
        return [_memory(r) for r in rows]

    async def listing(
        self,
        *,
        query: str | None = None,
        audience: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[Memory]:
        where: list[str] = []
        params: list[Any] = []
        if audience is not None:
            where.append("m.audience = ?")
            params.append(audience)
        if session_id is not None:
            where.append("m.session_id = ?")
            params.append(session_id)
        limit = max(1, min(limit, 1000))
        if query is not None and query.strip():
            match = fts_query(query, stop_words=True)  # a person's search: every word they typed
            if match is None:
                return []
            sql = (
                f"SELECT {_M_COLUMNS}"
                " FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid WHERE memories_fts MATCH ?"
                + "".join(f" AND {w}" for w in where)
                + " ORDER BY bm25(memories_fts), m.id DESC LIMIT ?"
            )
            rows = await self._fetch(sql, [match, *params, limit])
        else:
            sql = f"SELECT {_COLUMNS} FROM memories AS m" + (f" WHERE {' AND '.join(where)}" if where else "")
            rows = await self._fetch(sql + " ORDER BY m.created DESC, m.id DESC LIMIT ?", [*params, limit])
        return [_memory(r) for r in rows]

    async def delete(self, memory_id: int) -> bool:
        rows = await self._fetch("DELETE FROM memories WHERE id = ? RETURNING id", [memory_id])
        await self._refresh_audiences()
        return bool(rows)

    async def delete_session(self, session_id: str) -> int:
        rows = await self._fetch("DELETE FROM memories WHERE session_id = ? RETURNING id", [session_id])
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
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


def _memory(r: sqlite3.Row) -> Memory:
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
