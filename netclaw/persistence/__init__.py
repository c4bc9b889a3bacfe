"""Persistence: the event journal, snapshots and session index (SQLite by default;
PostgreSQL for several nodes, from :mod:`netclaw.persistence.postgres`, which needs the
``netclaw[postgres]`` extra)."""

from netclaw.persistence._access import AccessLogic, ApiToken, SqliteAccessStore, hash_token
from netclaw.persistence._backends import (
    make_access,
    make_deliveries,
    make_journal,
    make_memory,
    make_reminders,
    prepare_stores,
    save_manifest,
    take_manifest,
    uses_postgres,
)
from netclaw.persistence._deliveries import DeliveryLog, SqliteDeliveryLog
from netclaw.persistence._embeddings import (
    DEFAULT_EMBEDDINGS,
    Embedder,
    EmbeddingsName,
    EmbeddingsUnavailable,
    load_embedder,
)
from netclaw.persistence._journal import (
    Journal,
    Lease,
    NewEvent,
    Node,
    Owner,
    Peer,
    SessionPage,
    SessionQuery,
    SessionRow,
    Snapshot,
    StoredEvent,
    UsageKey,
    UsageRow,
)
from netclaw.persistence._manifest import Manifest
from netclaw.persistence._memory import (
    MAX_MEMORY_CHARS,
    EmbeddingStatus,
    Memory,
    MemoryEditRefused,
    MemoryStore,
    NewMemory,
    SqliteMemoryStore,
    format_recall,
)
from netclaw.persistence._migrations import apply_migrations, load_migrations, migrations_dir
from netclaw.persistence._reminders import Reminder, ReminderStore, SqliteReminderStore
from netclaw.persistence._sqlite import SqliteJournal, prepare_database

__all__ = [
    "DEFAULT_EMBEDDINGS",
    "MAX_MEMORY_CHARS",
    "AccessLogic",
    "ApiToken",
    "DeliveryLog",
    "Embedder",
    "EmbeddingStatus",
    "EmbeddingsName",
    "EmbeddingsUnavailable",
    "Journal",
    "Lease",
    "Manifest",
    "Memory",
    "MemoryEditRefused",
    "MemoryStore",
    "NewEvent",
    "NewMemory",
    "Node",
    "Owner",
    "Peer",
    "Reminder",
    "ReminderStore",
    "SessionPage",
    "SessionQuery",
    "SessionRow",
    "Snapshot",
    "SqliteAccessStore",
    "SqliteDeliveryLog",
    "SqliteJournal",
    "SqliteMemoryStore",
    "SqliteReminderStore",
    "StoredEvent",
    "UsageKey",
    "UsageRow",
    "apply_migrations",
    "format_recall",
    "hash_token",
    "load_embedder",
    "load_migrations",
    "make_access",
    "make_deliveries",
    "make_journal",
    "make_memory",
    "make_reminders",
    "migrations_dir",
    "prepare_database",
    "prepare_stores",
    "save_manifest",
    "take_manifest",
    "uses_postgres",
]
