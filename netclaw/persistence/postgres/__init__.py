"""The PostgreSQL stores, for several daemons on one database (``journal.backend`` =
``postgres``; the ``netclaw[postgres]`` extra). Each implements the same interface as
its SQLite twin in :mod:`netclaw.persistence`, and the store tests run against both."""

from netclaw.persistence.postgres._access import PostgresAccessStore
from netclaw.persistence.postgres._copy import copy_sqlite_to_postgres
from netclaw.persistence.postgres._deliveries import PostgresDeliveryLog
from netclaw.persistence.postgres._journal import PostgresJournal
from netclaw.persistence.postgres._manifest import save_manifest, take_manifest
from netclaw.persistence.postgres._memory import PostgresMemoryStore
from netclaw.persistence.postgres._reminders import PostgresReminderStore
from netclaw.persistence.postgres._schema import prepare_postgres, safe_dsn

__all__ = [
    "PostgresAccessStore",
    "PostgresDeliveryLog",
    "PostgresJournal",
    "PostgresMemoryStore",
    "PostgresReminderStore",
    "copy_sqlite_to_postgres",
    "prepare_postgres",
    "safe_dsn",
    "save_manifest",
    "take_manifest",
]
