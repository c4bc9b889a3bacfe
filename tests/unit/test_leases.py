"""Session leases on PostgreSQL: one node owns a session at a time, and a node that lost
its lease cannot write (its appends are fenced by the epoch)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from netclaw.errors import JournalError, LeaseLost, SequenceConflict, SessionOwnedElsewhere
from netclaw.persistence import NewEvent, SessionRow
from tests.conftest import wait_until

if TYPE_CHECKING:
    from netclaw.persistence.postgres import PostgresJournal


def ev(node: str, epoch: int) -> NewEvent:
    return NewEvent("Wrote", json.dumps({"node": node, "epoch": epoch}))


@pytest.fixture
def node(pg_dsn: str) -> Callable[..., AsyncIterator[PostgresJournal]]:
    @asynccontextmanager
    async def open_node(node_id: str, lease_s: float = 15.0) -> AsyncIterator[PostgresJournal]:
        from netclaw.persistence.postgres import PostgresJournal

        journal = await PostgresJournal(
            pg_dsn, node_id=node_id, advertise_url=f"http://{node_id}.test:8765", lease_s=lease_s
        ).open()
        try:
            yield journal
        finally:
            await journal.close()

    return open_node  # type: ignore[return-value]


async def test_a_claimed_session_is_owned_elsewhere_for_every_other_node(node: Callable[..., Any]) -> None:
    async with node("a") as a, node("b") as b:
        assert await a.claim("s") == 1
        with pytest.raises(
            SessionOwnedElsewhere, match=r"resident on node a at http://a\.test:8765"
        ) as caught:
            await b.claim("s")
        assert caught.value.node_id == "a" and caught.value.retry_after > 10
        owner = await b.owner("s")
        assert owner is not None and (owner.node_id, owner.url) == ("a", "http://a.test:8765")
        assert await a.owner("s") is None  # its own: nothing to forward
        assert await b.owner("never-claimed") is None
        assert await a.append("s", 0, [ev("a", 1)]) == 1
        with pytest.raises(LeaseLost, match="resident on node a"):
            await b.append("s", 1, [ev("b", 0)])


async def test_a_released_lease_is_taken_at_a_new_epoch_and_fences_the_old_holder(
    node: Callable[..., Any],
) -> None:
    async with node("a") as a, node("b") as b:
        epoch = await a.claim("s")
        await a.append("s", 0, [ev("a", epoch)])
        a.release("s", epoch)
        await a.append("other", 0, [ev("a", 0)])  # ordered after the release on a's writer
        assert await b.claim("s") == epoch + 1
        await b.append("s", 1, [ev("b", epoch + 1)])
        # a believes nothing: it simply does not hold the lease any more
        with pytest.raises(LeaseLost):
            await a.append("s", 2, [ev("a", epoch)])
        assert [e.seq for e in await b.replay("s")] == [1, 2]


async def test_an_expired_lease_is_taken_over_and_its_old_holder_hears_of_it(
    node: Callable[..., Any],
) -> None:
    lost: list[str] = []
    async with node("a", lease_s=0.4) as a, node("b", lease_s=0.4) as b:
        a.leases.on_lost = lost.append
        epoch = await a.claim("s")
        await a.append("s", 0, [ev("a", epoch)])
        await a.leases.stop_renewing()  # a stops answering, as a node that died would
        with pytest.raises(SessionOwnedElsewhere):
            await b.claim("s")
        await asyncio.sleep(0.6)  # time passing is the behaviour here: the 0.4 s lease runs out
        assert await b.claim("s") == epoch + 1
        # a comes back: its write is fenced, and its next renewal reports the loss
        with pytest.raises(LeaseLost, match="taken over by node b"):
            await a.append("s", 1, [ev("a", epoch)])
        assert await a.leases.renew() == ["s"]
        assert lost == ["s"]
        assert await b.append("s", 1, [ev("b", epoch + 1)]) == 2


async def test_a_live_lease_is_renewed_past_its_first_expiry(node: Callable[..., Any]) -> None:
    async with node("a", lease_s=0.3) as a, node("b", lease_s=0.3) as b:
        await a.claim("s")
        await asyncio.sleep(1.0)  # time passing is the behaviour here: three lease times, renewed every 0.1 s
        with pytest.raises(SessionOwnedElsewhere):
            await b.claim("s")
        assert a.problem() is None


async def test_a_second_process_with_the_same_node_id_is_refused(
    node: Callable[..., Any], pg_dsn: str
) -> None:
    from netclaw.persistence.postgres import PostgresJournal

    async with node("a"):
        twin = PostgresJournal(pg_dsn, node_id="a")
        with pytest.raises(JournalError, match="node id 'a' is in use by another running netclaw"):
            await twin.open(join_wait_s=0.3)
    # after a clean stop the id is free at once
    again = await PostgresJournal(pg_dsn, node_id="a").open(join_wait_s=0)
    await again.close()


async def test_closing_a_node_hands_its_sessions_over_at_once(node: Callable[..., Any]) -> None:
    async with node("b") as b:
        async with node("a") as a:
            await a.claim("s")
        assert await b.owner("s") is None
        assert await b.claim("s") == 2


async def test_two_nodes_contending_for_one_session_never_interleave_epochs(
    node: Callable[..., Any],
) -> None:
    """Both nodes keep trying to own one session and write to it; some holds end in a
    release, some in a 'crash' (the node stops renewing and forgets). Whatever lands, the
    journal shows one owner at a time: epochs never go back, and each belongs to one node."""
    rng = random.Random(7)
    stop = asyncio.Event()

    async def contend(journal: PostgresJournal, name: str) -> int:
        landed = 0
        while not stop.is_set():
            try:
                epoch = await journal.claim("s")
            except SessionOwnedElsewhere:
                await asyncio.sleep(rng.uniform(0.01, 0.05))
                continue
            for _ in range(rng.randint(1, 5)):
                try:
                    seq = await journal.last_seq("s")
                    await journal.append("s", seq, [ev(name, epoch)])
                    landed += 1
                except (LeaseLost, SequenceConflict):
                    break
                await asyncio.sleep(rng.uniform(0, 0.02))
            if rng.random() < 0.6:
                journal.release("s", epoch)
            else:  # a pause (GC, a stalled VM): renewal stops, then the node writes again
                journal.leases.held.pop("s", None)
                await asyncio.sleep(rng.uniform(0.1, 0.4))
                journal.leases.held["s"] = epoch  # it still believes it holds the lease
                try:
                    await journal.append("s", await journal.last_seq("s"), [ev(name, epoch)])
                    landed += 1  # nobody took it meanwhile: still the owner's write
                except (LeaseLost, SequenceConflict):
                    pass
                journal.leases.held.pop("s", None)
            await asyncio.sleep(rng.uniform(0, 0.05))
        return landed

    async with node("a", lease_s=0.2) as a, node("b", lease_s=0.2) as b:
        tasks = [asyncio.create_task(contend(a, "a")), asyncio.create_task(contend(b, "b"))]
        await asyncio.sleep(4.0)  # how long the two contend: the run's length, not a wait
        stop.set()
        landed = await asyncio.gather(*tasks)
        events = await a.replay("s")
    assert all(n > 0 for n in landed), landed  # both nodes owned it at some point
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    owners: dict[int, str] = {}
    last_epoch = 0
    for e in events:
        payload = json.loads(e.payload)
        assert payload["epoch"] >= last_epoch, f"seq {e.seq}: epoch went back from {last_epoch}"
        assert owners.setdefault(payload["epoch"], payload["node"]) == payload["node"]
        last_epoch = payload["epoch"]
    assert len(owners) > 4


async def test_the_nodes_and_the_sessions_each_holds_are_listed(node: Callable[..., Any]) -> None:
    async with node("a") as a, node("b") as b:
        assert await a.claim("s1") == 1
        assert await a.claim("s2") == 1
        assert await b.claim("s3") == 1
        listed = await b.nodes()
        assert [(n.node_id, n.url, n.sessions) for n in listed] == [
            ("a", "http://a.test:8765", 2),
            ("b", "http://b.test:8765", 1),
        ]
        assert all(n.alive(15.0) and n.started_at > 0 for n in listed)
        a.release("s1", 1)
        for _ in range(250):  # until the release went through the writer
            if [n.sessions for n in await a.nodes()] == [1, 1]:
                break
            await asyncio.sleep(0.02)
        assert [n.sessions for n in await a.nodes()] == [1, 1]


async def test_a_lease_handed_on_is_the_named_nodes_and_fences_its_old_holder(
    node: Callable[..., Any],
) -> None:
    """A move: a's lease is written over to b at a new epoch after a's last write; nobody
    else may take it meanwhile, b's claim succeeds, and a's late write is refused."""
    async with node("a") as a, node("b") as b, node("c") as c:
        epoch = await a.claim("s")
        await a.append("s", 0, [ev("a", epoch)])
        a.leases.destined["s"] = "b"
        a.release("s", epoch)
        assert await a.leases.handed_on("s", 5) is True
        lease = await c.leases.lease_of("s")
        assert lease is not None and (lease.node_id, lease.epoch, lease.live) == ("b", epoch + 1, True)
        with pytest.raises(SessionOwnedElsewhere, match="resident on node b"):
            await c.claim("s")
        assert await b.owner("s") is None  # its own now: nothing to forward
        assert await b.claim("s") == epoch + 2
        await b.append("s", 1, [ev("b", epoch + 2)])
        a.leases.held["s"] = epoch  # a still believes it holds it
        with pytest.raises(LeaseLost):
            await a.append("s", 2, [ev("a", epoch)])
        assert a.leases.counts.handed_on == 1
        # b took it from a's hands (released to it), not from a dead node
        assert (b.leases.counts.taken_after_release, b.leases.counts.taken_after_expiry) == (0, 0)


async def test_a_sessions_unanswered_input_is_its_holders_or_nobodys_to_recover(
    node: Callable[..., Any],
) -> None:
    """``orphans``: pending sessions no node holds, and (``mine``) those this node still
    holds after a restart; never those another node is running."""
    async with node("a") as a, node("b") as b:
        epochs = {}
        for sid, owner, name in (("held-by-a", a, "a"), ("left-by-b", b, "b")):
            epochs[sid] = await owner.claim(sid)
            await owner.append(
                sid, 0, [ev(name, epochs[sid])], SessionRow(sid, "cli", None, 0, 1.0, pending=1)
            )
        b.release("left-by-b", epochs["left-by-b"])  # after its queued writes, on the writer
        for _ in range(250):
            if await b.orphans():
                break
            await asyncio.sleep(0.02)
        assert await b.orphans() == ["left-by-b"]
        assert await b.orphans(mine="b") == ["left-by-b"]  # a's running session is not b's
        assert await a.orphans(mine="a") == ["held-by-a", "left-by-b"]  # a restarted: its own too


async def test_takeovers_are_counted_by_how_the_old_holder_let_go(node: Callable[..., Any]) -> None:
    async with node("a", lease_s=0.3) as a, node("b", lease_s=0.3) as b:
        a.release("s1", await a.claim("s1"))
        await a.append("other", 0, [ev("a", 0)])  # ordered after the release
        await b.claim("s1")
        await a.claim("s2")
        await a.leases.stop_renewing()
        await asyncio.sleep(0.5)  # time passing is the behaviour here: the 0.3 s lease runs out
        await b.claim("s2")
        assert (b.leases.counts.taken_after_release, b.leases.counts.taken_after_expiry) == (1, 1)
        assert b.leases.counts.renewals >= 1


async def test_the_registry_lists_live_nodes_with_their_version_state_and_sessions(
    node: Callable[..., Any],
) -> None:
    async with node("a") as a, node("b") as b:
        await a.leases.set_draining(False)  # a listens (b never said it takes sessions)
        await a.claim("s1")
        await a.claim("s2")
        await a.claim("role:discord")  # a channel's lease is not a session
        await b.claim("s3")
        peers = {p.node_id: p for p in await a.leases.peers()}
        assert set(peers) == {"a", "b"}
        assert (peers["a"].sessions, peers["b"].sessions) == (2, 1)
        assert peers["b"].draining and not peers["a"].draining
        assert peers["a"].url == "http://a.test:8765" and peers["a"].protocol == 1
        assert peers["a"].to_json()["state"] == "active" and peers["b"].to_json()["state"] == "draining"
    async with node("c") as c:  # a and b stopped: no longer live
        assert [p.node_id for p in await c.leases.peers()] == ["c"]


async def test_a_node_joins_taking_no_sessions_until_it_says_it_listens(node: Callable[..., Any]) -> None:
    # Another node's rebalancer must not hand it a session it cannot yet be told to take.
    async with node("a") as a, node("b") as b:
        assert all(p.draining for p in await a.leases.peers())
        await b.leases.set_draining(False)
        assert {p.node_id: p.draining for p in await a.leases.peers()} == {"a": True, "b": False}
    async with node("b") as b:  # a restart joins not taking again, whatever it said before
        assert [p.draining for p in await b.leases.peers()] == [True]


def test_a_database_migrated_by_a_newer_release_is_fine_while_its_migrations_are_additive() -> None:
    from netclaw.persistence.postgres._schema import check_compatible

    check_compatible(4, [(1, "schema", None), (4, "node_registry", 0)])
    check_compatible(4, [(4, "node_registry", 0), (5, "add_column", 0), (6, "add_table", 0)])  # logged
    with pytest.raises(
        JournalError, match="migration 0006_drop_column does not work with netclaw code older"
    ):
        check_compatible(4, [(5, "add_column", 0), (6, "drop_column", 5)])
    check_compatible(5, [(5, "add_column", 0), (6, "drop_column", 5)])  # the release before knows


def test_a_migration_says_which_older_code_it_breaks(tmp_path: Any) -> None:
    from netclaw.persistence import load_migrations

    (tmp_path / "0001_first.sql").write_text("CREATE TABLE t (x INT);\n")
    (tmp_path / "0002_drop.sql").write_text("-- oldest-compatible: 2\nALTER TABLE t DROP COLUMN x;\n")
    found = load_migrations(tmp_path)
    assert [(m.version, m.oldest_compatible) for m in found] == [(1, 0), (2, 2)]


async def test_a_node_older_than_the_database_still_starts_when_the_newer_migrations_are_additive(
    pg_dsn: str,
) -> None:
    """A rolling upgrade: a node of the next release migrated the database (here: one more
    additive migration recorded); this release's nodes start on it all the same."""
    import psycopg

    from netclaw.persistence.postgres import PostgresJournal, prepare_postgres

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE nodes ADD COLUMN next_release TEXT")
        conn.execute(
            "INSERT INTO schema_version (version, name, applied_at, oldest_compatible)"
            " VALUES (9000, 'next_release', 0, 0)"
        )
    assert prepare_postgres(pg_dsn) == []
    journal = await PostgresJournal(pg_dsn, node_id="old").open()
    await journal.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO schema_version (version, name, applied_at, oldest_compatible)"
            " VALUES (9001, 'breaking', 0, 9000)"
        )
    with pytest.raises(JournalError, match="upgrade netclaw on this node"):
        prepare_postgres(pg_dsn)


class _Stopped(Exception):
    """The node went no further (it was stopped)."""


class _StopsAfter:
    """A cursor that, after its ``n``-th statement, stops as a SIGSTOPped node would: it
    goes no further and holds what its transaction holds, here until the server has ended
    that transaction (``backend_gone``)."""

    def __init__(self, cursor: Any, n: int, backend_gone: Callable[[], bool]) -> None:
        self._cursor, self._left, self._gone = cursor, n, backend_gone

    def __enter__(self) -> _StopsAfter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._then(self._cursor.execute(*args, **kwargs))

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self._then(self._cursor.executemany(*args, **kwargs))

    def _then(self, result: Any) -> Any:
        self._left -= 1
        if self._left == 0:
            wait_until(self._gone, 15, "the server to end the stopped node's transaction")
            raise _Stopped
        return result


def _stop_after(db: Any, n: int, watcher: Any) -> None:
    """Make ``db``'s cursors stop after their ``n``-th statement (:class:`_StopsAfter`)."""
    backend, make = db.info.backend_pid, db.cursor

    def gone() -> bool:
        return watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)).fetchone() is None

    db.cursor = lambda *args: _StopsAfter(make(*args), n, gone)


def test_a_node_stopped_anywhere_inside_its_write_is_ended_by_the_server(pg_dsn: str) -> None:
    """A node stopped (SIGSTOP, a stalled VM) between its writes and their COMMIT holds its
    row locks: the server must end that transaction once it sat idle for a lease's time, or
    the node taking the lease over waits on them for good. The writer's own batch is
    stopped after each of its statements in turn, as a stopped node would be. (psycopg's
    executemany runs in pipeline mode, after which the server left the timeout unarmed.)"""
    import time

    import psycopg

    from netclaw.persistence._writer import Batch
    from netclaw.persistence.postgres._journal import PostgresJournal, _PgWriter, batch_statements

    writer = _PgWriter(PostgresJournal(pg_dsn, node_id="stopped", lease_s=1.0))
    batch = Batch()
    batch.events.append(("cli:stopped", 1, "Wrote", '{"n": 1}', time.time()))
    batch.rows.append(("cli:stopped", "cli", None, 0, time.time(), 1, 1, 0))
    batch.snapshots.append(("cli:stopped", 1, "{}", time.time()))
    batch.messages.append(("cli:stopped", 0, "{}"))
    statements = len(batch_statements(batch))
    assert statements == 4
    watcher = psycopg.connect(pg_dsn, autocommit=True)
    try:
        for stop_after in range(1, statements + 1):
            link = writer.connect()
            try:
                _stop_after(link.get(), stop_after, watcher)
                with pytest.raises((_Stopped, psycopg.Error)), writer.transaction(link):
                    writer.write_batch(link, batch)
            finally:
                link.close()
            assert watcher.execute("SELECT count(*) FROM events").fetchone() == (0,), stop_after
    finally:
        watcher.close()


def test_a_batch_lands_as_its_writes_would_one_by_one(pg_dsn: str) -> None:
    """One statement cannot upsert a row twice: a batch that writes a session's row twice,
    two snapshots of one session (the older last) and a transcript row twice lands as doing
    them in order would have; and a batch too big for one statement's parameters lands
    whole."""
    import time

    import psycopg

    from netclaw.persistence._writer import Batch
    from netclaw.persistence.postgres._journal import (
        _MAX_PARAMS,
        PostgresJournal,
        _PgWriter,
        batch_statements,
    )

    now = time.time()
    batch = Batch()
    many = _MAX_PARAMS // 5 + 10  # events take 5 parameters each: two statements
    batch.events.extend(("cli:big", seq, "Wrote", "{}", now) for seq in range(1, many + 1))
    batch.rows.append(("cli:big", "cli", "first", 1, now, 0, 1, 0))
    batch.rows.append(("cli:big", "cli", "second", 2, now, 0, many, 0))
    batch.snapshots.append(("cli:big", 9, '{"at": 9}', now))
    batch.snapshots.append(("cli:big", 5, '{"at": 5}', now))  # older, after: the newer stays
    batch.messages.extend([("cli:big", 0, '"a"'), ("cli:big", 1, '"b"'), ("cli:big", 0, '"c"')])
    assert len(batch_statements(batch)) == 5
    writer = _PgWriter(PostgresJournal(pg_dsn, node_id="n", lease_s=15.0))
    link = writer.connect()
    try:
        with writer.transaction(link):
            writer.write_batch(link, batch)
    finally:
        link.close()
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        assert db.execute("SELECT count(*), max(seq) FROM events").fetchone() == (many, many)
        assert db.execute("SELECT title, turns, last_seq FROM sessions").fetchall() == [("second", 2, many)]
        assert db.execute("SELECT seq, state FROM snapshots").fetchall() == [(9, '{"at": 9}')]
        rows = db.execute("SELECT idx, message FROM snapshot_messages ORDER BY idx").fetchall()
        assert rows == [(0, '"c"'), (1, '"b"')]
