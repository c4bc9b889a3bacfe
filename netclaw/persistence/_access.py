"""Who may do what, durably: the audit table and named API tokens (SQLite here; the same
logic on PostgreSQL in :mod:`netclaw.persistence.postgres`).

The audit trail of a session is derived from its journal (:mod:`netclaw.security.audit`); the table
holds what happens outside sessions, and a session's entries copied before its journal is
erased. Tokens are stored as the SHA-256 of a 256-bit random secret: a leaked database
gives no token, and a token is found by its hash (nothing to compare in variable time).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from netclaw.errors import InvalidInput, JournalError
from netclaw.security.audit import JOURNAL_TYPES, AuditEntry, JournalRow, from_journal, select

TOKEN_PREFIX = "nct_"
LAST_USED_EVERY_S = 60.0


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class ApiToken:
    name: str
    role: str
    created_at: float
    last_used: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "created_at": self.created_at,
            "last_used": self.last_used,
        }


class AccessLogic(ABC):
    """The store's queries, written once for both databases (``?`` placeholders); each
    store supplies how a statement reaches its database."""

    # Only who sent each admitted message is read from InputAdmitted, not its text.
    speaker_sql = (
        "json_object('message', json_object('id', json_extract(payload, '$.message.id'),"
        " 'speaker', json_extract(payload, '$.message.speaker'),"
        " 'user', json_extract(payload, '$.message.user')))"
    )

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    async def _execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    @abstractmethod
    async def close(self) -> None: ...

    # -- the audit trail ----------------------------------------------------------------------

    async def record(self, entry: AuditEntry) -> None:
        """Append one entry (one with a ``key`` already there is not added again)."""
        await self._execute(
            "INSERT INTO audit (at, kind, actor, session_id, detail, key) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO NOTHING",
            (entry.at, entry.kind, entry.actor, entry.session_id, json.dumps(dict(entry.detail)), entry.key),
        )

    async def journal_rows(self, session_id: str | None = None) -> list[JournalRow]:
        types = ", ".join(f"'{t}'" for t in JOURNAL_TYPES)
        where = f"type IN ({types})" + (" AND persistence_id = ?" if session_id is not None else "")
        rows = await self._fetch(
            "SELECT persistence_id, seq, type, ts,"
            f" CASE WHEN type = 'InputAdmitted' THEN {self.speaker_sql} ELSE payload END"
            f" FROM events WHERE {where} ORDER BY persistence_id, seq",
            (session_id,) if session_id is not None else (),
        )
        return [(str(r[0]), int(r[1]), str(r[2]), float(r[3]), str(r[4])) for r in rows]

    async def keep_trail_of(self, session_id: str) -> int:
        """Copy the session's journal-derived entries into the table (before an erase)."""
        entries = from_journal(await self.journal_rows(session_id))
        for entry in entries:
            await self.record(entry)
        return len(entries)

    async def entries(
        self, *, since: float | None = None, session_id: str | None = None, limit: int = 1000
    ) -> list[AuditEntry]:
        """The trail, oldest first (the newest ``limit``): the journal's and the table's,
        each event once (a copied entry is not shown twice while its journal still exists)."""
        where: list[str] = ["at >= ?"]
        params: list[Any] = [since if since is not None else 0.0]
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        rows = await self._fetch(
            f"SELECT at, kind, actor, session_id, detail, key FROM audit WHERE {' AND '.join(where)}",
            params,
        )
        table = [AuditEntry(float(r[0]), str(r[1]), str(r[2]), r[3], json.loads(r[4]), r[5]) for r in rows]
        keys = {e.key for e in table if e.key is not None}
        derived = [e for e in from_journal(await self.journal_rows(session_id)) if e.key not in keys]
        return select([*table, *derived], since=since, session_id=session_id)[-limit:]

    # -- API tokens ---------------------------------------------------------------------------

    async def add_token(self, name: str, role: str) -> str:
        """A new token named ``name`` with ``role``; the token itself (shown once)."""
        token = new_token()
        changed = await self._execute(
            "INSERT INTO api_tokens (name, role, hash, created_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (name, role, hash_token(token), time.time()),
        )
        if changed == 0:
            raise InvalidInput(
                "name", f"a token named {name!r} exists; remove it first or choose another name"
            )
        return token

    async def remove_token(self, name: str) -> bool:
        return await self._execute("DELETE FROM api_tokens WHERE name = ?", (name,)) > 0

    async def tokens(self) -> list[ApiToken]:
        rows = await self._fetch("SELECT name, role, created_at, last_used FROM api_tokens ORDER BY name")
        return [ApiToken(str(r[0]), str(r[1]), float(r[2]), r[3]) for r in rows]

    async def token(self, token: str) -> ApiToken | None:
        """The named token this secret is, or None."""
        digest = hash_token(token)
        rows = await self._fetch(
            "SELECT name, role, created_at, last_used FROM api_tokens WHERE hash = ?", (digest,)
        )
        if not rows:
            return None
        found = ApiToken(str(rows[0][0]), str(rows[0][1]), float(rows[0][2]), rows[0][3])
        now = time.time()
        # At most one write a minute per token: enough to spot a token nobody uses any more.
        if found.last_used is None or now - found.last_used >= LAST_USED_EVERY_S:
            await self._execute("UPDATE api_tokens SET last_used = ? WHERE hash = ?", (now, digest))
        return found


class SqliteAccessStore(AccessLogic):
    def __init__(self, path: Path, synchronous: str = "full") -> None:
        self.path = path
        self.synchronous = synchronous
        self._conn: aiosqlite.Connection | None = None

    async def open(self) -> SqliteAccessStore:
        try:
            self._conn = await aiosqlite.connect(self.path, isolation_level=None)
            await self._conn.execute("PRAGMA busy_timeout=5000")
            await self._conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the audit and token store in {self.path}: {exc}") from exc
        return self

    def _require(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise JournalError("the audit and token store is closed")
        return self._conn

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            # In one call: a cursor left between steps keeps a read open on the connection the
            # writes share, and a write then meets a stale snapshot ("database is locked").
            return [tuple(r) for r in await self._require().execute_fetchall(sql, tuple(params))]
        except sqlite3.Error as exc:
            raise JournalError(f"the audit and token store failed: {exc}") from exc

    async def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        try:
            cursor = await self._require().execute(sql, tuple(params))
            return cursor.rowcount
        except sqlite3.Error as exc:
            raise JournalError(f"the audit and token store failed: {exc}") from exc

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
