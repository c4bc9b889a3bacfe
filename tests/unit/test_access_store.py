"""The audit table and named API tokens on both backends (a SQLite file, a real
PostgreSQL): tokens found by their hash only, the trail derived from the journal plus the
table, a session's trail kept (once) when its journal is copied before an erase."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from netclaw.errors import InvalidInput
from netclaw.messages import ChatMessage, ToolCall
from netclaw.persistence import SqliteAccessStore, hash_token
from netclaw.security.audit import AuditEntry
from netclaw.sessions._core.journal.codec import encode
from netclaw.sessions._core.journal.events import InputAdmitted, StepRecorded, TurnStarted
from tests.unit.test_stores import Db, db  # noqa: F401 - the backend fixture


@pytest.fixture
async def store(db: Db) -> AsyncIterator[Any]:  # noqa: F811
    if db.backend == "sqlite":
        found: Any = await SqliteAccessStore(db.where).open()
    else:
        from netclaw.persistence.postgres import PostgresAccessStore, prepare_postgres

        prepare_postgres(db.where)
        found = await PostgresAccessStore(db.where).open()
    yield found
    await found.close()


async def test_tokens_are_kept_as_hashes_and_found_by_them(store: Any) -> None:
    token = await store.add_token("ci", "reader")
    with pytest.raises(InvalidInput, match="exists"):
        await store.add_token("ci", "admin")
    assert [t.last_used for t in await store.tokens()] == [None]
    found = await store.token(token)
    assert (found.name, found.role) == ("ci", "reader")
    # Using a token is remembered (at most once a minute), so an unused one can be spotted.
    (listed,) = await store.tokens()
    assert listed.last_used is not None and listed.last_used >= listed.created_at
    assert (await store.token(token)).last_used == listed.last_used
    assert await store.token(token + "x") is None
    rows = await store._fetch("SELECT hash FROM api_tokens")  # noqa: SLF001 - what is stored
    assert rows == [(hash_token(token),)]
    assert [t.name for t in await store.tokens()] == ["ci"]
    assert await store.remove_token("ci") and not await store.remove_token("ci")
    assert await store.token(token) is None


async def journal(store: Any, session: str, *events: object) -> None:
    for seq, event in enumerate(events, 1):
        kind, payload = encode(event)  # type: ignore[arg-type]
        await store._execute(  # noqa: SLF001 - the journal's rows, as it writes them
            "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?, ?, ?, ?, ?)",
            (session, seq, kind, payload, 100.0 + seq),
        )


async def test_the_trail_is_the_journal_and_the_table_each_event_once(store: Any) -> None:
    call = ToolCall("c1", "current_time", "{}")
    await journal(
        store,
        "cli:a",
        InputAdmitted(ChatMessage("u1", "user", "time?", 0.0, speaker="token:ci", speaker_role="reader")),
        TurnStarted(1, "u1"),
        StepRecorded(
            1,
            (
                ChatMessage("a1", "assistant", "", 0.0, tool_calls=(call,)),
                ChatMessage("t1", "tool", "noon", 0.0, tool_call_id="c1", name="current_time"),
            ),
        ),
    )
    await store.record(AuditEntry(50.0, "config_reload", "daemon", None, {"applied": ["agent"]}))
    trail = await store.entries()
    assert [(e.kind, e.actor) for e in trail] == [("config_reload", "daemon"), ("tool_run", "token:ci")]
    assert await store.keep_trail_of("cli:a") == 1
    assert await store.keep_trail_of("cli:a") == 1  # copied again: still once
    assert [e.kind for e in await store.entries(session_id="cli:a")] == ["tool_run"]
    await store._execute("DELETE FROM events WHERE persistence_id = ?", ("cli:a",))  # noqa: SLF001 - an erase
    kept = await store.entries(session_id="cli:a")
    assert [(e.kind, e.actor, e.detail["tool"]) for e in kept] == [("tool_run", "token:ci", "current_time")]
    assert [e.kind for e in await store.entries(since=101.0)] == ["tool_run"]
