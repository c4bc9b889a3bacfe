"""``netclaw`` as the next release would be, for the rolling-upgrade test: it reports another
version, speaks forwarding protocol 2 (still reading 1, as the rule says), and brings one
more migration — additive, as the rule says a release's migrations are. Run it as
``python tests/e2e/next_release.py run --config ...``; everything else is this tree's code.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

VERSION = "0.2.0-next"
PROTOCOL = 2
MIGRATION_SQL = "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS next_release_note TEXT;\n"
MIGRATION_VERSION = 9000


def patch() -> None:
    import netclaw
    from netclaw.cluster import protocol
    from netclaw.persistence import _backends, _migrations
    from netclaw.persistence.postgres import _schema

    protocol.CURRENT = PROTOCOL  # OLDEST stays 1: nodes of this release are still understood
    netclaw.__version__ = VERSION
    _backends.__version__ = VERSION
    this_release = _migrations.load_migrations

    def load_migrations(
        directory: Path | None = None, backend: _migrations.Backend = "sqlite"
    ) -> list[_migrations.Migration]:
        found = this_release(directory, backend)
        if backend == "postgres":
            found.append(_migrations.Migration(MIGRATION_VERSION, "next_release", MIGRATION_SQL))
        return found

    _schema.load_migrations = load_migrations  # type: ignore[assignment]


if __name__ == "__main__":
    patch()
    from netclaw.cli import main

    sys.exit(main())
