"""The warm-restart manifest on PostgreSQL: per node (each daemon warms what it had)."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from netclaw.errors import JournalError
from netclaw.persistence._manifest import Manifest
from netclaw.persistence.postgres._schema import CONNECT_TIMEOUT_S, safe_dsn


def save_manifest(dsn: str, node_id: str, session_ids: Sequence[str], stopped_at: float) -> None:
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn, conn.transaction():
            conn.execute("DELETE FROM warm_manifest WHERE node_id = %s", (node_id,))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO warm_manifest (node_id, session_id, stopped_at) VALUES (%s, %s, %s)",
                    [(node_id, sid, stopped_at) for sid in session_ids],
                )
    except psycopg.Error as exc:
        raise JournalError(f"cannot save the warm-restart manifest on {safe_dsn(dsn)}: {exc}") from exc


def take_manifest(dsn: str, node_id: str) -> Manifest | None:
    """This node's manifest of its last graceful stop, cleared; None after a crash."""
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn, conn.transaction():
            rows = conn.execute(
                "DELETE FROM warm_manifest WHERE node_id = %s RETURNING session_id, stopped_at", (node_id,)
            ).fetchall()
    except psycopg.Error as exc:
        raise JournalError(f"cannot read the warm-restart manifest on {safe_dsn(dsn)}: {exc}") from exc
    if not rows:
        return None
    return Manifest(
        stopped_at=max(float(r[1]) for r in rows), session_ids=tuple(sorted(str(r[0]) for r in rows))
    )
