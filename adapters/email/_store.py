"""The little the email channel keeps itself, in one SQLite file in the data directory.

The mail server is the truth about what came in (a mail is taken once its input is
journaled, then flagged ``\\Seen``: nothing here says what was read). Kept here is only
what mail cannot tell later:

- **threads**: for each thread token, how to answer it (the root, the subject, whom to
  write, the newest mail to reply under and its References), so a reply owed after a
  restart (the outbox, a resumed turn) is threaded like one sent live;
- **messages**: which thread a Message-ID belongs to (a reply that names only a mid-thread
  mail still finds its session);
- **sent**: what the bot sent, by idempotency key (SMTP has no such thing: a post repeated
  after a lost answer, or the outbox after a crash, finds the mail already sent);
- **codes**: the approval code of each prompt mail, its approval and the prompt.

Written before the mail it describes is taken or sent; kept for :data:`KEEP_S`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from adapters.chat import LocalDb

KEEP_S = 90 * 24 * 3600.0  # a thread quiet this long is forgotten (a reply then starts afresh)
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (token TEXT PRIMARY KEY, root TEXT NOT NULL, subject TEXT NOT NULL,
  reply_to TEXT NOT NULL, cc TEXT NOT NULL, parent TEXT, refs TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages (message_id TEXT PRIMARY KEY, token TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sent (key TEXT PRIMARY KEY, token TEXT NOT NULL, message_id TEXT NOT NULL,
  digest TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sent_by_id ON sent (message_id);
CREATE TABLE IF NOT EXISTS codes (code TEXT PRIMARY KEY, approval_id TEXT NOT NULL, token TEXT NOT NULL,
  message_id TEXT NOT NULL, at REAL NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Thread:
    """How to answer one thread."""

    token: str
    root: str
    subject: str
    reply_to: tuple[str, ...]
    cc: tuple[str, ...]
    parent: str | None  # the newest person's mail: a reply goes under it
    references: tuple[str, ...]  # that mail's References


@dataclass(frozen=True, slots=True)
class Code:
    approval_id: str
    token: str
    message_id: str  # the prompt mail


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class MailStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = LocalDb(path, "email store")

    async def open(self) -> None:
        if not self._db.is_open:
            await self._db.open(_setup)

    async def close(self) -> None:
        await self._db.close()

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await self._db.run(work)

    # -- threads and their messages --------------------------------------------------------------

    async def token_of(self, message_ids: Sequence[str]) -> str | None:
        """The thread of the first of ``message_ids`` known here."""

        def find(db: sqlite3.Connection) -> str | None:
            for message_id in message_ids:
                row = db.execute("SELECT token FROM messages WHERE message_id = ?", (message_id,)).fetchone()
                if row is not None:
                    return str(row[0])
            return None

        return await self._run(find)

    async def thread(self, token: str) -> Thread | None:
        row = await self._run(
            lambda db: db.execute(
                "SELECT root, subject, reply_to, cc, parent, refs FROM threads WHERE token = ?", (token,)
            ).fetchone()
        )
        if row is None:
            return None
        root, subject, reply_to, cc, parent, refs = row
        return Thread(
            token,
            root,
            subject,
            tuple(json.loads(reply_to)),
            tuple(json.loads(cc)),
            parent,
            tuple(json.loads(refs)),
        )

    async def save_thread(self, thread: Thread, *, message_id: str | None = None) -> None:
        """Record (or update) how to answer ``thread``; ``message_id`` belongs to it."""

        def save(db: sqlite3.Connection) -> None:
            now = time.time()
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO threads (token, root, subject, reply_to, cc, parent, refs, at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        thread.token,
                        thread.root,
                        thread.subject,
                        json.dumps(thread.reply_to),
                        json.dumps(thread.cc),
                        thread.parent,
                        json.dumps(thread.references),
                        now,
                    ),
                )
                for known in {thread.root, *([message_id] if message_id else [])}:
                    db.execute(
                        "INSERT OR IGNORE INTO messages (message_id, token, at) VALUES (?, ?, ?)",
                        (known, thread.token, now),
                    )

        await self._run(save)

    # -- what the bot sent -----------------------------------------------------------------------

    async def sent(self, key: str, since: float = 0.0) -> str | None:
        """The Message-ID of the mail sent with ``key`` (since ``since``, Unix time)."""
        row = await self._run(
            lambda db: db.execute(
                "SELECT message_id FROM sent WHERE key = ? AND at >= ?", (key, since)
            ).fetchone()
        )
        return str(row[0]) if row is not None else None

    async def sent_digest(self, message_id: str) -> str | None:
        row = await self._run(
            lambda db: db.execute("SELECT digest FROM sent WHERE message_id = ?", (message_id,)).fetchone()
        )
        return str(row[0]) if row is not None else None

    async def remember_sent(self, key: str, token: str, message_id: str, text: str) -> None:
        def save(db: sqlite3.Connection) -> None:
            now = time.time()
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO sent (key, token, message_id, digest, at) VALUES (?, ?, ?, ?, ?)",
                    (key, token, message_id, digest(text), now),
                )
                db.execute(
                    "INSERT OR IGNORE INTO messages (message_id, token, at) VALUES (?, ?, ?)",
                    (message_id, token, now),
                )

        await self._run(save)

    # -- approval codes --------------------------------------------------------------------------

    async def remember_code(self, code: str, approval_id: str, token: str, message_id: str) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO codes (code, approval_id, token, message_id, at) VALUES (?, ?, ?, ?, ?)",
                (code, approval_id, token, message_id, time.time()),
            )
        )

    async def code(self, code: str) -> Code | None:
        row = await self._run(
            lambda db: db.execute(
                "SELECT approval_id, token, message_id FROM codes WHERE code = ?", (code,)
            ).fetchone()
        )
        return Code(str(row[0]), str(row[1]), str(row[2])) if row is not None else None


def _setup(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)
    old = time.time() - KEEP_S
    for table in ("threads", "messages", "sent", "codes"):
        db.execute(f"DELETE FROM {table} WHERE at < ?", (old,))  # our own table names
