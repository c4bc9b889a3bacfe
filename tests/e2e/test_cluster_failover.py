"""Three daemon processes on one PostgreSQL: a node killed under load loses nothing.

Every node takes messages for every session (forwarding to the owner); one owner is
SIGKILLed while messages keep coming. Its sessions are recovered on the other nodes
once their leases expire — including the turns it owed — and every acknowledged (202)
message is in its session's journal exactly once, answered. And a node cut off from
its database answers 503 instead of taking input it cannot keep, and takes input
again once the database is back.
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import (
    DaemonProcess,
    Daemons,
    config_data,
    free_port,
    subprocess_env,
    wait_until,
    write_json,
)
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread

pytestmark = pytest.mark.slow

TOKEN = "cluster-e2e-token-0123456789abcdef"
LEASE_S = 2.0
SESSIONS = [f"cli:load-{i}" for i in range(6)]


def start_node(
    daemons: Daemons,
    root: Path,
    scripted: ScriptedOpenAIThread,
    dsn: str,
    name: str,
    *,
    launcher: list[str] | None = None,
    env: dict[str, str] | None = None,
    **sections: Any,
) -> DaemonProcess:
    """Node ``name`` of the cluster; ``launcher`` runs ``netclaw`` some other way (its
    arguments follow), ``env`` adds variables, ``sections`` add config."""
    port = free_port()
    data_dir = root / name / "data"
    config = write_json(
        root / name / "netclaw.json",
        config_data(
            data_dir,
            scripted.base_url,
            port,
            gateway={"control_token_env": "CLUSTER_E2E_TOKEN"},
            journal={"backend": "postgres", "dsn_env": "CLUSTER_E2E_DSN"},
            cluster={"node_id": name, "advertise_url": f"http://127.0.0.1:{port}", "lease_s": LEASE_S},
            **sections,
        ),
    )
    argv = [*launcher, "run", "--config", str(config)] if launcher else None
    environment = subprocess_env(CLUSTER_E2E_DSN=dsn, CLUSTER_E2E_TOKEN=TOKEN, **(env or {}))
    return daemons.start(config, data_dir, port, env=environment, token=TOKEN, argv=argv)


def owners(dsn: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT persistence_id, node_id FROM leases WHERE expires_at > clock_timestamp()"
        ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def slow_echo(body: dict[str, Any]) -> Reply:
    """Echo the last user message after a little while, so turns are in flight at a kill."""
    from tests.fakes.scripted_openai import _last_user_text

    return Reply(text=f"echo: {_last_user_text(body)}", delay_s=0.15)


class Load:
    """Messages sent round-robin to the nodes still alive, each with its own idempotency
    key; a message counts as acknowledged only on a 202 (a 503 or a dropped connection is
    retried with the same key, as a client would)."""

    def __init__(
        self,
        nodes: list[DaemonProcess],
        sessions: list[str] = SESSIONS,
        workers: int = 2,
        pace_s: float = 0.02,
    ) -> None:
        self.pace_s = pace_s
        self.nodes = nodes
        self.sessions = sessions
        self.dead: set[int] = set()
        self.acked: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)  # (id, text)
        self.refused = 0
        self._stop = threading.Event()
        self.flowing = threading.Event()  # cleared: no new request is sent
        self.flowing.set()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, worker: int) -> None:
        rng = random.Random(worker)
        clients = {
            i: httpx.Client(base_url=n.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            for i, n in enumerate(self.nodes)
        }
        try:
            while not self._stop.is_set():
                if not self.flowing.wait(0.1):
                    continue
                n = next(self._counter)
                session = rng.choice(self.sessions)
                text = f"m{n}"
                self._send(clients, rng, session, text, key=f"k{n}")
                time.sleep(self.pace_s)
        finally:
            for client in clients.values():
                client.close()

    def _send(
        self, clients: dict[int, httpx.Client], rng: random.Random, session: str, text: str, key: str
    ) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            alive = [i for i in clients if i not in self.dead]
            node = rng.choice(alive)
            try:
                answer = clients[node].post(
                    f"/api/sessions/{session}/messages",
                    json={"text": text, "user": "load"},
                    headers={"Idempotency-Key": key},
                )
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if answer.status_code == 202:
                with self._lock:
                    self.acked[session].append((answer.json()["message_id"], text))
                return
            self.refused += 1
            time.sleep(0.2)


def replied_to(node: DaemonProcess, session_id: str, message_id: str) -> bool:
    """The message is in the session, an answer after it (what is queued behind it aside)."""
    messages = node.session(session_id)["messages"]
    at = next((i for i, m in enumerate(messages) if m["id"] == message_id), None)
    return at is not None and any(m["role"] == "assistant" for m in messages[at + 1 :])


def answered(node: DaemonProcess, session_id: str, acked: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The session once every acknowledged message is in it and answered (nothing queued)."""
    session = node.session(session_id)
    messages = session["messages"]
    if any(m.get("pending") for m in messages):
        return None
    for message_id, _ in acked:
        at = next((i for i, m in enumerate(messages) if m["id"] == message_id), None)
        if at is None or not any(m["role"] == "assistant" for m in messages[at + 1 :]):
            return None
    return session


def test_a_node_killed_under_load_loses_and_repeats_nothing(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, pg_dsn: str
) -> None:
    scripted.set_responder(slow_echo)
    nodes = [start_node(daemons, tmp_path, scripted, pg_dsn, f"n{i}") for i in (1, 2, 3)]
    with Load(nodes) as load:
        wait_until(lambda: sum(map(len, load.acked.values())) >= 30, 30, "load flowing")
        held = collections.Counter(owners(pg_dsn).values())
        victim_name = held.most_common(1)[0][0] if held else "n1"
        victim = next(i for i, n in enumerate(nodes) if n.config.parent.name == victim_name)
        owned = {sid for sid, node in owners(pg_dsn).items() if node == victim_name}
        load.dead.add(victim)
        nodes[victim].sigkill()
        killed_at = time.monotonic()
        # The load goes on, to the survivors, until the victim's leases have moved and past that.
        wait_until(
            lambda: not set(owners(pg_dsn).values()) & {victim_name}, LEASE_S + 10, "the leases to move"
        )
        moved = sum(map(len, load.acked.values()))
        wait_until(lambda: sum(map(len, load.acked.values())) >= moved + 10, 30, "more load after the move")
    survivor = nodes[(victim + 1) % 3]
    recovered = {}
    for session_id in SESSIONS:
        recovered[session_id] = wait_until(
            lambda sid=session_id: answered(survivor, sid, load.acked[sid]),  # type: ignore[misc]
            LEASE_S + 20,
            f"every acknowledged message of {session_id} answered",
        )
    failover_s = time.monotonic() - killed_at
    assert owned, "the victim owned sessions when it was killed"
    assert not owned & set(owners(pg_dsn).values())
    for session_id, session in recovered.items():
        users = [m for m in session["messages"] if m["role"] == "user"]
        ids = collections.Counter(m["id"] for m in users)
        texts = collections.Counter(m["content"] for m in users)
        assert all(c == 1 for c in ids.values()), f"{session_id}: a message recorded twice: {ids}"
        assert all(c == 1 for c in texts.values()), f"{session_id}: an input recorded twice: {texts}"
        assert {mid for mid, _ in load.acked[session_id]} <= set(ids), f"{session_id}: lost an acked message"
    assert failover_s < LEASE_S + 20


def test_two_nodes_contending_for_one_session_never_both_write(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, pg_dsn: str
) -> None:
    """Both nodes take messages for one session; its owner is paused (SIGSTOP: a GC pause, a
    stalled VM) past its lease with requests in flight, the other takes the session over,
    and the paused one wakes believing it still owns it. Its writes are refused, so the
    session's history is one line: every acknowledged message once, in turn order."""
    scripted.set_responder(slow_echo)
    session_id = "cli:contended"
    nodes = [start_node(daemons, tmp_path, scripted, pg_dsn, name) for name in ("n1", "n2")]
    with Load(nodes, sessions=[session_id], workers=3, pace_s=0.4) as load:  # fewer than it answers
        wait_until(lambda: len(load.acked[session_id]) >= 10, 30, "load flowing")
        owner = next(i for i, n in enumerate(nodes) if n.config.parent.name == owners(pg_dsn)[session_id])
        other = nodes[1 - owner]
        load.flowing.clear()
        os.kill(nodes[owner].pid, signal.SIGSTOP)  # requests in flight to it wait
        load.dead.add(owner)
        try:
            # New requests go to the live node once the lease has expired (before, it
            # would forward them to the paused owner, and they would wait too).
            # (Or is taken already: the other node's rescue looks every lease_s / 2.)
            paused = nodes[owner].config.parent.name
            wait_until(lambda: owners(pg_dsn).get(session_id) != paused, LEASE_S + 5, "the lease to expire")
            load.flowing.set()
            try:
                message_id = other.acked(session_id, "after the pause", idempotency_key="pause")
            except AssertionError as exc:  # say what the database waited on (it once showed the paused
                # node's write transaction never ended: see postgres._journal.batch_statements)
                raise AssertionError(f"{exc}\n{pg_waits(pg_dsn)}") from exc
            load.acked[session_id].append((message_id, "after the pause"))
            assert owners(pg_dsn).get(session_id) == other.config.parent.name
            wait_until(lambda: replied_to(other, session_id, message_id), 30, "the new owner to answer")
        finally:
            os.kill(nodes[owner].pid, signal.SIGCONT)
            load.dead.discard(owner)
        woken = len(load.acked[session_id])
        wait_until(  # both nodes live again, the load going on
            lambda: len(load.acked[session_id]) >= woken + 5, 30, "more load with both nodes live"
        )
    session = wait_until(
        lambda: answered(other, session_id, load.acked[session_id]), 30, "every message answered"
    )
    users = [m for m in session["messages"] if m["role"] == "user"]
    ids = collections.Counter(m["id"] for m in users)
    assert all(c == 1 for c in ids.values()), f"a message recorded twice: {ids}"
    assert {mid for mid, _ in load.acked[session_id]} <= set(ids), "an acknowledged message lost"
    assert len(users) == len(load.acked[session_id])  # nothing recorded that was not acknowledged
    turns = journal_turns(pg_dsn, session_id)
    assert turns == list(range(1, len(turns) + 1)), f"turn numbers repeat or skip: {turns}"
    # It finds out at its next renewal (every lease_s / 2), which a loaded machine may delay,
    # or at its write, refused by the fence; or, paused for longer than the write's timeout
    # (30 s: the monotonic clock ran on), its session failed with the outcome unknown and its
    # restart here found the session resident on the other node.
    wait_until(
        lambda: any(s in nodes[owner].stderr() for s in ("taken over by", "is resident on node")),
        LEASE_S + 10,
        "the paused node to find its lease gone",
    )


def pg_waits(dsn: str) -> str:
    """The database's connections (state, what each waits on, its query) and its lock waits
    and the leases: to tell, when a takeover stalls, whose transaction held it up."""
    import psycopg

    lines = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for row in conn.execute(
            "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 160)"
            " FROM pg_stat_activity WHERE datname = current_database() AND pid != pg_backend_pid()"
        ):
            lines.append(f"connection {row}")
        for row in conn.execute(
            "SELECT pid, locktype, relation::regclass, mode, granted FROM pg_locks"
            " WHERE NOT granted OR locktype IN ('tuple', 'advisory')"
        ):
            lines.append(f"lock {row}")
        for row in conn.execute("SELECT persistence_id, node_id, epoch, expires_at - now() FROM leases"):
            lines.append(f"lease {row}")
    return "\n".join(lines)


def journal_turns(dsn: str, session_id: str) -> list[int]:
    """The turn number of every turn the session's journal recorded, in order."""
    import json

    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT payload FROM events WHERE persistence_id = %s AND type = 'TurnRecorded' ORDER BY seq",
            (session_id,),
        ).fetchall()
    return [int(json.loads(r[0])["turn"]) for r in rows]


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A server of this test's own: it is stopped and started again mid-test."""
    from tests.postgres import server_for_tests

    yield from server_for_tests()


def test_a_node_cut_off_from_its_database_answers_503_and_recovers(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, own_postgres: Any
) -> None:
    from netclaw.persistence.postgres import prepare_postgres

    dsn = own_postgres.create_database()
    prepare_postgres(dsn)
    node = start_node(daemons, tmp_path, scripted, dsn, "n1")
    assert node.post("cli:db", "before", wait=True).json()["reply"] == "echo: before"

    own_postgres.stop()
    refused = node.post("cli:db", "while down")
    assert refused.status_code == 503, refused.text
    wait_until(lambda: node.health()["status"] == "degraded", 10, "health to say the journal is down")

    own_postgres.start()
    accepted: Callable[[], httpx.Response | None] = lambda: (  # noqa: E731
        answer if (answer := node.post("cli:db", "after", wait=True)).status_code == 200 else None
    )
    answer = wait_until(accepted, 30, "the node to take input again")
    assert answer is not None and answer.json()["reply"] == "echo: after"
    users = [m["content"] for m in node.session("cli:db")["messages"] if m["role"] == "user"]
    assert users == ["before", "after"]
