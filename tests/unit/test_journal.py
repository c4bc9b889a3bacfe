"""The journal on both backends (SQLite files, a real PostgreSQL): appends, group commit,
snapshots, erase; and SQLite's own migrations, pragmas and writer thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from netclaw.errors import JournalError, SequenceConflict
from netclaw.persistence import (
    NewEvent,
    SessionRow,
    SqliteJournal,
    apply_migrations,
    load_migrations,
    prepare_database,
)
from tests.conftest import wait_until


def ev(n: int, kind: str = "E") -> NewEvent:
    return NewEvent(kind, f'{{"n": {n}}}')


def row(
    sid: str, *, pending: int = 0, turns: int = 0, last_activity: float = 1.0, title: str | None = None
) -> SessionRow:
    return SessionRow(
        id=sid, channel="cli", title=title, turns=turns, last_activity=last_activity, pending=pending
    )


if TYPE_CHECKING:
    from netclaw.persistence.postgres import PostgresJournal

    AnyJournal = SqliteJournal | PostgresJournal


def count_rows(db: Path, table: str, sid: str | None = None) -> int:
    conn = sqlite3.connect(db)
    try:
        if sid is None:
            return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        return int(conn.execute(f"SELECT COUNT(*) FROM {table} WHERE persistence_id=?", (sid,)).fetchone()[0])
    finally:
        conn.close()


def count_pg_rows(dsn: str, table: str, sid: str | None = None) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        if sid is None:
            found = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        else:
            found = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE persistence_id=%s", (sid,)).fetchone()
    assert found is not None
    return int(found[0])


@dataclass
class Backend:
    """One database a journal runs on: make journals on it, count what it holds."""

    name: str
    make: Callable[..., AnyJournal]  # keyword arguments go to the journal
    count: Callable[[str, str | None], int]

    def count_events(self, sid: str | None = None) -> int:
        return self.count("events", sid)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "netclaw.db"
    prepare_database(path)
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = tmp_path / "data" / "netclaw.db"
        prepare_database(path)
        return Backend(
            "sqlite", lambda **kw: SqliteJournal(path, **kw), lambda t, sid: count_rows(path, t, sid)
        )
    from netclaw.persistence.postgres import PostgresJournal

    dsn: str = request.getfixturevalue("pg_dsn")
    return Backend(
        "postgres", lambda **kw: PostgresJournal(dsn, **kw), lambda t, sid: count_pg_rows(dsn, t, sid)
    )


@pytest.fixture
async def journal(backend: Backend) -> AsyncIterator[AnyJournal]:
    j = await backend.make().open()
    try:
        yield j
    finally:
        await j.close()


# -- migrations ---------------------------------------------------------------------------------


def test_prepare_database_applies_migrations_once(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "netclaw.db"
    known = [m.version for m in load_migrations()]
    assert known, "the source tree ships migrations"
    assert prepare_database(path) == known
    assert path.is_file()
    assert prepare_database(path) == []
    conn = sqlite3.connect(path)
    try:
        recorded = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert recorded == known
    assert {"events", "snapshots", "sessions", "schema_version"} <= tables


def _pragma(db: Path, name: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def test_a_new_database_has_small_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh" / "netclaw.db"
    prepare_database(fresh)
    assert _pragma(fresh, "page_size") == 1024
    older = tmp_path / "older.db"
    conn = sqlite3.connect(older)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("CREATE TABLE t (x)")  # the page size is fixed once the file holds a page
    conn.commit()
    conn.close()
    prepare_database(older)
    assert _pragma(older, "page_size") == 4096


async def test_a_journal_from_before_append_order_keeps_every_row_and_its_rules(tmp_path: Path) -> None:
    path = tmp_path / "netclaw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    apply_migrations(conn, [m for m in load_migrations() if m.version < 15])
    # Two sessions' events interleaved in time, as a daemon writes them, and a snapshot.
    for n in range(1, 6):
        for sid in ("a", "b"):
            conn.execute(
                "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?,?,?,?,?)",
                (sid, n, "TurnRecorded" if n % 2 else "E", f'{{"n": {n}}}', 100.0 + n),
            )
    conn.execute("INSERT INTO snapshots (persistence_id, seq, state, ts) VALUES ('a', 4, 'four', 1)")
    for idx in range(3):
        conn.execute(
            "INSERT INTO snapshot_messages (persistence_id, idx, message) VALUES ('a', ?, ?)",
            (idx, f"m{idx}"),
        )
    conn.execute(
        "INSERT INTO sessions (id, channel, turns, last_activity, pending, last_seq) VALUES ('a','cli',2,1,1,5)"
    )
    conn.close()

    assert 15 in prepare_database(path)
    journal = await SqliteJournal(path).open()
    try:
        for sid in ("a", "b"):
            assert [(e.seq, e.payload) for e in await journal.replay(sid)] == [
                (n, f'{{"n": {n}}}') for n in range(1, 6)
            ]
        snap = await journal.load_snapshot("a")
        assert snap is not None and (snap.seq, list(snap.messages)) == (4, ["m0", "m1", "m2"])
        assert await journal.sessions_with_pending_input() == ["a"]
        assert await journal.append("a", 5, [ev(6)]) == 6
        with pytest.raises(SequenceConflict):
            await journal.append("a", 5, [ev(6)])
    finally:
        await journal.close()
    conn = sqlite3.connect(path)
    try:
        # The database itself still refuses a second event at a seq, whoever writes it.
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES ('b', 3, 'E', '{}', 1)"
            )
        plan = " ".join(
            str(r[-1])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM events WHERE persistence_id = 'a' AND seq > 2 ORDER BY seq"
            )
        )
        assert "events_key" in plan, plan  # a replay reads its own session's rows, not the table
    finally:
        conn.close()


def test_database_from_a_newer_netclaw_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_version (version, name, applied_at) VALUES (9999, 'future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="9999"):
        prepare_database(db)


def test_a_file_that_is_not_a_database_is_a_journal_error(tmp_path: Path) -> None:
    path = tmp_path / "netclaw.db"
    path.write_bytes(b"this is definitely not sqlite" * 200)
    with pytest.raises(JournalError):
        prepare_database(path)


@pytest.mark.parametrize("name", ["1_init.sql", "0001-init.sql", "0001_Init.sql", "init.sql", "00001_x.sql"])
def test_badly_named_migration_file_raises(tmp_path: Path, name: str) -> None:
    (tmp_path / "0001_ok.sql").write_text("CREATE TABLE a (x);")
    (tmp_path / name).write_text("CREATE TABLE b (x);")
    with pytest.raises(JournalError, match=name.replace(".", r"\.")):
        load_migrations(tmp_path)


def test_duplicate_migration_numbers_raise(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x);")
    (tmp_path / "0001_b.sql").write_text("CREATE TABLE b (x);")
    with pytest.raises(JournalError, match="duplicate"):
        load_migrations(tmp_path)


def test_migrations_load_in_order_and_failing_one_rolls_back(tmp_path: Path) -> None:
    mdir = tmp_path / "m"
    mdir.mkdir()
    (mdir / "0002_second.sql").write_text("CREATE TABLE two (x);\n-- trailing comment\n")
    (mdir / "0001_first.sql").write_text("-- the first\nCREATE TABLE one (x);\nINSERT INTO one VALUES (1);\n")
    (mdir / "0003_broken.sql").write_text("CREATE TABLE three (x);\nINSERT INTO nowhere VALUES (1);\n")
    migrations = load_migrations(mdir)
    assert [(m.version, m.name) for m in migrations] == [(1, "first"), (2, "second"), (3, "broken")]
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    try:
        with pytest.raises(JournalError, match="0003_broken"):
            apply_migrations(conn, migrations)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        assert versions == [1, 2]
        assert "three" not in tables  # the broken migration left nothing behind
        assert {"one", "two"} <= tables
        assert apply_migrations(conn, migrations[:2]) == []
    finally:
        conn.close()


def test_incomplete_statement_in_migration_raises(tmp_path: Path) -> None:
    (tmp_path / "0001_bad.sql").write_text("CREATE TABLE a (x)")  # no semicolon
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    try:
        with pytest.raises(JournalError, match="incomplete"):
            apply_migrations(conn, load_migrations(tmp_path))
    finally:
        conn.close()


# -- appends and replay -------------------------------------------------------------------------


async def test_append_returns_the_new_last_seq(journal: AnyJournal) -> None:
    assert await journal.last_seq("s") == 0
    assert await journal.append("s", 0, [ev(1), ev(2), ev(3)]) == 3
    assert await journal.append("s", 3, [ev(4)]) == 4
    assert await journal.last_seq("s") == 4
    assert await journal.append("other", 0, [ev(1)]) == 1


async def test_append_with_wrong_expected_seq_conflicts_and_writes_nothing(
    journal: AnyJournal, backend: Backend
) -> None:
    await journal.append("s", 0, [ev(1), ev(2)])
    for stale in (0, 1, 3, 99):
        with pytest.raises(SequenceConflict) as info:
            await journal.append("s", stale, [ev(100)], row(sid="s", pending=5))
        assert info.value.expected == stale
        assert info.value.actual == 2
        assert info.value.persistence_id == "s"
    assert backend.count_events("s") == 2
    assert [e.payload for e in await journal.replay("s")] == ['{"n": 1}', '{"n": 2}']
    assert await journal.get_session("s") is None  # the rejected row was not written either
    assert await journal.append("s", 2, [ev(3)]) == 3


async def test_conflict_in_a_batch_does_not_fail_the_others(journal: AnyJournal) -> None:
    await journal.append("s", 0, [ev(1)])
    results = await asyncio.gather(
        journal.append("s", 1, [ev(2)]),
        journal.append("s", 1, [ev(99)]),  # stale: the first one moved the journal
        journal.append("t", 0, [ev(1)]),
        return_exceptions=True,
    )
    assert results[0] == 2
    assert isinstance(results[1], SequenceConflict)
    assert results[2] == 1
    assert [e.payload for e in await journal.replay("s")] == ['{"n": 1}', '{"n": 2}']


async def test_chained_appends_in_one_batch(journal: AnyJournal) -> None:
    results = await asyncio.gather(
        journal.append("s", 0, [ev(1)]),
        journal.append("s", 1, [ev(2), ev(3)]),
        journal.append("s", 3, [ev(4)]),
    )
    assert list(results) == [1, 3, 4]
    assert [e.seq for e in await journal.replay("s")] == [1, 2, 3, 4]


async def test_appends_from_threads_are_settled_by_the_writer_in_order_with_the_loops(
    journal: AnyJournal,
) -> None:
    """An actor's path: no loop hop, the same sequence checks, and the same batches."""

    def from_thread() -> list[int | str]:
        first = journal.append_threadsafe("s", 0, [ev(1)], row("s", pending=1))
        second = journal.append_threadsafe("s", 1, [ev(2), ev(3)])
        stale = journal.append_threadsafe("s", 1, [ev(99)])
        outcomes: list[int | str] = [first.result(10), second.result(10)]
        error = stale.exception(10)
        outcomes.append(type(error).__name__)
        return outcomes

    assert await asyncio.to_thread(from_thread) == [1, 3, "SequenceConflict"]
    assert await journal.append("s", 3, [ev(4)]) == 4  # the loop's path sees where they left it
    assert [e.seq for e in await journal.replay("s")] == [1, 2, 3, 4]
    assert (await journal.get_session("s")) is not None


async def test_a_thread_append_to_a_closed_journal_fails_at_once(backend: Backend) -> None:
    j = await backend.make().open()
    await j.close()
    future = j.append_threadsafe("s", 0, [ev(1)])
    assert isinstance(future.exception(0), JournalError)


async def test_replay_after_seq(journal: AnyJournal) -> None:
    await journal.append("s", 0, [ev(i, f"T{i}") for i in range(1, 6)])
    await journal.append("noise", 0, [ev(9)])
    events = await journal.replay("s")
    assert [(e.seq, e.type, e.payload) for e in events] == [
        (i, f"T{i}", f'{{"n": {i}}}') for i in range(1, 6)
    ]
    assert all(e.ts > 0 for e in events)
    assert [e.seq for e in await journal.replay("s", after_seq=3)] == [4, 5]
    assert await journal.replay("s", after_seq=5) == []
    assert await journal.replay("unknown") == []


async def test_concurrent_appends_group_commit(journal: AnyJournal, backend: Backend) -> None:
    before = journal.commits
    sids = [f"cli:s{i}" for i in range(50)]
    results = await asyncio.gather(
        *(journal.append(sid, 0, [ev(1), ev(2)], row(sid, pending=1)) for sid in sids)
    )
    assert results == [2] * 50
    commits = journal.commits - before
    assert 1 <= commits < 50
    assert backend.count_events() == 100
    assert {r.id for r in await journal.list_sessions()} == set(sids)


async def test_events_survive_close_and_reopen(backend: Backend) -> None:
    first = await backend.make().open()
    await first.append("s", 0, [ev(1), ev(2)], row("s", pending=1, turns=1, title="t"))
    await first.save_snapshot("s", 2, '{"snap": 2}')
    await first.close()
    second = await backend.make().open()
    try:
        assert [e.seq for e in await second.replay("s")] == [1, 2]
        assert await second.last_seq("s") == 2
        snap = await second.load_snapshot("s")
        assert snap is not None
        assert (snap.seq, snap.state) == (2, '{"snap": 2}')
        session = await second.get_session("s")
        assert session is not None
        assert session.title == "t"
        # the reopened journal knows where "s" is
        with pytest.raises(SequenceConflict):
            await second.append("s", 0, [ev(9)])
        assert await second.append("s", 2, [ev(3)]) == 3
    finally:
        await second.close()


async def test_session_row_written_with_the_events(journal: AnyJournal) -> None:
    await journal.append("cli:a", 0, [ev(1)], row("cli:a", pending=1, last_activity=10.0, title="A"))
    await journal.append("cli:b", 0, [ev(1), ev(2)], row("cli:b", pending=2, last_activity=5.0))
    await journal.append("cli:c", 0, [ev(1)], row("cli:c", pending=0, last_activity=20.0))
    await journal.append("cli:d", 0, [ev(1)])  # no row: not listed

    a = await journal.get_session("cli:a")
    assert a == SessionRow(
        id="cli:a", channel="cli", title="A", turns=0, last_activity=10.0, pending=1, last_seq=1
    )
    assert await journal.get_session("cli:d") is None
    listed = await journal.list_sessions()
    assert [r.id for r in listed] == ["cli:c", "cli:a", "cli:b"]  # newest activity first
    assert {r.id: r.last_seq for r in listed} == {"cli:a": 1, "cli:b": 2, "cli:c": 1}
    assert await journal.sessions_with_pending_input() == ["cli:b", "cli:a"]  # oldest activity first

    # the row is updated in place with the new last seq
    await journal.append(
        "cli:a", 1, [ev(2), ev(3)], row("cli:a", pending=0, turns=1, last_activity=30.0, title="A2")
    )
    a = await journal.get_session("cli:a")
    assert a is not None
    assert (a.last_seq, a.pending, a.turns, a.title) == (3, 0, 1, "A2")
    assert await journal.sessions_with_pending_input() == ["cli:b"]
    assert len(await journal.list_sessions()) == 3


async def test_snapshots_save_load_and_never_go_backwards(journal: AnyJournal) -> None:
    assert await journal.load_snapshot("s") is None
    await journal.append("s", 0, [ev(n) for n in range(1, 11)])
    await journal.save_snapshot("s", 5, "five")
    snap = await journal.load_snapshot("s")
    assert snap is not None
    assert (snap.seq, snap.state) == (5, "five")
    await journal.save_snapshot("s", 9, "nine")
    await journal.save_snapshot("s", 7, "seven")  # older: ignored
    snap = await journal.load_snapshot("s")
    assert snap is not None
    assert (snap.seq, snap.state) == (9, "nine")
    await journal.save_snapshot("s", 9, "nine again")  # same seq may be rewritten
    snap = await journal.load_snapshot("s")
    assert snap is not None
    assert snap.state == "nine again"
    assert await journal.load_snapshot("other") is None


async def test_older_snapshot_in_the_same_batch_does_not_win(journal: AnyJournal) -> None:
    await journal.append("s", 0, [ev(n) for n in range(1, 11)])
    await asyncio.gather(journal.save_snapshot("s", 10, "ten"), journal.save_snapshot("s", 3, "three"))
    snap = await journal.load_snapshot("s")
    assert snap is not None
    assert (snap.seq, snap.state) == (10, "ten")


async def test_snapshot_rows_are_written_once_and_come_back_in_order(
    journal: AnyJournal, backend: Backend
) -> None:
    await journal.append("s", 0, [ev(n) for n in range(1, 11)])
    await journal.save_snapshot("s", 4, "four", ["m0", "m1"], 0)
    await journal.save_snapshot("s", 8, "eight", ["m2", "m3", "m4"], 2)  # only the new rows
    snap = await journal.load_snapshot("s")
    assert snap is not None and (snap.seq, snap.state, list(snap.messages)) == (
        8,
        "eight",
        ["m0", "m1", "m2", "m3", "m4"],
    )
    # A snapshot whose earlier rows never landed is refused (the writer then sends all).
    with pytest.raises(JournalError, match="starts at transcript row 7, but only 5 are saved"):
        await journal.save_snapshot("s", 9, "nine", ["m7"], 7)
    await journal.save_snapshot("s", 9, "nine", ["m0", "m1", "m2", "m3", "m4", "m5"], 0)
    snap = await journal.load_snapshot("s")
    assert snap is not None and snap.state == "nine" and len(snap.messages) == 6
    # Two snapshots of one session in the same batch: the second continues the first.
    await asyncio.gather(
        journal.save_snapshot("s", 10, "ten", ["m6"], 6), journal.save_snapshot("s", 10, "ten b", ["m7"], 7)
    )
    snap = await journal.load_snapshot("s")
    assert snap is not None and len(snap.messages) == 8
    await journal.erase("s")
    assert await journal.load_snapshot("s") is None
    assert backend.count("snapshot_messages", None) == 0


async def test_appends_after_close_raise(backend: Backend) -> None:
    j = await backend.make().open()
    await j.append("s", 0, [ev(1)])
    await j.close()
    with pytest.raises(JournalError, match="closed"):
        await j.append("s", 1, [ev(2)])
    with pytest.raises(JournalError, match="closed"):
        await j.save_snapshot("s", 1, "x")
    with pytest.raises(JournalError, match="closed"):
        await j.replay("s")
    await j.close()  # twice is harmless


async def test_append_before_open_raises(backend: Backend) -> None:
    with pytest.raises(JournalError):
        await backend.make().append("s", 0, [ev(1)])


async def test_writes_queued_before_close_are_committed(backend: Backend) -> None:
    j = await backend.make().open()
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(j.append(f"s{i}", 0, [ev(1), ev(2)])) for i in range(10)
    ]
    tasks.append(asyncio.create_task(j.save_snapshot("s0", 2, "snap")))
    await asyncio.sleep(0)  # every task has queued its write; none has been awaited
    await j.close()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert results[:10] == [2] * 10
    assert backend.count_events() == 20
    reopened = await backend.make().open()
    try:
        for i in range(10):
            assert [e.seq for e in await reopened.replay(f"s{i}")] == [1, 2]
        snap = await reopened.load_snapshot("s0")
        assert snap is not None
        assert snap.state == "snap"
    finally:
        await reopened.close()


async def test_durable_and_wal_by_default(db: Path) -> None:
    journal = await SqliteJournal(db).open()
    try:
        assert await journal.synchronous_levels() == (2, 2)  # FULL, writer and reader
    finally:
        await journal.close()
    plain = sqlite3.connect(db)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        plain.close()


async def test_synchronous_normal_when_asked(db: Path) -> None:
    j = await SqliteJournal(db, synchronous="normal").open()
    try:
        assert await j.synchronous_levels() == (1, 1)  # NORMAL
    finally:
        await j.close()


def _plain_database(tmp_path: Path) -> Path:
    path = tmp_path / "plain.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE events (x)")
    conn.commit()
    conn.close()
    return path


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "netclaw-journal-writer"]


async def test_open_refuses_a_database_not_in_wal_mode(tmp_path: Path) -> None:
    j = SqliteJournal(_plain_database(tmp_path))
    with pytest.raises(JournalError, match="WAL"):
        await j.open()
    assert not j.is_open


async def test_failed_open_leaves_no_thread_or_connection(tmp_path: Path) -> None:
    before = writer_threads()
    j = SqliteJournal(_plain_database(tmp_path))
    with pytest.raises(JournalError):
        await j.open()
    assert writer_threads() == before
    with pytest.raises(JournalError, match="closed"):
        await j.replay("s")


# -- the writer thread ------------------------------------------------------------------------


async def test_many_sessions_share_few_commits_and_get_their_own_seqs(
    journal: AnyJournal, backend: Backend
) -> None:
    before = journal.commits

    async def session(i: int) -> list[int]:
        seqs = []
        for n in range(5):
            seqs.append(await journal.append(f"cli:{i}", n, [ev(n)], row(f"cli:{i}", pending=1)))
        return seqs

    results = await asyncio.gather(*(session(i) for i in range(40)))
    assert results == [[1, 2, 3, 4, 5]] * 40
    assert journal.commits - before < 200  # 200 appends, grouped
    assert backend.count_events() == 200


# -- the commit delay (netclaw.persistence._commit_delay) ----------------------------------------

LONG_DELAY_S = 5.0  # a wait this long would show as a timeout below, never as a slow pass


def turn_appends(journal: AnyJournal, sid: str, seq: int) -> int:
    """One turn from an actor's thread: the input (left pending), then the turn's end."""
    journal.append_threadsafe(sid, seq, [ev(seq + 1)], row(sid, pending=1)).result(LONG_DELAY_S / 2)
    journal.append_threadsafe(sid, seq + 1, [ev(seq + 2)], row(sid, pending=0)).result(LONG_DELAY_S / 2)
    return seq + 2


async def test_a_lone_session_and_sessions_taking_turns_never_wait_for_company(backend: Backend) -> None:
    j = await backend.make(commit_delay_s=LONG_DELAY_S).open()
    try:

        def run() -> None:
            seq = 0
            for _ in range(25):
                seq = turn_appends(j, "alone", seq)
            seqs = dict.fromkeys(("a", "b", "c"), 0)
            for n in range(60):
                sid = "abc"[n % 3]
                seqs[sid] = turn_appends(j, sid, seqs[sid])

        await asyncio.to_thread(run)
        assert backend.count_events() == 50 + 120
    finally:
        await j.close()


async def test_a_commit_waits_for_the_sessions_mid_turn_and_no_longer(backend: Backend) -> None:
    """Thirty sessions mid-turn: the first turn's end waits for the others' (one commit for
    all), and the wait ends when the last has come, long before the delay is over."""
    j = await backend.make(commit_delay_s=LONG_DELAY_S).open()
    sids = [f"cli:m{i}" for i in range(30)]
    try:
        await asyncio.gather(*(j.append(sid, 0, [ev(1)], row(sid, pending=1)) for sid in sids))
        writer = getattr(j, "_writer")  # noqa: B009 - to see it take the first append

        def run() -> list[int]:
            before = j.commits
            first = j.append_threadsafe(sids[0], 1, [ev(2)], row(sids[0], pending=0))
            # The writer took it: it waits, or commits alone.
            wait_until(writer.inbox.empty, 5, "the writer to take the first append", interval=0.001)
            rest = [j.append_threadsafe(sid, 1, [ev(2)], row(sid, pending=0)) for sid in sids[1:]]
            seqs = [f.result(LONG_DELAY_S / 2) for f in [first, *rest]]
            return [*seqs, j.commits - before]

        *seqs, commits = await asyncio.to_thread(run)
        assert seqs == [2] * 30
        assert commits == 1
    finally:
        await j.close()


async def test_a_waiting_commit_lands_before_a_query_or_an_erase_queued_after_it(backend: Backend) -> None:
    """What runs on the writer after a write (a lease's release, an erase) finds it landed."""
    j = await backend.make(commit_delay_s=LONG_DELAY_S).open()
    sids = [f"cli:q{i}" for i in range(30)]
    try:
        await asyncio.gather(*(j.append(sid, 0, [ev(1)], row(sid, pending=1)) for sid in sids))
        end = j.append_threadsafe(sids[0], 1, [ev(2)], row(sids[0], pending=0))
        seen = await j.run_on_writer(lambda conn: 1)
        assert seen == 1 and end.done() and end.result() == 2
        end = j.append_threadsafe(sids[1], 1, [ev(2)], row(sids[1], pending=0))
        await asyncio.wait_for(j.erase(sids[1]), LONG_DELAY_S / 2)
        assert end.result(0) == 2
        assert backend.count_events(sids[1]) == 0
    finally:
        await j.close()


async def test_a_commit_that_fails_fails_its_batch_and_the_writer_goes_on(journal: AnyJournal) -> None:
    # No driver binds a payload that is not text: the whole transaction rolls back.
    bad = NewEvent("E", object())  # type: ignore[arg-type]
    good, broken = await asyncio.gather(
        journal.append("s-good", 0, [ev(1)]), journal.append("s-bad", 0, [bad]), return_exceptions=True
    )
    assert isinstance(broken, JournalError)
    assert isinstance(good, (int, JournalError))  # the same transaction: it failed too, or landed alone
    # The writer survived and the cache was not left ahead of the disk.
    assert await journal.append("s-bad", 0, [ev(1)]) == 1
    after_good = await journal.last_seq("s-good")
    assert await journal.append("s-good", after_good, [ev(2)]) == after_good + 1


async def test_close_lets_queued_writes_land_and_stops_the_thread(backend: Backend) -> None:
    before = writer_threads()
    j = await backend.make().open()
    assert len(writer_threads()) == len(before) + 1
    tasks = [asyncio.create_task(j.append(f"q{i}", 0, [ev(1)])) for i in range(30)]
    await asyncio.sleep(0)
    await j.close()
    assert await asyncio.gather(*tasks) == [1] * 30
    assert backend.count_events() == 30
    assert writer_threads() == before
    with pytest.raises(JournalError, match="closed"):
        await j.append("q0", 1, [ev(2)])


def test_no_private_aiosqlite_api() -> None:
    import netclaw.persistence._sqlite as module

    source = Path(module.__file__).read_text()
    assert "_execute" not in source
    assert "._conn" not in source


async def test_a_snapshot_ahead_of_its_journal_is_refused(journal: AnyJournal) -> None:
    # An erased session's late snapshot must not land on its successor.
    await journal.append("s", 0, [ev(1), ev(2)])
    await journal.erase("s")
    with pytest.raises(JournalError, match="ahead of its journal"):
        await journal.save_snapshot("s", 2, "old state")
    assert await journal.load_snapshot("s") is None
    assert await journal.append("s", 0, [ev(1)]) == 1  # the successor starts at 1


async def test_erase_removes_everything_of_a_session_after_what_was_queued(
    journal: AnyJournal, backend: Backend
) -> None:
    await journal.append("gone", 0, [ev(1)], row("gone", pending=1))
    write = asyncio.create_task(journal.append("gone", 1, [ev(2)]))
    await asyncio.sleep(0)
    await journal.erase("gone")
    assert await write == 2  # queued before the erase: it landed, then went with the rest
    assert await journal.replay("gone") == []
    assert await journal.get_session("gone") is None
    assert backend.count_events("gone") == 0


LISTED = [
    ("cli:alpha", "cli", "Plans for Q3", 50.0),
    ("cli:beta", "cli", None, 40.0),
    ("slack:C1:1.5", "slack", "100%_done", 30.0),
    ("slack:C1:2.5", "slack", "Alpha release", 30.0),
    ("webhook:hook:k", "webhook", "a_b", 10.0),
]


def model_of(
    text: str = "", channel: str = "", only: list[str] | None = None, excluding: tuple[str, ...] = ()
) -> list[str]:
    """What find_sessions must answer, computed the plain way."""
    found = [
        (sid, last)
        for sid, ch, title, last in LISTED
        if (not text or text.lower() in sid.lower() or text.lower() in (title or "").lower())
        and (not channel or ch == channel)
        and (only is None or sid in only)
        and sid not in excluding
    ]
    return [sid for sid, _ in sorted(found, key=lambda f: (-f[1], f[0]))]


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"text": "ALPHA"},
        {"text": "%"},
        {"text": "_"},
        {"text": "%_"},
        {"text": "c1"},
        {"channel": "slack"},
        {"channel": "slack", "text": "release"},
        {"only": ["cli:beta", "webhook:hook:k", "nope"]},
        {"only": []},
        {"excluding": ("cli:alpha", "slack:C1:1.5")},
        {"channel": "nope"},
    ],
)
async def test_find_sessions_filters_and_pages_in_the_database(
    journal: AnyJournal, query: dict[str, Any]
) -> None:
    from netclaw.persistence import SessionQuery

    for sid, channel, title, last in LISTED:
        await journal.append(sid, 0, [ev(1)], SessionRow(sid, channel, title, 1, last, 0))
    expected = model_of(**query)
    whole = await journal.find_sessions(SessionQuery(**query))
    assert [r.id for r in whole.rows] == expected and whole.total == len(expected)
    assert whole.channels == ["cli", "slack", "webhook"]
    paged = [
        r.id
        for offset in (0, 2, 4)
        for r in (await journal.find_sessions(SessionQuery(**query, offset=offset, limit=2))).rows
    ]
    assert paged == expected


async def test_usage_can_be_limited_to_some_sessions(journal: AnyJournal) -> None:
    recorded = '{"turn": 1, "spent": {"input_tokens": 100, "output_tokens": 10}}'
    for sid in ("cli:a", "cli:b", "cli:c"):
        await journal.append(sid, 0, [NewEvent("TurnRecorded", recorded)])
    every = await journal.usage("session")
    assert [r.key for r in every] == ["cli:a", "cli:b", "cli:c"]
    some = await journal.usage("session", None, ["cli:c", "cli:a", "cli:none"])
    assert [(r.key, r.input_tokens) for r in some] == [("cli:a", 100), ("cli:c", 100)]
    assert await journal.usage("day", None, []) == []


async def test_usage_counts_the_audio_transcribed_the_replies_spoken_and_their_cost(
    journal: AnyJournal,
) -> None:
    recorded = '{"turn": 1, "spent": {"input_tokens": 100, "output_tokens": 10}, "model": "m", "cost": 0.5}'
    heard = (
        '{"message_id": "u1", "transcripts": [{"file": 0, "text": "hi"}], "spent": {"speech_ms": 90000},'
        ' "cost": 0.009, "model": "whisper-1"}'
    )
    failed = '{"message_id": "u2", "transcripts": [{"file": 0, "error": "too long"}]}'
    said = (
        '{"turn": 1, "file": {"name": "reply-1.wav", "mime_type": "audio/wav", "path": "/x", "size": 9,'
        ' "kind": "audio"}, "spent": {"speech_chars": 20}, "cost": 0.25, "model": "tts-1"}'
    )
    await journal.append(
        "cli:v",
        0,
        [
            NewEvent("SpeechTranscribed", heard),
            NewEvent("TurnRecorded", recorded),
            NewEvent("SpeechTranscribed", failed),
            NewEvent("ReplySpoken", said),
        ],
    )
    (row,) = await journal.usage("session")
    assert (row.turns, row.input_tokens, row.speech_seconds, row.cost) == (1, 100, 90.0, 0.759)
    by_model = {r.key: r for r in await journal.usage("model")}
    assert by_model["whisper-1"].speech_seconds == 90.0 and by_model["whisper-1"].turns == 0
    assert by_model["m"].speech_seconds == 0.0 and by_model["tts-1"].cost == 0.25
