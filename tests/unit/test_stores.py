"""The reminder store, the webhook delivery log and the warm-restart manifest on both
backends (a SQLite file, a real PostgreSQL): one contract."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from netclaw.errors import IdempotencyKeyReused, JournalError
from netclaw.persistence import Reminder, SqliteDeliveryLog, SqliteReminderStore, prepare_database
from netclaw.persistence._manifest import save_manifest as save_sqlite_manifest
from netclaw.persistence._manifest import take_manifest as take_sqlite_manifest
from netclaw.reminders import Schedule


@dataclass
class Db:
    backend: str
    where: Any  # the SQLite file's path, or the PostgreSQL DSN


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    if request.param == "sqlite":
        path = tmp_path / "netclaw.db"
        prepare_database(path)
        return Db("sqlite", path)
    return Db("postgres", request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def reminders(db: Db) -> AsyncIterator[Any]:
    if db.backend == "sqlite":
        store: Any = await SqliteReminderStore(db.where).open()
    else:
        from netclaw.persistence.postgres import PostgresReminderStore

        store = await PostgresReminderStore(db.where).open()
    yield store
    await store.close()


@pytest.fixture
async def deliveries(db: Db) -> AsyncIterator[Any]:
    if db.backend == "sqlite":
        log: Any = await SqliteDeliveryLog(db.where).open()
    else:
        from netclaw.persistence.postgres import PostgresDeliveryLog

        log = await PostgresDeliveryLog(db.where).open()
    yield log
    await log.close()


def reminder(rid: str, session: str = "cli:a", next_fire: float | None = 100.0, **kw: Any) -> Reminder:
    return Reminder(
        id=rid,
        session_id=session,
        text=f"do {rid}",
        schedule=Schedule("every", every_s=60.0),
        next_fire=next_fire,
        catch_up="latest",
        created_by=kw.pop("created_by", "api"),
        created_at=1.0,
        **kw,
    )


async def test_reminders_add_list_due_fire_and_delete(reminders: Any) -> None:
    await reminders.add(reminder("r1", next_fire=300.0))
    await reminders.add(
        reminder("r2", next_fire=100.0, name="standup", deliver={"channel": "slack", "to": "C1"})
    )
    await reminders.add(reminder("r3", session="cli:b", next_fire=None))
    with pytest.raises(JournalError):
        await reminders.add(reminder("r1"))  # the id is taken
    assert [r.id for r in await reminders.listing()] == ["r2", "r1", "r3"]  # by next fire, done last
    assert [r.id for r in await reminders.listing("cli:a")] == ["r2", "r1"]
    assert await reminders.count("cli:a") == 2
    assert await reminders.earliest() == 100.0
    got = await reminders.get("r2")
    assert got == reminder("r2", next_fire=100.0, name="standup", deliver={"channel": "slack", "to": "C1"})
    assert [r.id for r in await reminders.due(200.0)] == ["r2"]

    await reminders.fired("r2", 100.0, 160.0)
    again = await reminders.get("r2")
    assert again is not None and (again.next_fire, again.fired) == (160.0, 1)
    await reminders.fired("r2", 100.0, 999.0)  # a stale fire changes nothing
    again = await reminders.get("r2")
    assert again is not None and again.next_fire == 160.0
    await reminders.fired("r1", 300.0, None)  # a one-shot is done: it goes
    assert await reminders.get("r1") is None

    await reminders.upsert(reminder("r3", session="cli:b", next_fire=50.0))
    assert await reminders.earliest() == 50.0
    assert await reminders.delete("r3") and not await reminders.delete("r3")


async def test_reminders_made_by_the_config_are_pruned_to_what_it_still_names(reminders: Any) -> None:
    for rid, by in (("c1", "config:a"), ("c2", "config:b"), ("u1", "api"), ("c_3", "config_x")):
        await reminders.add(reminder(rid, created_by=by))
    assert await reminders.delete_where("config:", ["c1"]) == 1
    assert sorted(r.id for r in await reminders.listing()) == ["c1", "c_3", "u1"]


async def test_a_delivery_key_names_one_session_and_one_body(deliveries: Any) -> None:
    first = await deliveries.session_for("gh", "k1", "webhook:gh:1", "sha-a")
    assert first == "webhook:gh:1"
    assert await deliveries.session_for("gh", "k1", "webhook:gh:2", "sha-a") == "webhook:gh:1"
    assert await deliveries.session_for("other", "k1", "webhook:other:1", "sha-a") == "webhook:other:1"
    with pytest.raises(IdempotencyKeyReused):
        await deliveries.session_for("gh", "k1", "webhook:gh:3", "sha-b")


async def test_concurrent_retries_of_one_delivery_agree(deliveries: Any) -> None:
    answers = await asyncio.gather(
        *(deliveries.session_for("gh", "same", f"webhook:gh:{i}", "sha") for i in range(10))
    )
    assert len(set(answers)) == 1


async def test_deliveries_beside_another_writer_never_meet_a_locked_database(tmp_path: Path) -> None:
    """The journal's writer commits on its own connection while webhook deliveries arrive
    together: no delivery may see "database is locked" (a read left open on the shared
    connection made another request's write meet a stale snapshot, at once)."""
    path = tmp_path / "netclaw.db"
    prepare_database(path)
    log = await SqliteDeliveryLog(path).open()
    stop = threading.Event()

    def journal_writer() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        n = 0
        while not stop.is_set():
            n += 1
            conn.execute(
                "INSERT INTO webhook_deliveries (route, key, session_id, created) VALUES ('other', ?, 's', 0)",
                (f"w{n}",),
            )
            time.sleep(0.0005)  # commits in a stream, as group commits come, not a lock held
        conn.close()

    writer = threading.Thread(target=journal_writer)
    writer.start()

    async def delivery(n: int) -> None:
        await asyncio.sleep(n % 7 * 0.0003)  # arriving at different moments, not in step
        await log.session_for("ci", f"k{n}", f"webhook:ci:{n}", "sha")
        await log.first_key_of("ci", f"sig{n}", f"k{n}", 9e9)

    try:
        for round_ in range(10):
            await asyncio.gather(*(delivery(round_ * 100 + i) for i in range(40)))
    finally:
        stop.set()
        writer.join()
        await log.close()


async def test_a_signature_is_accepted_once(deliveries: Any) -> None:
    assert await deliveries.first_key_of("gh", "sig", "k1", 9e9) == "k1"
    assert await deliveries.first_key_of("gh", "sig", "k2", 9e9) == "k1"
    assert await deliveries.first_key_of("gh", "sig2", "k2", 9e9) == "k2"


def test_the_manifest_is_taken_once(db: Db) -> None:
    if db.backend == "sqlite":
        save_sqlite_manifest(db.where, ["cli:b", "cli:a"], 5.0)
        taken, again = take_sqlite_manifest(db.where), take_sqlite_manifest(db.where)
    else:
        from netclaw.persistence.postgres import save_manifest, take_manifest

        save_manifest(db.where, "node-1", ["cli:b", "cli:a"], 5.0)
        save_manifest(db.where, "node-2", ["cli:z"], 6.0)  # another node's: not ours to take
        taken, again = take_manifest(db.where, "node-1"), take_manifest(db.where, "node-1")
        other = take_manifest(db.where, "node-2")
        assert other is not None and other.session_ids == ("cli:z",)
    assert taken is not None and taken.session_ids == ("cli:a", "cli:b") and taken.stopped_at == 5.0
    assert again is None


async def test_a_due_reminder_is_claimed_by_one_node_until_fired_or_expired(pg_dsn: str) -> None:
    from netclaw.persistence.postgres import PostgresReminderStore

    a = await PostgresReminderStore(pg_dsn, node_id="a", claim_s=30.0).open()
    b = await PostgresReminderStore(pg_dsn, node_id="b", claim_s=30.0).open()
    try:
        await a.add(reminder("r1", next_fire=100.0))
        await a.add(reminder("r2", next_fire=110.0))
        assert [r.id for r in await a.due(120.0)] == ["r1", "r2"]
        assert await b.due(120.0) == []  # a is firing them
        assert await b.earliest() == 150.0  # due again for b when a's claim expires
        assert [r.id for r in await a.due(121.0)] == ["r1", "r2"]  # a retries its own
        await a.fired("r1", 100.0, 130.0)  # fired: claim settled, the next time is anyone's
        assert [r.id for r in await b.due(140.0)] == ["r1"]  # r2 is still a's (until 151)
        # a died with r2 claimed: once the claim expires, b fires it
        assert [r.id for r in await b.due(151.0)] == ["r2", "r1"]  # by next fire
        assert await a.due(151.0) == []
    finally:
        await a.close()
        await b.close()


async def test_a_paused_reminder_is_never_due_and_resumes_at_its_new_time(reminders: Any) -> None:
    await reminders.add(reminder("r1", next_fire=100.0))
    assert await reminders.set_next_fire("r1", None)
    found = await reminders.get("r1")
    assert found.paused and await reminders.due(10_000.0) == [] and await reminders.earliest() is None
    # A fire that was under way when it was paused does not un-pause it.
    await reminders.fired("r1", 100.0, 160.0)
    assert (await reminders.get("r1")).paused
    assert await reminders.set_next_fire("r1", 500.0)
    assert [r.id for r in await reminders.due(500.0)] == ["r1"] and not (await reminders.get("r1")).paused
    assert not await reminders.set_next_fire("missing", None)
