"""The PostgreSQL side of things every store shares: migrations, connection pools, and
DSNs that never show their password."""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
import psycopg_pool

from netclaw.errors import JournalError
from netclaw.persistence._migrations import load_migrations

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
POOL_WAIT_S = 10.0  # a pool with no usable connection (the server is away) fails after this
# A pooled connection idle for longer is checked before it is handed out: one that went
# stale (the server restarted meanwhile) is replaced instead of failing its first query.
IDLE_CHECK_S = 1.0

_MIGRATION_LOCK = 0x6E6574636C6177  # "netclaw": one node migrates, the others wait


def prepare_postgres(dsn: str) -> list[int]:
    """Apply the PostgreSQL migrations not yet recorded, each in its own transaction, under
    an advisory lock (several nodes may start at once). Blocking; start-up only.

    A database migrated further than this netclaw knows (a rolling upgrade under way, or
    this node rolled back) is fine while every newer migration is additive; one that
    declares itself incompatible with this code (``-- oldest-compatible: N``) is refused."""
    migrations = load_migrations(backend="postgres")
    applied: list[int] = []
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version ("
                    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
                )
                conn.execute("ALTER TABLE schema_version ADD COLUMN IF NOT EXISTS oldest_compatible INTEGER")
                rows = conn.execute("SELECT version, name, oldest_compatible FROM schema_version").fetchall()
                done = {int(r[0]) for r in rows}
                newest_known = max((m.version for m in migrations), default=0)
                check_compatible(newest_known, [(int(r[0]), str(r[1]), r[2]) for r in rows])
                for migration in migrations:
                    if migration.version in done:
                        continue
                    try:
                        with conn.transaction():
                            conn.execute(migration.sql.encode())  # no parameters: several statements
                            conn.execute(
                                "INSERT INTO schema_version (version, name, applied_at, oldest_compatible)"
                                " VALUES (%s, %s, extract(epoch from now()), %s)",
                                (migration.version, migration.name, migration.oldest_compatible),
                            )
                    except psycopg.Error as exc:
                        raise JournalError(
                            f"migration postgres/{migration.version:04d}_{migration.name} failed: {exc}"
                        ) from exc
                    applied.append(migration.version)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    except psycopg.OperationalError as exc:
        raise JournalError(f"cannot reach PostgreSQL ({safe_dsn(dsn)}): {exc}") from exc
    return applied


def check_compatible(newest_known: int, recorded: list[tuple[int, str, int | None]]) -> None:
    """May code that knows migrations up to ``newest_known`` run on a database with these
    (version, name, oldest compatible) rows? Newer additive ones are fine (logged);
    JournalError names the first that is not."""
    newer = sorted(r for r in recorded if r[0] > newest_known)
    for version, name, oldest in newer:
        if oldest is not None and oldest > newest_known:
            raise JournalError(
                f"the database schema is at version {newer[-1][0]}, and migration {version:04d}_{name} "
                f"does not work with netclaw code older than schema {oldest} (this netclaw knows "
                f"{newest_known}); upgrade netclaw on this node"
            )
    if newer:
        log.warning(
            "the database schema is at version %d, newer than this netclaw knows (%d); running on "
            "it (the newer migrations are additive) — upgrade this node when you can",
            newer[-1][0],
            newest_known,
        )


def safe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the configured DSN"
    host, port, db = info.get("host", "?"), info.get("port", "5432"), info.get("dbname", "?")
    return f"{host}:{port}/{db}"


def new_pool(dsn: str, name: str, size: int) -> psycopg_pool.AsyncConnectionPool:
    """A small pool of autocommit connections (opened by :func:`open_pool`); a connection
    that sat idle is checked before use (:data:`IDLE_CHECK_S`)."""
    return psycopg_pool.AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=size,
        open=False,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
        name=f"netclaw-{name}",
        timeout=POOL_WAIT_S,
        configure=_note_used,
        reset=_note_used,
        check=_check_if_idle,
    )


# When each pooled connection was last handed back (a weak map: the pool owns them).
_last_used: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()


async def _note_used(conn: psycopg.AsyncConnection[Any]) -> None:
    _last_used[conn] = time.monotonic()


async def _check_if_idle(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check before handing a connection out: a round trip only for one that
    sat idle (under load, none do). Raising makes the pool replace it."""
    if time.monotonic() - _last_used.get(conn, 0.0) > IDLE_CHECK_S:
        await conn.execute("")
        _last_used[conn] = time.monotonic()


async def open_pool(pool: psycopg_pool.AsyncConnectionPool, table: str, dsn: str) -> None:
    """Open ``pool`` and check that ``table`` is there (migrated? fail now, not on first use).
    JournalError when either fails; the pool is closed again."""
    try:
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        async with pool.connection() as conn:
            await conn.execute(f"SELECT 1 FROM {table} LIMIT 0")
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        await pool.close()
        raise JournalError(f"cannot open {table} on PostgreSQL ({safe_dsn(dsn)}): {exc}") from exc


class PooledStore:
    """A store on its own small pool: reads and single-statement writes, errors as
    JournalError naming the store."""

    table = ""  # checked at open
    what = ""  # "the reminder store", in messages

    def __init__(self, dsn: str, size: int = 2) -> None:
        self.dsn = dsn
        self._size = size
        self._pool: psycopg_pool.AsyncConnectionPool | None = None

    async def _open(self) -> None:
        pool = new_pool(self.dsn, self.table, self._size)
        await open_pool(pool, self.table, self.dsn)
        self._pool = pool

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self._pool is None:
            raise JournalError(f"{self.what} is closed")
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(sql, params)
                return await cursor.fetchall() if cursor.description is not None else []
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise JournalError(f"{self.what} failed: {exc}") from exc

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Rows the statement changed."""
        if self._pool is None:
            raise JournalError(f"{self.what} is closed")
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(sql, params)
                return cursor.rowcount
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise JournalError(f"{self.what} failed: {exc}") from exc

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close()
