"""The warm-restart manifest: which sessions were active at a graceful stop.

Written once at shutdown and taken (read and cleared) once at start-up, on the daemon's
own thread with a plain connection: neither is on a hot path, and both happen while no
session runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from netclaw.errors import JournalError


@dataclass(frozen=True, slots=True)
class Manifest:
    stopped_at: float
    session_ids: tuple[str, ...]


def save_manifest(path: Path, session_ids: Sequence[str], stopped_at: float) -> None:
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM warm_manifest")
            conn.executemany(
                "INSERT INTO warm_manifest (session_id, stopped_at) VALUES (?, ?)",
                [(sid, stopped_at) for sid in session_ids],
            )
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise JournalError(f"cannot save the warm-restart manifest in {path}: {exc}") from exc


def take_manifest(path: Path) -> Manifest | None:
    """The manifest of the last graceful stop, cleared; None after a crash (or a first start)."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "SELECT session_id, stopped_at FROM warm_manifest ORDER BY session_id"
            ).fetchall()
            conn.execute("DELETE FROM warm_manifest")
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise JournalError(f"cannot read the warm-restart manifest in {path}: {exc}") from exc
    if not rows:
        return None
    return Manifest(stopped_at=max(float(r[1]) for r in rows), session_ids=tuple(str(r[0]) for r in rows))
