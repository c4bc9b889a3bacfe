"""The remember / search_memory tools, run through the ToolRegistry with a ToolContext."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from netclaw.errors import JournalError
from netclaw.messages import ToolCall
from netclaw.persistence import Memory, NewMemory, SqliteMemoryStore, prepare_database
from netclaw.tools import ToolContext, ToolRegistry, memory_tools

PERSONAL = ToolContext("cli:me", "personal")
TEAM = ToolContext("slack:T1:C1:1.0", "team")
PUBLIC = ToolContext("webhook:site:1", "public")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMemoryStore]:
    path = tmp_path / "netclaw.db"
    prepare_database(path)
    s = await SqliteMemoryStore(path).open()
    yield s
    await s.close()


@pytest.fixture
def registry(store: SqliteMemoryStore) -> ToolRegistry:
    return ToolRegistry(memory_tools(store))


def call(name: str, args: dict[str, Any] | str, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))


async def run(
    registry: ToolRegistry, name: str, args: dict[str, Any] | str, ctx: ToolContext
) -> tuple[str, bool]:
    result = await registry.run(call(name, args), timeout_s=5, context=ctx)
    return result.content, result.is_error


def test_schemas(registry: ToolRegistry) -> None:
    schemas = {s.name: s for s in registry.schemas()}
    assert set(schemas) == {"remember", "search_memory"}
    remember = schemas["remember"].parameters
    assert remember["required"] == ["text"]
    assert remember["properties"]["kind"]["enum"] == ["fact", "decision", "action_item", "preference", "note"]
    search = schemas["search_memory"].parameters
    assert search["required"] == ["query"]
    assert (search["properties"]["limit"]["minimum"], search["properties"]["limit"]["maximum"]) == (1, 10)


async def test_remember_stores_with_the_context(registry: ToolRegistry, store: SqliteMemoryStore) -> None:
    content, is_error = await run(
        registry, "remember", {"text": "The user's dog is called Biscuit", "kind": "fact"}, PERSONAL
    )
    assert (content, is_error) == ("remembered", False)
    found = await store.search("dog biscuit")
    assert [(m.text, m.kind, m.session_id, m.audience) for m in found] == [
        ("The user's dog is called Biscuit", "fact", "cli:me", "personal")
    ]


async def test_remember_defaults_to_fact_and_knows_duplicates(
    registry: ToolRegistry, store: SqliteMemoryStore
) -> None:
    assert await run(registry, "remember", {"text": "Standup moved to 9:30"}, TEAM) == ("remembered", False)
    assert await run(registry, "remember", {"text": "standup moved to 9:30."}, TEAM) == (
        "already remembered",
        False,
    )
    [memory] = await store.search("standup", audience="team")
    assert memory.kind == "fact"
    # The same words in another audience are a separate memory.
    assert await run(registry, "remember", {"text": "Standup moved to 9:30"}, PERSONAL) == (
        "remembered",
        False,
    )


async def test_search_memory_returns_formatted_results(registry: ToolRegistry) -> None:
    await run(registry, "remember", {"text": "Deploys freeze on Fridays", "kind": "decision"}, TEAM)
    await run(registry, "remember", {"text": "Alice reviews all deploys", "kind": "note"}, TEAM)
    await run(registry, "remember", {"text": "Buy milk", "kind": "action_item"}, TEAM)
    content, is_error = await run(registry, "search_memory", {"query": "deploy freeze friday"}, TEAM)
    assert not is_error
    lines = content.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("- #1 [decision] Deploys freeze on Fridays (saved ")
    assert lines[1].startswith("- #2 [note] Alice reviews all deploys")
    content, _ = await run(registry, "search_memory", {"query": "deploys", "limit": 1}, TEAM)
    assert len(content.splitlines()) == 1


async def test_search_memory_is_scoped_to_the_context_audience(registry: ToolRegistry) -> None:
    await run(registry, "remember", {"text": "My bank PIN hint is the cat's birthday"}, PERSONAL)
    assert await run(registry, "search_memory", {"query": "bank PIN"}, TEAM) == ("no memories match", False)
    content, _ = await run(registry, "search_memory", {"query": "bank PIN"}, PERSONAL)
    assert "bank PIN hint" in content


async def test_search_memory_with_hostile_query_does_not_fail(registry: ToolRegistry) -> None:
    for query in ['"', "NEAR(", "*", "a:b", "-x", "the of and"]:
        content, is_error = await run(registry, "search_memory", {"query": query}, PERSONAL)
        assert not is_error, content


@pytest.mark.parametrize(
    ("name", "args"),
    [("remember", {"text": "A secret to plant"}), ("search_memory", {"query": "secret"})],
)
async def test_public_sessions_are_refused(
    registry: ToolRegistry, store: SqliteMemoryStore, name: str, args: dict[str, Any]
) -> None:
    content, is_error = await run(registry, name, args, PUBLIC)
    assert is_error
    assert "not available in public sessions" in content
    assert await store.count() == 0


@pytest.mark.parametrize(
    ("name", "args", "mentions"),
    [
        ("remember", {}, "text"),
        ("remember", {"text": ""}, "text"),
        ("remember", {"text": "   "}, "text"),
        ("remember", {"text": 42}, "text"),
        ("remember", {"text": "x", "kind": "gossip"}, "kind"),
        ("remember", {"text": "x", "kind": None}, "kind"),
        ("remember", '{"text": ', "JSON"),
        ("search_memory", {}, "query"),
        ("search_memory", {"query": ["a"]}, "query"),
        ("search_memory", {"query": "x", "limit": 0}, "limit"),
        ("search_memory", {"query": "x", "limit": 11}, "limit"),
        ("search_memory", {"query": "x", "limit": "3"}, "limit"),
        ("search_memory", {"query": "x", "limit": True}, "limit"),
    ],
)
async def test_invalid_arguments_are_error_results(
    registry: ToolRegistry, store: SqliteMemoryStore, name: str, args: dict[str, Any] | str, mentions: str
) -> None:
    content, is_error = await run(registry, name, args, PERSONAL)
    assert is_error
    assert mentions in content
    assert await store.count() == 0


async def test_the_default_context_is_personal(registry: ToolRegistry, store: SqliteMemoryStore) -> None:
    # Callers that pass no context (the actor, for now) act as a personal session.
    result = await registry.run(call("remember", {"text": "Default context fact"}), timeout_s=5)
    assert (result.content, result.is_error) == ("remembered", False)
    [memory] = await store.search("default context")
    assert (memory.session_id, memory.audience) == ("", "personal")


class BrokenStore:
    async def add(
        self,
        items: Sequence[NewMemory],
        *,
        session_id: str,
        audience: str,
        turn: int | None = None,
        scope: str | None = None,
    ) -> list[Memory]:
        raise JournalError("database is locked")

    async def search(
        self,
        query: str,
        *,
        audience: str | None = None,
        scope: str | None = None,
        limit: int = 5,
        used: bool = False,
    ) -> list[Memory]:
        raise JournalError("database is locked")

    async def count(self) -> int:
        return 0

    async def close(self) -> None:
        return None


async def test_store_failures_are_error_results() -> None:
    registry = ToolRegistry(memory_tools(BrokenStore()))
    for name, args in [("remember", {"text": "x"}), ("search_memory", {"query": "x"})]:
        content, is_error = await run(registry, name, args, TEAM)
        assert is_error
        assert "memory is unavailable" in content and "database is locked" in content


def test_memory_kinds_are_one_list_everywhere() -> None:
    # The store, the `remember` tool and the memory flush agree on what a kind may be: a
    # flushed "note" stays a note instead of becoming a "fact", and every kind is storable.
    from netclaw.history import FLUSH_KINDS, MEMORY_KINDS, parse_flush

    for kind in MEMORY_KINDS:
        assert NewMemory("text", kind).kind == kind
    assert set(FLUSH_KINDS) <= set(MEMORY_KINDS)
    assert parse_flush('[{"text": "the backup runs at 2am", "kind": "note"}]') == [
        ("the backup runs at 2am", "note")
    ]
    remember = next(t for t in memory_tools(None) if t.name == "remember")  # type: ignore[arg-type]
    assert remember.parameters["properties"]["kind"]["enum"] == list(MEMORY_KINDS)


async def test_remember_replaces_the_memory_the_model_names(
    registry: ToolRegistry, store: SqliteMemoryStore
) -> None:
    """A change the store cannot tell from the words alone ("the standup moved"), told by
    the model: the old memory is kept but no longer recalled, with where the change came from."""
    await run(registry, "remember", {"text": "The team standup is at 9:30"}, TEAM)
    content, _ = await run(registry, "search_memory", {"query": "standup"}, TEAM)
    assert content.startswith("- #1 [fact] The team standup is at 9:30")
    moved = ToolContext("slack:T1:C1:2.0", "team", turn=3)
    content, is_error = await run(
        registry, "remember", {"text": "Standups happen after lunch from now on", "replaces": 1}, moved
    )
    assert (content, is_error) == ("remembered as #2; it updates #1, which is no longer recalled", False)
    content, _ = await run(registry, "search_memory", {"query": "standup"}, TEAM)
    assert "9:30" not in content and "#2 [fact] Standups happen after lunch" in content
    (old,) = [m for m in await store.listing() if m.id == 1]
    assert old.superseded_by == 2


async def test_remember_never_replaces_another_audiences_memory(
    registry: ToolRegistry, store: SqliteMemoryStore
) -> None:
    await run(registry, "remember", {"text": "The user's PIN hint is their cat"}, PERSONAL)
    content, is_error = await run(registry, "remember", {"text": "Nothing to see", "replaces": 1}, TEAM)
    assert (content, is_error) == (
        "remembered as #2; #1 was not replaced (no such current memory here)",
        False,
    )
    assert all(m.superseded_by is None for m in await store.listing())


@pytest.mark.parametrize("replaces", [0, -3, "1", True, 1.5])
async def test_a_bad_replaces_is_refused_naming_it(registry: ToolRegistry, replaces: Any) -> None:
    content, is_error = await run(registry, "remember", {"text": "x", "replaces": replaces}, PERSONAL)
    assert is_error and "'replaces'" in content
