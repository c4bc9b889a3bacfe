"""``netclaw migrate-journal --to postgres``: move a single node's SQLite journal (and every
other store in the same file) into the PostgreSQL database a cluster will share. Run it
with the daemon stopped; it refuses while one holds the data directory."""

from __future__ import annotations

import argparse

from netclaw.config import load_settings
from netclaw.config.credentials import read_secret, where_to_put
from netclaw.errors import ConfigError


def cmd_migrate_journal(args: argparse.Namespace) -> int:
    # --dsn-env names a secret, whatever it is called (NETCLAW_PG_DSN): not a config override.
    settings = load_settings(args.config, secret_names=(args.dsn_env,) if args.dsn_env else ())
    name = args.dsn_env or settings.journal.dsn_env
    if not name:
        raise ConfigError(
            "migrate-journal --to postgres needs the variable that holds the database's DSN: "
            "journal.dsn_env in the config, or --dsn-env NAME"
        )
    dsn = read_secret(name)
    if not dsn:
        raise ConfigError(f"{name} (the PostgreSQL DSN) is empty or unset: {where_to_put(name)}")
    try:
        from netclaw.persistence.postgres import copy_sqlite_to_postgres, prepare_postgres, safe_dsn
    except ImportError as exc:
        raise ConfigError(
            f"migrating to PostgreSQL needs the postgres extra: pip install 'netclaw[postgres]' ({exc})"
        ) from exc
    from netclaw.process.lock import DataDirLock  # the daemon's own lock: never copy a live journal

    lock = DataDirLock(settings.data_dir)
    lock.acquire()
    try:
        source = settings.database_path
        print(f"migrating {source} to PostgreSQL ({safe_dsn(dsn)})")
        prepare_postgres(dsn)
        copied = copy_sqlite_to_postgres(source, dsn, progress=lambda t, n: print(f"  {t}: {n} row(s)"))
    finally:
        lock.release()
    sessions = copied.get("sessions", 0)
    print(
        f"done: {copied.get('events', 0)} event(s) of {sessions} session(s), "
        f"memories: {copied.get('memories', 0)}, {copied.get('reminders', 0)} reminder(s); "
        f"{source} is unchanged.\n"
        f'next: set "journal": {{"backend": "postgres", "dsn_env": "{name}"}} on every node, then start them'
    )
    return 0
