"""The durable memory store: schema, dedup, audience-scoped FTS5 search, recall formatting."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netclaw.errors import JournalError
from netclaw.persistence import (
    Memory,
    MemoryEditRefused,
    MemoryStore,
    NewMemory,
    SqliteMemoryStore,
    format_recall,
    load_embedder,
    load_migrations,
    prepare_database,
)
from netclaw.persistence._memory import fts_query, normalise


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "netclaw.db"
    prepare_database(path)
    return path


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """The store on each backend: the same tests hold for both."""
    s: MemoryStore
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        prepare_database(path)
        s = await SqliteMemoryStore(path).open()
    else:
        from netclaw.persistence.postgres import PostgresMemoryStore

        s = await PostgresMemoryStore(request.getfixturevalue("pg_dsn")).open()
    yield s
    await s.close()


def facts(*texts: str, kind: str = "fact") -> list[NewMemory]:
    return [NewMemory(t, kind) for t in texts]


# -- schema --------------------------------------------------------------------------------


def test_migrations_create_the_memory_tables(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    assert prepare_database(path) == [m.version for m in load_migrations()]  # all, incl. 0002
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert {"events", "memories", "memories_fts", "memories_audience_norm"} <= names
        assert {"memories_fts_insert", "memories_fts_delete"} <= names
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()[0]
        assert "fts5" in sql.lower() and "porter unicode61" in sql
    assert prepare_database(path) == []


def test_the_kind_check_constraint_holds(db: Path) -> None:
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO memories (text, kind, session_id, audience, created, norm)"
            " VALUES ('x', 'gossip', 's', 'personal', 0, 'x')"
        )


def test_deleting_a_memory_removes_it_from_the_index(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO memories (text, kind, session_id, audience, created, norm)"
            " VALUES ('zebra crossing', 'fact', 's', 'personal', 0, 'zebra crossing')"
        )
        hits = "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH 'zebra'"
        assert conn.execute(hits).fetchone()[0] == 1
        conn.execute("DELETE FROM memories")
        assert conn.execute(hits).fetchone()[0] == 0


async def test_open_before_migrations_is_a_journal_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError):
        await SqliteMemoryStore(tmp_path / "never-prepared.db").open()


async def test_a_closed_store_raises_journal_error(db: Path) -> None:
    s = await SqliteMemoryStore(db).open()
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(JournalError, match="closed"):
        await s.search("anything")
    with pytest.raises(JournalError):
        await s.add(facts("x"), session_id="s", audience="personal")


# -- add -----------------------------------------------------------------------------------


async def test_add_returns_the_stored_memories(store: MemoryStore) -> None:
    stored = await store.add(
        [NewMemory("  The user lives in Lisbon.  ", "fact"), NewMemory("Ship v2 on Friday", "decision")],
        session_id="cli:one",
        audience="personal",
    )
    assert [(m.text, m.kind, m.session_id, m.audience) for m in stored] == [
        ("The user lives in Lisbon.", "fact", "cli:one", "personal"),
        ("Ship v2 on Friday", "decision", "cli:one", "personal"),
    ]
    assert stored[0].id < stored[1].id
    assert stored[0].created > 0
    assert await store.count() == 2


async def test_blank_texts_are_skipped_and_long_ones_truncated(store: MemoryStore) -> None:
    stored = await store.add(facts("", "   \n\t", "x" * 5000), session_id="s", audience="personal")
    assert len(stored) == 1
    assert stored[0].text == "x" * 2000
    assert await store.count() == 1
    assert await store.add([], session_id="s", audience="personal") == []


def test_unknown_kind_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="gossip"):
        NewMemory("x", "gossip")


async def test_identical_facts_are_stored_once_per_audience(store: MemoryStore) -> None:
    first = await store.add(facts("The user prefers dark mode."), session_id="a", audience="personal")
    assert len(first) == 1
    variants = facts(
        "The user prefers dark mode.",
        "the user prefers dark mode",
        "  THE   USER prefers\ndark mode!! ",
        "The user prefers dark mode...",
    )
    assert await store.add(variants, session_id="b", audience="personal") == []
    # Duplicates within one batch collapse too.
    again = await store.add(facts("Coffee, black", "coffee, BLACK."), session_id="b", audience="personal")
    assert [m.text for m in again] == ["Coffee, black"]
    # Another audience keeps its own copy.
    team = await store.add(facts("The user prefers dark mode."), session_id="c", audience="team")
    assert len(team) == 1 and team[0].audience == "team"
    assert await store.count() == 3


def test_normalise() -> None:
    assert normalise("  Hello,   World!! ") == "hello, world"
    assert normalise("Straße.") == normalise("STRASSE")
    assert normalise("?!") == "?!"  # punctuation-only keeps a key


async def test_concurrent_adds_do_not_fail(store: MemoryStore) -> None:
    results = await asyncio.gather(
        *(
            store.add(facts(f"fact number {i}", "shared fact"), session_id=f"s{i}", audience="personal")
            for i in range(20)
        )
    )
    assert sum(len(r) for r in results) == 21  # 20 distinct + "shared fact" once
    assert await store.count() == 21
    ids = [m.id for r in results for m in r]
    assert len(set(ids)) == 21


async def test_edits_and_adds_cancelled_at_any_point_leave_no_transaction_open(store: MemoryStore) -> None:
    """A client that hangs up cancels its request's edit wherever it is; the next write still works
    (an interrupted BEGIN once left the connection inside a transaction for good)."""
    [first] = await store.add(facts("the first fact"), session_id="s", audience="personal")
    for ticks in range(12):
        edit = asyncio.create_task(store.edit(first.id, f"the first fact, reworded {ticks}"))
        add = asyncio.create_task(
            store.add(facts(f"added fact {ticks}"), session_id="s", audience="personal")
        )
        for _ in range(ticks):  # no wait for a condition: the cancel lands after this many loop ticks
            await asyncio.sleep(0)
        edit.cancel()
        add.cancel()
        await asyncio.gather(edit, add, return_exceptions=True)
    edited = await store.edit(first.id, "the first fact, settled")
    assert edited is not None and edited.text == "the first fact, settled"
    assert [m.text for m in await store.add(facts("one more fact"), session_id="s", audience="personal")] == [
        "one more fact"
    ]


async def test_memories_survive_close_and_reopen(db: Path) -> None:
    s = await SqliteMemoryStore(db).open()
    await s.add(facts("The deploy key rotates every ninety days"), session_id="s", audience="team")
    await s.close()
    reopened = await SqliteMemoryStore(db).open()
    try:
        assert await reopened.count() == 1
        found = await reopened.search("when does the deploy key rotate?", audience="team")
        assert [m.text for m in found] == ["The deploy key rotates every ninety days"]
        # Still deduplicated against what was stored before the restart.
        again = facts("the deploy key rotates every ninety days.")
        assert await reopened.add(again, session_id="t", audience="team") == []
    finally:
        await reopened.close()


# -- search --------------------------------------------------------------------------------


async def test_search_ranks_the_most_relevant_first(store: MemoryStore) -> None:
    await store.add(
        facts(
            "The user's favourite database is PostgreSQL",
            "Backups of the PostgreSQL database run nightly; the PostgreSQL replica is in Frankfurt",
            "The office plants need water on Mondays",
            "Lunch is at noon",
        ),
        session_id="s",
        audience="personal",
    )
    found = await store.search("Where is the PostgreSQL replica?", audience="personal")
    assert found[0].text.startswith("Backups of the PostgreSQL")
    assert {m.text for m in found} == {
        "Backups of the PostgreSQL database run nightly; the PostgreSQL replica is in Frankfurt",
        "The user's favourite database is PostgreSQL",
    }
    # Porter stemming: "watering" finds "water".
    assert [m.text for m in await store.search("watering plants")] == [
        "The office plants need water on Mondays"
    ]
    assert await store.search("kubernetes") == []


async def test_search_respects_the_limit(store: MemoryStore) -> None:
    await store.add(
        facts(*(f"project alpha milestone {i}" for i in range(8))), session_id="s", audience="team"
    )
    assert len(await store.search("alpha", audience="team")) == 5
    assert len(await store.search("alpha", audience="team", limit=2)) == 2
    assert await store.search("alpha", audience="team", limit=0) == []


async def test_search_is_audience_scoped(store: MemoryStore) -> None:
    await store.add(facts("Salary negotiation notes for Alice"), session_id="cli:me", audience="personal")
    await store.add(facts("Alice owns the billing service"), session_id="slack:x", audience="team")
    await store.add(facts("Alice is our public spokesperson"), session_id="webhook:y", audience="public")
    assert [m.text for m in await store.search("alice", audience="team")] == [
        "Alice owns the billing service"
    ]
    assert [m.text for m in await store.search("alice", audience="personal")] == [
        "Salary negotiation notes for Alice"
    ]
    assert [m.audience for m in await store.search("alice", audience="public")] == ["public"]
    assert await store.search("alice", audience="nobody") == []
    assert len(await store.search("alice")) == 3  # no audience: everything (admin, tests)


HOSTILE = [
    '"',
    '""',
    '"unterminated phrase',
    "NEAR(",
    "NEAR(a b, 2)",
    "*",
    "data*",
    "a:b",
    "text:secret",
    "-x",
    "NOT x",
    "x AND",
    "OR OR OR",
    "^start",
    "(((",
    "col:{text kind}",
    "the and of to a",
    "",
    "   ",
    "\x00\x01",
    "🦀 émoji ünïcode 日本語",
    "q" * 10_000,
    " ".join(f"word{i}" for i in range(3000)),
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
async def test_hostile_queries_never_raise(store: MemoryStore, query: str) -> None:
    await store.add(
        facts("near the secret data center", "x marks the spot"), session_id="s", audience="personal"
    )
    found = await store.search(query, audience="personal")
    assert isinstance(found, list)


async def test_operators_in_the_query_are_plain_words(store: MemoryStore) -> None:
    await store.add(facts("Meet NEAR the station", "Nothing here"), session_id="s", audience="personal")
    assert [m.text for m in await store.search("NEAR(")] == ["Meet NEAR the station"]
    assert await store.search("the and of to a") == []  # only stop words: nothing to look for


def test_fts_query_is_quoted_deduplicated_and_capped() -> None:
    assert fts_query('text:"secret" NEAR(x* -y') == '"text" OR "secret" OR "near"'
    assert fts_query("Deploy deploy DEPLOY keys") == '"deploy" OR "keys"'
    assert fts_query("the a of") is None
    assert fts_query("") is None
    many = fts_query(" ".join(f"term{i}" for i in range(100)))
    assert many is not None and many.count(" OR ") == 15


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=300))
async def test_any_text_is_a_safe_query(db: Path, query: str) -> None:
    s = await SqliteMemoryStore(db).open()
    try:
        assert isinstance(await s.search(query, audience="personal"), list)
    finally:
        await s.close()


# -- recall formatting -----------------------------------------------------------------------


def mem(i: int, text: str, kind: str = "fact") -> Memory:
    return Memory(id=i, text=text, kind=kind, session_id="s", audience="personal", created=0.0)


def test_format_recall_lists_memories_in_order() -> None:
    block = format_recall([mem(1, "The user is vegetarian", "preference"), mem(2, "Launch is\n on May 3")])
    assert block == (
        "Relevant memories (from earlier conversations):\n"
        "- [preference] The user is vegetarian\n"
        "- [fact] Launch is on May 3"
    )


def test_format_recall_is_none_when_empty() -> None:
    assert format_recall([]) is None
    assert format_recall([mem(1, "x" * 500)], char_budget=100) is None


def test_format_recall_keeps_whole_items_within_the_budget() -> None:
    items = [mem(i, f"memory number {i} " + "y" * 60) for i in range(50)]
    for budget in (150, 200, 500, 1500):
        block = format_recall(items, char_budget=budget)
        assert block is not None
        assert len(block) <= budget
        lines = block.splitlines()[1:]
        assert lines, budget
        for line in lines:  # whole items only: every line is one complete memory
            assert any(line == f"- [fact] {m.text}" for m in items)
    # An item too big for the budget is left out; smaller ones after it still fit.
    block = format_recall([mem(1, "z" * 2000), mem(2, "small")], char_budget=200)
    assert block is not None and block.endswith("- [fact] small") and "zzz" not in block


async def test_a_persons_search_keeps_the_words_recall_drops(store: MemoryStore) -> None:
    """`netclaw memory list --q hello` finds what says hello; recall (a chat message as the
    query) still ignores such words."""
    await store.add(
        [NewMemory("the user says hello to everyone each morning", "preference")],
        session_id="cli:a",
        audience="personal",
    )
    listed = await store.listing(query="hello")
    assert [m.text for m in listed] == ["the user says hello to everyone each morning"]
    assert await store.search("hello", audience="personal") == []  # recall: a stop word alone finds nothing


# -- by meaning: hybrid recall, memories that update ------------------------------------------

EMBEDDER = load_embedder("minilm-l6")
ANNA = "Anna, the user's sister, works as a nurse at St. Mary's hospital."
ANNA_NOW = "Anna, the user's sister, now works as a nurse at the city hospital in Leeds."
BUDGET = "The monthly grocery budget is 400 pounds."
SHOPPING = "How much can we spend on food shopping each month?"
# Memories that share a (stemmed) word with a question about something else entirely.
SHARED_WORDS = ("Marta Kowalski is on parental leave until March.", "The user gives blood every four months.")
UNRELATED = ("Write a haiku about autumn leaves.", "Give me a regex for an email address.")


async def open_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, embeddings: str, cap: int | None = None
) -> MemoryStore:
    embedder = load_embedder(embeddings)
    if kind == "sqlite":
        path = tmp_path / "store.db"
        if not path.exists():
            prepare_database(path)
        return await SqliteMemoryStore(path, embedder=embedder, max_per_audience=cap).open()
    from netclaw.persistence.postgres import PostgresMemoryStore

    return await PostgresMemoryStore(
        request.getfixturevalue("pg_dsn"), embedder=embedder, max_per_audience=cap
    ).open()


@pytest.fixture(params=["sqlite", "postgres"])
async def hybrid(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """The store with the default (offline) embeddings, on each backend."""
    s = await open_store(request.param, request, tmp_path, "minilm-l6")
    yield s
    await s.close()


async def test_recall_finds_a_memory_by_meaning_not_only_by_its_words(hybrid: MemoryStore) -> None:
    await hybrid.add(
        facts(ANNA, BUDGET, "Production runs on the host kestrel-2."), session_id="cli:a", audience="personal"
    )
    found = await hybrid.search(SHOPPING, audience="personal")
    assert [m.text for m in found] == [BUDGET]  # no word in common
    assert [m.text for m in await hybrid.listing(query="what does my sister do for a living")] == [ANNA]


async def test_recall_injects_nothing_unrelated(hybrid: MemoryStore) -> None:
    """A question that shares a word with a memory, but not its meaning, recalls nothing
    (keyword recall alone would inject it)."""
    await hybrid.add(facts(*SHARED_WORDS, ANNA), session_id="cli:a", audience="personal")
    for question in UNRELATED:
        assert await hybrid.search(question, audience="personal") == [], question


async def test_meaning_never_crosses_an_audience_or_a_scope(hybrid: MemoryStore) -> None:
    await hybrid.add(facts(ANNA), session_id="slack:C1:1.0", audience="team", scope="slack:C1")
    await hybrid.add(
        facts("The user's cat is called Miso."), session_id="slack:C2:1.0", audience="team", scope="slack:C2"
    )
    assert await hybrid.search("what does my sister do for work", audience="personal") == []
    assert await hybrid.search("what does my sister do for work", audience="team", scope="slack:C2") == []
    assert [
        m.text
        for m in await hybrid.search("what does my sister do for work", audience="team", scope="slack:C1")
    ] == [ANNA]


async def test_a_near_duplicate_is_not_added_again(hybrid: MemoryStore) -> None:
    assert (
        len(
            await hybrid.add(
                facts("The user prefers green tea over coffee."), session_id="a", audience="personal"
            )
        )
        == 1
    )
    again = facts(
        "User prefers green tea over coffee",
        "the user prefers green tea over coffee!",
        "Note: THE USER PREFERS GREEN TEA OVER COFFEE",  # another extraction's casing and prefix
    )
    assert await hybrid.add(again, session_id="b", audience="personal") == []
    assert await hybrid.count() == 1


async def test_a_changed_fact_supersedes_the_old_one_with_its_provenance(hybrid: MemoryStore) -> None:
    [old] = await hybrid.add(facts(ANNA), session_id="cli:first", audience="personal", turn=2)
    [new] = await hybrid.add(facts(ANNA_NOW), session_id="cli:second", audience="personal", turn=5)
    assert new.replaces == old.id and (new.session_id, new.turn) == ("cli:second", 5)
    assert [m.text for m in await hybrid.search("Where does Anna work?", audience="personal")] == [ANNA_NOW]
    listed = {m.id: m for m in await hybrid.listing()}
    assert listed[old.id].superseded_by == new.id and listed[new.id].superseded_by is None
    assert (listed[old.id].session_id, listed[old.id].turn) == ("cli:first", 2)  # its own provenance stays
    # Another fact about Anna is a fact of its own, not a change.
    [kids] = await hybrid.add(
        facts("Anna has two children, Leo and Mia."), session_id="cli:third", audience="personal"
    )
    assert kids.replaces is None
    # The old fact told again is true again: it comes back and the newer one steps aside.
    [back] = await hybrid.add(facts(ANNA), session_id="cli:fourth", audience="personal", turn=1)
    assert (back.id, back.replaces, back.session_id) == (old.id, new.id, "cli:fourth")
    assert [m.text for m in await hybrid.search("Where does Anna work?", audience="personal", limit=1)] == [
        ANNA
    ]


async def test_a_change_in_another_audience_supersedes_nothing(hybrid: MemoryStore) -> None:
    await hybrid.add(facts(ANNA), session_id="cli:a", audience="personal")
    [team] = await hybrid.add(facts(ANNA_NOW), session_id="slack:C1:1.0", audience="team")
    assert team.replaces is None
    assert [m.text for m in await hybrid.search("Where does Anna work?", audience="personal")] == [ANNA]


async def test_forgetting_a_memory_takes_it_out_of_recall_by_meaning(hybrid: MemoryStore) -> None:
    [memory] = await hybrid.add(
        facts("The user's cat is called Miso."), session_id="cli:a", audience="personal"
    )
    assert await hybrid.delete(memory.id)
    assert await hybrid.search("What is my pet's name?", audience="personal") == []
    await hybrid.add(facts("The user's cat is called Miso."), session_id="cli:b", audience="personal")
    assert await hybrid.delete_session("cli:b") == 1
    assert await hybrid.search("What is my pet's name?", audience="personal") == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_model_change_re_embeds_in_the_background(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Memories made without embeddings (or with another model) are embedded after the
    store opens with the new one; until then they are found by their words."""
    first = await open_store(backend, request, tmp_path, "none")
    await first.add(
        facts(*(f"Note {n}: the user's cat is called Miso." for n in range(300))),
        session_id="a",
        audience="personal",
    )
    await first.add(facts(ANNA), session_id="a", audience="personal")
    assert first.embedding_status().state == "off"
    await first.close()

    second = await open_store(backend, request, tmp_path, "minilm-l6")
    try:
        assert second.embedding_status().model == "all-MiniLM-L6-v2-int8"
        assert [m.text for m in await second.search("Which hospital is Anna at?", audience="personal")] == [
            ANNA
        ]
        for _ in range(6000):  # the background task's batches (a minute's worth on a loaded machine)
            if second.embedding_status().state == "ready":
                break
            await asyncio.sleep(0.01)
        assert second.embedding_status().pending == 0
        assert [
            m.text for m in await second.search("what does my sister do for a living", audience="personal")
        ] == [ANNA]
    finally:
        await second.close()
    # Reopened with the same model: nothing left to do.
    third = await open_store(backend, request, tmp_path, "minilm-l6")
    assert third.embedding_status().state == "ready"
    await third.close()


async def test_without_embeddings_recall_is_by_keywords_as_before(store: MemoryStore) -> None:
    """What the hybrid tests above improve on: keywords alone inject what merely shares a word."""
    await store.add(facts(ANNA, BUDGET, *SHARED_WORDS), session_id="cli:a", audience="personal")
    for question in UNRELATED:
        assert await store.search(question, audience="personal") != [], question
    assert [m.text for m in await store.search("Anna's hospital", audience="personal")] == [ANNA]
    assert store.embedding_status().state == "off"


async def test_a_node_recalls_by_meaning_what_another_node_wrote(pg_dsn: str) -> None:
    """Two nodes on one PostgreSQL: each indexes what the other adds before its next
    recall, and a memory the other superseded or deleted drops out."""
    from netclaw.persistence.postgres import PostgresMemoryStore

    a = await PostgresMemoryStore(pg_dsn, embedder=EMBEDDER).open()
    b = await PostgresMemoryStore(pg_dsn, embedder=EMBEDDER).open()
    try:
        [old] = await a.add(facts(ANNA), session_id="cli:a", audience="personal")
        assert [
            m.text for m in await b.search("what does my sister do for a living", audience="personal")
        ] == [ANNA]
        [new] = await a.add(facts(ANNA_NOW), session_id="cli:a", audience="personal")
        assert new.replaces == old.id
        assert [
            m.text for m in await b.search("what does my sister do for a living", audience="personal")
        ] == [ANNA_NOW]
        await a.delete(new.id)
        assert await b.search("what does my sister do for a living", audience="personal") == []
    finally:
        await a.close()
        await b.close()


async def test_a_memory_with_every_word_of_the_query_is_found_however_much_else_it_says(
    hybrid: MemoryStore,
) -> None:
    """Its vector is mostly the rest of its words; the query's words are all in it: found."""
    entry = "Runbook entry 3: " + " ".join(f"step3x{j} verify host{j}" for j in range(40))
    await hybrid.add(facts(entry, ANNA), session_id="cli:a", audience="personal")
    assert [m.text for m in await hybrid.search("runbook", audience="personal")] == [entry]
    assert [m.text for m in await hybrid.listing(query="runbook entry")] == [entry]


# -- caps and recency -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("embeddings", ["minilm-l6", "none"])
async def test_an_audience_over_its_cap_forgets_what_was_least_recently_told_or_recalled(
    backend: str, embeddings: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    s = await open_store(backend, request, tmp_path, embeddings, cap=3)
    try:
        tea, jazz, cat = "The user drinks green tea.", "The user plays jazz piano.", "The cat is called Miso."
        for text in (tea, jazz, cat):
            await s.add(facts(text), session_id="cli:a", audience="personal")
        await s.add(facts("The team deploys on Tuesdays."), session_id="cli:a", audience="team")
        # The oldest is told again, the next oldest is recalled into a turn: both are fresh now.
        await s.add(facts(tea), session_id="cli:b", audience="personal")
        assert [m.text for m in await s.search("Which piano music?", audience="personal", used=True)] == [
            jazz
        ]
        added = await s.add(facts("Anna is a nurse."), session_id="cli:b", audience="personal")
        assert [m.text for m in added] == ["Anna is a nurse."]
        live = {m.text for m in await s.listing(audience="personal")}
        assert live == {tea, jazz, "Anna is a nurse."}  # the cat: least recently told or recalled
        assert await s.search("What is the cat called?", audience="personal") == []
        assert [m.text for m in await s.listing(audience="team")] == ["The team deploys on Tuesdays."]
    finally:
        await s.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_recalls_use_is_saved_and_counts_after_a_restart(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    s = await open_store(backend, request, tmp_path, "minilm-l6", cap=2)
    try:
        await s.add(facts("The user drinks green tea."), session_id="a", audience="personal")
        await s.add(facts("The user plays jazz piano."), session_id="a", audience="personal")
        assert await s.search("green tea", audience="personal", used=True)
        assert await s.search("green tea", audience="personal", used=True)  # saved once a day: no write
    finally:
        await s.close()
    # Reopened: the tea's use is in the database, so the jazz (older use) goes first.
    s = await open_store(backend, request, tmp_path, "minilm-l6", cap=2)
    try:
        await s.add(facts("Anna is a nurse."), session_id="b", audience="personal")
        assert {m.text for m in await s.listing(audience="personal")} == {
            "The user drinks green tea.",
            "Anna is a nurse.",
        }
    finally:
        await s.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_person_rewords_a_memory_and_recall_follows_the_new_wording(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    s = await open_store(backend, request, tmp_path, "minilm-l6")
    try:
        [anna] = await s.add(facts(ANNA), session_id="cli:a", audience="personal", turn=4)
        [budget] = await s.add(facts(BUDGET), session_id="cli:a", audience="personal")
        edited = await s.edit(anna.id, "  Anna, the user's sister, is a firefighter in Leeds.  ")
        assert edited is not None
        assert (edited.id, edited.text, edited.session_id, edited.turn) == (
            anna.id,
            "Anna, the user's sister, is a firefighter in Leeds.",
            "cli:a",
            4,
        )
        found = await s.search("Which of my relatives works for the fire brigade?", audience="personal")
        assert [m.id for m in found] == [anna.id]  # by meaning: the new vector
        assert [m.text for m in await s.search("St. Mary's hospital nurse", audience="personal")] == []
        with pytest.raises(MemoryEditRefused, match=f"memory {budget.id} of the same audience") as refused:
            await s.edit(anna.id, "the monthly grocery budget is 400 pounds")
        assert refused.value.conflict == budget.id
        with pytest.raises(MemoryEditRefused, match="cannot be empty"):
            await s.edit(anna.id, "   ")
        with pytest.raises(MemoryEditRefused, match="not valid Unicode"):
            await s.edit(anna.id, "Anna \ud800")
        assert await s.edit(999_999, "anything") is None
        assert [m.text for m in await s.listing(audience="personal") if m.id == anna.id] == [edited.text]
    finally:
        await s.close()
