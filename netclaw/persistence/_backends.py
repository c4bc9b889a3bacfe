"""Which database the stores live on (``journal.backend``), and each store made there.

The daemon and the webhook channel ask here, so the choice is made in one place; the
PostgreSQL package (and psycopg) is imported only when it is the one configured."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from netclaw import __version__
from netclaw.config import Settings
from netclaw.errors import ConfigError
from netclaw.persistence import _manifest
from netclaw.persistence._access import SqliteAccessStore
from netclaw.persistence._deliveries import SqliteDeliveryLog
from netclaw.persistence._embeddings import load_embedder
from netclaw.persistence._manifest import Manifest
from netclaw.persistence._memory import SqliteMemoryStore
from netclaw.persistence._reminders import SqliteReminderStore
from netclaw.persistence._sqlite import SqliteJournal, prepare_database

if TYPE_CHECKING:
    from netclaw.persistence.postgres import (
        PostgresAccessStore,
        PostgresDeliveryLog,
        PostgresJournal,
        PostgresMemoryStore,
        PostgresReminderStore,
    )


@contextlib.contextmanager
def _needs_psycopg() -> Iterator[None]:
    """Around the import of the PostgreSQL stores: psycopg is the netclaw[postgres] extra."""
    try:
        yield
    except ImportError as exc:
        raise ConfigError(
            f"journal.backend: 'postgres' needs psycopg ({exc}); install netclaw[postgres]"
        ) from exc


def uses_postgres(settings: Settings) -> bool:
    return settings.journal.backend == "postgres"


def prepare_stores(settings: Settings) -> list[int]:
    """Create or migrate the database; returns the migrations applied. Start-up only."""
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import prepare_postgres
        return prepare_postgres(settings.journal.dsn())
    return prepare_database(settings.database_path, synchronous=settings.journal.synchronous)


def make_journal(
    settings: Settings, on_commit: Callable[[float], None] | None = None, *, protocol: int = 1
) -> SqliteJournal | PostgresJournal:
    """The configured journal; on PostgreSQL, as this node of the cluster, which speaks
    forwarding ``protocol`` (kept in the node registry with this netclaw's version)."""
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import PostgresJournal
        cluster = settings.cluster
        return PostgresJournal(
            settings.journal.dsn(),
            node_id=cluster.node,
            advertise_url=cluster.advertise_url,
            lease_s=cluster.lease_s,
            on_commit=on_commit,
            commit_delay_s=settings.journal.commit_delay_ms / 1000,
            version=__version__,
            protocol=protocol,
        )
    return SqliteJournal(
        settings.database_path,
        synchronous=settings.journal.synchronous,
        on_commit=on_commit,
        commit_delay_s=settings.journal.commit_delay_ms / 1000,
    )


def make_memory(settings: Settings) -> SqliteMemoryStore | PostgresMemoryStore:
    """The memory store with the configured embeddings (loaded here: blocking, ~0.5 s the
    first time in a process; call it off the loop)."""
    embedder = load_embedder(settings.memory.embeddings)
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import PostgresMemoryStore
        return PostgresMemoryStore(
            settings.journal.dsn(), embedder=embedder, max_per_audience=settings.memory.max_per_audience
        )
    return SqliteMemoryStore(
        settings.database_path,
        synchronous=settings.journal.synchronous,
        embedder=embedder,
        max_per_audience=settings.memory.max_per_audience,
    )


def make_reminders(settings: Settings) -> SqliteReminderStore | PostgresReminderStore:
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import PostgresReminderStore
        # A claim outlives a slow fire; a dead node's is taken over after it.
        claim_s = max(settings.cluster.lease_s, 30.0)
        return PostgresReminderStore(settings.journal.dsn(), node_id=settings.cluster.node, claim_s=claim_s)
    return SqliteReminderStore(settings.database_path, synchronous=settings.journal.synchronous)


def make_access(settings: Settings) -> SqliteAccessStore | PostgresAccessStore:
    """The audit table and named API tokens."""
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import PostgresAccessStore
        return PostgresAccessStore(settings.journal.dsn())
    return SqliteAccessStore(settings.database_path, synchronous=settings.journal.synchronous)


def make_deliveries(settings: Settings) -> SqliteDeliveryLog | PostgresDeliveryLog:
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import PostgresDeliveryLog
        return PostgresDeliveryLog(settings.journal.dsn())
    return SqliteDeliveryLog(settings.database_path)


def save_manifest(settings: Settings, session_ids: Sequence[str], stopped_at: float) -> None:
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import save_manifest as save_pg_manifest
        save_pg_manifest(settings.journal.dsn(), settings.cluster.node, session_ids, stopped_at)
    else:
        _manifest.save_manifest(settings.database_path, session_ids, stopped_at)


def take_manifest(settings: Settings) -> Manifest | None:
    if uses_postgres(settings):
        with _needs_psycopg():
            from netclaw.persistence.postgres import take_manifest as take_pg_manifest
        return take_pg_manifest(settings.journal.dsn(), settings.cluster.node)
    return _manifest.take_manifest(settings.database_path)
