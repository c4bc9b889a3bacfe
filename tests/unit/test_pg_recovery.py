"""A node's journal across a PostgreSQL restart (a server of the test's own, stopped and
started again): health reflects the present — an idle node is healthy again within
seconds of the database, without a write to prove it — and connections that went stale
while idle are replaced before use instead of failing the first request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from netclaw.errors import JournalError
from netclaw.persistence import NewEvent


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    from tests.postgres import server_for_tests

    yield from server_for_tests()


def ev(n: int) -> NewEvent:
    return NewEvent("Wrote", f'{{"n": {n}}}')


async def until(predicate: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_an_idle_node_is_healthy_again_soon_after_its_database_returns(own_postgres: Any) -> None:
    from netclaw.persistence.postgres import PostgresJournal, prepare_postgres

    dsn = own_postgres.create_database()
    prepare_postgres(dsn)
    journal = await PostgresJournal(dsn, node_id="a", lease_s=3).open()
    try:
        await journal.claim("s")
        assert await journal.append("s", 0, [ev(1)]) == 1
        await asyncio.to_thread(own_postgres.stop)
        with pytest.raises(JournalError):
            await journal.append("s", 1, [ev(2)])
        assert "the last journal commit failed" in str(journal.problem())
        await asyncio.to_thread(own_postgres.start)
        # Nothing is written from now on: the writer's probe and the lease renewal notice.
        # (bench/cluster.py measures how soon: the target is 5 s; here, only that it does.)
        await until(lambda: journal.problem() is None, 20, "health to recover")
        assert await journal.append("s", 1, [ev(2)]) == 2  # and it is still the session's owner
    finally:
        await journal.close()


async def test_connections_that_went_stale_while_idle_are_replaced_before_use(own_postgres: Any) -> None:
    from netclaw.persistence.postgres import PostgresJournal, prepare_postgres
    from netclaw.persistence.postgres._schema import IDLE_CHECK_S

    dsn = own_postgres.create_database()
    prepare_postgres(dsn)
    journal = await PostgresJournal(dsn, node_id="a", lease_s=30).open()
    try:
        await journal.claim("s")
        assert await journal.append("s", 0, [ev(1)]) == 1
        assert await journal.last_seq("s") == 1
        await asyncio.to_thread(own_postgres.stop)  # a restart while nothing happens
        await asyncio.to_thread(own_postgres.start)
        await asyncio.sleep(IDLE_CHECK_S + 0.2)  # time passing is the behaviour here: idle past the check
        # The first use of every pool and of the writer's connection works.
        assert await journal.owner("s") is None  # the lease store's pool
        assert await journal.last_seq("s") == 1  # the readers' pool
        assert await journal.append("s", 1, [ev(2)]) == 2  # the writer
        assert journal.problem() is None and journal.failed_commits == 0
    finally:
        await journal.close()


def test_a_writer_stalled_inside_a_transaction_lets_go_of_its_locks_after_a_lease(pg_dsn: str) -> None:
    """A node stopped between the statements of a write (SIGSTOP, a stalled VM) must not
    keep the row locks the node taking over its expired lease needs: the server ends the
    transaction once it sat idle for a lease's time."""
    import psycopg

    from netclaw.persistence.postgres._journal import _Link

    stalled = _Link(pg_dsn, lease_s=1.0).get()
    stalled.execute("CREATE TABLE IF NOT EXISTS stall_probe (id int PRIMARY KEY)")
    stalled.execute("INSERT INTO stall_probe VALUES (1) ON CONFLICT DO NOTHING")
    stalled.execute("BEGIN")
    stalled.execute("SELECT id FROM stall_probe WHERE id = 1 FOR UPDATE")  # then it stalls
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        other.execute("SET lock_timeout = '5s'")
        started = time.monotonic()
        other.execute("UPDATE stall_probe SET id = 1 WHERE id = 1")  # waits, then goes on
        assert time.monotonic() - started < 4
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        stalled.execute("SELECT 1")  # its transaction was ended for it
