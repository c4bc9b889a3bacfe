"""What the Teams channel remembers across restarts, in small SQLite files in the data
directory (``teams/teams.db``, ``teams/posted.db``):

- **Conversation references**: for every chat and channel an authenticated activity came
  from, where it is (service URL, conversation id, tenant). A proactive message — a
  reminder, a sub-agent's report, a reply the outbox owes after a crash — needs them, and
  Teams sends them only with an activity; they are written before the activity is admitted,
  so a session's conversation is always known after a restart. Kept in memory too (the
  renderer maps session ids to conversations without I/O).
- **What the bot posted, by idempotency key** (:class:`adapters.chat.PostedMessages`, as
  Telegram keeps it): the Bot Connector takes no client nonce and a bot cannot read a
  conversation's history, so this record is how a retried post edits the message it
  already made instead of making a second, and how the outbox finds a reply a crashed
  process posted. A post whose answer was lost is not covered.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from adapters.chat import LocalDb, PostedMessages
from adapters.teams._port import Reference


class TeamsStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = LocalDb(path, "Teams store")
        self._references: dict[str, Reference] = {}
        self.posted = PostedMessages(path.parent / "posted.db")  # Teams takes no client nonce

    async def open(self) -> None:
        if not self._db.is_open:
            self._references = await self._db.open(_setup)
        await self.posted.open()

    async def close(self) -> None:
        await self.posted.close()
        await self._db.close()

    def reference(self, key: str) -> Reference | None:
        return self._references.get(key)

    def references(self) -> list[Reference]:
        return list(self._references.values())

    async def remember_reference(self, reference: Reference) -> None:
        """Where the chat or channel is now (a service URL can move: the newest wins)."""
        if self._references.get(reference.key) == reference:
            return
        await self._db.run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO conversations (key, conversation_id, service_url, tenant_id, kind, "
                "bot_id) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    reference.key,
                    reference.conversation_id,
                    reference.service_url,
                    reference.tenant_id,
                    reference.kind,
                    reference.bot_id,
                ),
            )
        )
        self._references[reference.key] = reference


def _setup(db: sqlite3.Connection) -> dict[str, Reference]:
    db.execute(
        "CREATE TABLE IF NOT EXISTS conversations (key TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, "
        "service_url TEXT NOT NULL, tenant_id TEXT NOT NULL, kind TEXT NOT NULL, bot_id TEXT NOT NULL)"
    )
    rows = db.execute(
        "SELECT conversation_id, service_url, tenant_id, kind, bot_id FROM conversations"
    ).fetchall()
    references = {}
    for conversation_id, service_url, tenant_id, kind, bot_id in rows:
        reference = Reference(conversation_id, service_url, tenant_id, kind, bot_id)
        references[reference.key] = reference
    return references
