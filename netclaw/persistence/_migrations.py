"""Numbered SQL migrations, one folder per backend (``migrations/sqlite``,
``migrations/postgres``), applied in order and recorded in ``schema_version``.

Rolling upgrades (several nodes on PostgreSQL): a migration is additive unless it says
otherwise, so a node of the previous release keeps running on the migrated database. A
destructive one (a column dropped, a meaning changed) names the oldest schema whose code
still works after it, in a comment line ``-- oldest-compatible: N``; a node that knows
less refuses to start on it."""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from netclaw.errors import JournalError

log = logging.getLogger(__name__)

_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
_OLDEST = re.compile(r"^--\s*oldest-compatible:\s*(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    # The oldest schema version whose code still runs after this migration (0: additive,
    # any older code does).
    oldest_compatible: int = 0


Backend = Literal["sqlite", "postgres"]


def migrations_dir(backend: Backend = "sqlite") -> Path:
    """Where a backend's SQL files are: inside the installed wheel, else the source tree."""
    packaged = Path(__file__).resolve().parent.parent / "_migrations" / backend
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "migrations" / backend
    if source.is_dir():
        return source
    raise JournalError(f"migrations not found (looked in {packaged} and {source}); reinstall netclaw")


def load_migrations(directory: Path | None = None, backend: Backend = "sqlite") -> list[Migration]:
    directory = directory or migrations_dir(backend)
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.fullmatch(path.name)
        if not match:
            raise JournalError(f"migration file {path.name!r} is not named NNNN_name.sql")
        sql = path.read_text(encoding="utf-8")
        oldest = _OLDEST.search(sql)
        found.append(Migration(int(match[1]), match[2], sql, int(oldest[1]) if oldest else 0))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise JournalError(f"duplicate migration numbers in {directory}")
    return found


def apply_migrations(conn: sqlite3.Connection, migrations: list[Migration]) -> list[int]:
    """Apply the ones not yet recorded, each in its own transaction. Returns versions applied.

    Runs on a plain sqlite3 connection (start-up, before the loop serves anything).
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_version")}
    newest_known = max((m.version for m in migrations), default=0)
    if done and max(done) > newest_known:
        raise JournalError(
            f"the database schema is at version {max(done)}, newer than this netclaw knows "
            f"({newest_known}); upgrade netclaw or use another data_dir"
        )
    applied: list[int] = []
    for migration in migrations:
        if migration.version in done:
            continue
        # Said, because one may take long (a table rewritten: about 40 s per GB of journal).
        log.info("applying database migration %04d_%s", migration.version, migration.name)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise JournalError(f"migration {migration.version:04d}_{migration.name} failed: {exc}") from exc
        applied.append(migration.version)
    return applied


def _statements(sql: str) -> list[str]:
    # executescript() would COMMIT on its own; split so a migration is one transaction.
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") for ln in buf.strip().splitlines()):
        raise JournalError(f"incomplete SQL statement at end of migration: {buf.strip()[:80]!r}")
    return out
