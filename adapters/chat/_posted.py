"""What this bot posted, by idempotency key: the stand-in for a client nonce on a platform
that takes none (Telegram, Teams).

Such a platform takes no idempotency key, and a bot cannot read a chat's history there, so
the platform itself can never say "this reply is already posted". The port remembers it instead: each
post that got an answer is recorded here (key → chat and message id) before the post
returns, in a small SQLite file in the data directory, so it outlives the process. A
post with a known key edits that message rather than make a second one (a renderer's
retry, a resumed turn streaming again after a restart), and the outbox's ``find_posted``
finds a reply a crashed process posted but never marked delivered.

What it cannot cover: a post whose answer was lost (the request reached Telegram, the
connection broke before the answer) is unknown here, and its retry posts again; and the
file is one node's (on a cluster another node has its own).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from adapters.chat._local_db import LocalDb

KEEP_S = 7 * 24 * 3600.0  # a key older than this is forgotten (the outbox looks back minutes)


class PostedMessages:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = LocalDb(path, "posted-messages record")

    async def open(self) -> None:
        if not self._db.is_open:
            await self._db.open(_setup)

    async def close(self) -> None:
        await self._db.close()

    async def find(self, key: str, chat: str, since: float = 0.0) -> str | None:
        """The message posted with ``key`` in ``chat`` since ``since`` (Unix time)."""
        row = await self._db.run(
            lambda db: db.execute(
                "SELECT message_id FROM posted WHERE key = ? AND chat = ? AND at >= ?", (key, chat, since)
            ).fetchone()
        )
        return str(row[0]) if row is not None else None

    async def remember(self, key: str, chat: str, message_id: str) -> None:
        at = time.time()
        await self._db.run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO posted (key, chat, message_id, at) VALUES (?, ?, ?, ?)",
                (key, chat, message_id, at),
            )
        )


def _setup(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS posted (key TEXT PRIMARY KEY, chat TEXT NOT NULL, "
        "message_id TEXT NOT NULL, at REAL NOT NULL)"
    )
    db.execute("DELETE FROM posted WHERE at < ?", (time.time() - KEEP_S,))
