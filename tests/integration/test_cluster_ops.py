"""Operating several nodes (in one process, on one PostgreSQL): which node owns a session,
moving a session to a named node, draining a node by hand, the rebalancer, and what
/api/cluster, /healthz and /metrics show. Drain on SIGTERM, held requests on a SIGKILL,
health after a database restart and rolling upgrades run the daemon as a process:
tests/e2e/test_cluster_operations.py."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DaemonHandle, wait_until
from tests.e2e.conftest import free_port
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, _last_user_text
from tests.integration.test_cluster import Node, node, resident  # noqa: F401 - the fixture


def slow(seconds: float) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        return Reply(text=f"echo: {_last_user_text(body)}", delay_s=seconds)

    return respond


def provider_calls(scripted: ScriptedOpenAIThread) -> collections.Counter[str]:
    """How often the provider was asked to answer each user text."""
    return collections.Counter(_last_user_text(body) for body in scripted.requests)


def users(handle: DaemonHandle, session_id: str) -> list[str]:
    return [m["content"] for m in handle.transcript(session_id) if m["role"] == "user"]


def in_background(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn(*args, **kwargs)), daemon=True)
    thread.start()
    return thread, result


def counted(once: Callable[[], int], rounds: collections.Counter[str], name: str) -> Callable[[], int]:
    """``once`` (a node's rebalancing round), counting its calls in ``rounds[name]``."""

    def round_() -> int:
        rounds[name] += 1
        return once()

    return round_


def test_any_node_says_which_node_owns_a_session(node: Node) -> None:  # noqa: F811
    a, b = node("a"), node("b")
    a.send("cli:who", "hello", wait=True)
    for asked in (a, b):
        owner = asked.http.get("/api/sessions/cli:who/owner").json()
        assert owner["node_id"] == "a" and owner["url"] == a.base_url, owner
        assert owner["asked"] == asked.daemon.settings.cluster.node_id
        assert owner["resident_here"] is (asked is a)
        assert owner["epoch"] >= 1 and owner["expires_in"] > 0
    nobody = b.http.get("/api/sessions/cli:nobody/owner").json()
    assert nobody["node_id"] is None and nobody["epoch"] is None


def test_a_session_moved_mid_turn_finishes_its_turn_and_runs_its_queued_input_on_the_new_node(
    node: Node,  # noqa: F811
    scripted: ScriptedOpenAIThread,
) -> None:
    """The move is asked of b; a (the owner) lets the running turn finish, starts no other,
    and hands the lease to b, which runs the queued message: each message reaches the
    provider once, and both waiting clients get their answer with no error."""
    a, b = node("a"), node("b")
    a.send("cli:mv", "warm up", wait=True)
    scripted.set_responder(slow(1.0))
    first, first_answer = in_background(a.send, "cli:mv", "first", wait=True)
    wait_until(lambda: provider_calls(scripted)["first"] == 1, 5, "the first turn running")
    second, second_answer = in_background(a.send, "cli:mv", "second", wait=True)
    wait_until(
        lambda: "second" in [m["content"] for m in a.transcript("cli:mv") if m.get("pending")], 5, "queued"
    )
    moved = b.http.post("/api/sessions/cli:mv/move", params={"to": "b"})
    assert moved.status_code == 200, moved.text
    assert moved.json() == {"session_id": "cli:mv", "to": "b", "moved": True}
    first.join(15)
    second.join(15)
    assert first_answer[0].status_code == 200 and first_answer[0].json()["reply"] == "echo: first"
    assert second_answer[0].status_code == 200, second_answer[0].text
    assert second_answer[0].json()["reply"] == "echo: second"
    wait_until(lambda: "cli:mv" in resident(b) and "cli:mv" not in resident(a), 5, "the session on b")
    calls = provider_calls(scripted)
    assert calls["first"] == 1 and calls["second"] == 1, calls  # no turn ran twice
    assert users(b, "cli:mv") == ["warm up", "first", "second"]
    owner = a.http.get("/api/sessions/cli:mv/owner").json()
    assert owner["node_id"] == "b"


def test_moving_to_a_node_that_is_not_live_is_refused(node: Node) -> None:  # noqa: F811
    a = node("a")
    a.send("cli:stay", "hello", wait=True)
    refused = a.http.post("/api/sessions/cli:stay/move", params={"to": "nowhere"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "node_unavailable"
    assert "cli:stay" in resident(a)
    missing = a.http.post("/api/sessions/cli:stay/move")
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_to"


def test_a_node_drained_by_hand_hands_its_sessions_over_takes_no_new_ones_and_resumes(
    node: Node,  # noqa: F811
) -> None:
    a, b = node("a"), node("b")
    for i in range(3):
        a.send(f"cli:d{i}", "hello", wait=True)
    drained = b.http.post("/api/cluster/nodes/a/drain")  # asked of b: passed on to a
    assert drained.status_code == 200, drained.text
    assert drained.json()["moved"] == 3 and drained.json()["left"] == []
    wait_until(lambda: {f"cli:d{i}" for i in range(3)} <= resident(b), 5, "the sessions on b")
    assert not resident(a)
    health = a.http.get("/healthz")
    assert health.status_code == 503 and health.json()["status"] == "draining"
    assert health.json()["cluster"]["state"] == "draining"
    # New input reaching a is served by b, and nothing starts on a.
    answer = a.send("cli:new", "fresh", wait=True)
    assert answer.status_code == 200 and answer.json()["reply"] == "echo: fresh", answer.text
    assert "cli:new" in resident(b) and not resident(a)
    assert a.send("cli:d0", "again", wait=True).json()["turn"] == 2
    status = b.http.get("/api/cluster").json()
    assert {n["node_id"]: n["state"] for n in status["nodes"]} == {"a": "draining", "b": "active"}
    resumed = a.http.post("/api/cluster/nodes/a/resume")
    assert resumed.status_code == 200 and resumed.json() == {"node_id": "a", "draining": False}
    assert a.http.get("/healthz").status_code == 200
    assert a.send("cli:after", "hi", wait=True).status_code == 200
    assert "cli:after" in resident(a)


def test_draining_the_only_node_by_hand_is_refused(node: Node) -> None:  # noqa: F811
    a = node("a")
    refused = a.http.post("/api/cluster/nodes/a/drain")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "no_other_node"
    assert a.http.get("/healthz").status_code == 200
    unknown = a.http.post("/api/cluster/nodes/zz/drain")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "node_not_found"


def test_the_rebalancer_gives_a_new_node_its_share(node: Node) -> None:  # noqa: F811
    fast = {"rebalance_every_s": 0.5, "rebalance_batch": 3}
    a = node("a", cluster=fast)
    for i in range(8):
        a.send(f"cli:r{i}", "hello", wait=True)
    b = node("b", cluster=fast)
    wait_until(lambda: len(resident(b)) >= 3, 15, "b's share of the sessions")
    # A few more rounds on each node: nothing moves back and forth.
    rounds: collections.Counter[str] = collections.Counter()
    for handle in (a, b):
        cluster = handle.daemon.cluster
        assert cluster is not None
        cluster.rebalance_once = counted(
            cluster.rebalance_once, rounds, handle.daemon.settings.cluster.node_id
        )  # type: ignore[method-assign]
    wait_until(lambda: min(rounds["a"], rounds["b"]) >= 3, 15, "three more rebalancing rounds on each node")
    assert len(resident(a)) + len(resident(b)) == 8
    assert abs(len(resident(a)) - len(resident(b))) <= 2, (resident(a), resident(b))
    moved = sorted(resident(b))
    for session_id in moved:  # each moved session goes on where it is, from any node
        assert a.send(session_id, "still there?", wait=True).json()["turn"] == 2


def test_cluster_status_health_and_metrics_name_the_nodes(node: Node) -> None:  # noqa: F811
    a, b = node("a"), node("b")
    a.send("cli:m", "hello", wait=True)
    b.send("cli:m", "again", wait=True)  # forwarded to a
    status = a.http.get("/api/cluster").json()
    assert status["node_id"] == "a" and not status["draining"]
    nodes = {n["node_id"]: n for n in status["nodes"]}
    assert set(nodes) == {"a", "b"}
    assert nodes["a"]["sessions"] == 1 and nodes["a"]["state"] == "active"
    assert nodes["a"]["version"] and nodes["a"]["protocol"] >= 1
    health = b.http.get("/healthz").json()
    assert health["cluster"]["node_id"] == "b" and health["cluster"]["state"] == "active"
    assert [p["node_id"] for p in health["cluster"]["peers"]] == ["a"]
    samples = scrape(b)
    assert samples[("netclaw_cluster_forwards_total", (("kind", "api"), ("node", "b")))] == 1
    assert ("netclaw_sessions_resident", (("node", "b"),)) in samples
    info = [labels for name, labels in samples if name == "netclaw_node_info"]
    assert info and dict(info[0])["node"] == "b" and dict(info[0])["state"] == "active"
    renewals = [labels for name, labels in samples if name == "netclaw_cluster_lease_renewals_total"]
    assert renewals and all(dict(labels)["node"] == "b" for labels in renewals)
    assert all(dict(labels).get("node") == "b" for _, labels in samples), "every series names its node"


def scrape(handle: DaemonHandle) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    text = httpx.get(f"{handle.base_url}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def set_advertised(dsn: str, node_id: str, url: str) -> None:
    """Point the registry's address of ``node_id`` somewhere nothing answers (a node the
    others cannot reach, though it reaches the database)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE nodes SET advertise_url = %s WHERE node_id = %s", (url, node_id))


def test_a_request_for_a_session_whose_node_cannot_be_reached_is_held_then_answered_503_with_retry_after(
    node: Node,  # noqa: F811
    pg_dsn: str,
) -> None:
    """a reaches the database (it keeps renewing) but not b: b holds the request for
    hold_s, the lease never moves, and the client gets a 503 saying when to try again —
    not a wait until its own timeout."""
    a, b = node("a"), node("b", cluster={"hold_s": 2.0})
    a.send("cli:cut", "hello", wait=True)
    set_advertised(pg_dsn, "a", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    answer = b.send("cli:cut", "are you there?", wait=True)
    took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert 1.5 <= took < 10, took
    assert int(answer.headers["Retry-After"]) >= 1
    assert "did not answer" in answer.json()["error"]["message"]
    assert users(a, "cli:cut") == ["hello"]  # nothing recorded


def test_a_request_for_a_dead_nodes_session_is_held_until_its_lease_expires_and_served(
    node: Node,  # noqa: F811
    pg_dsn: str,
) -> None:
    a, b = node("a"), node("b")
    a.send("cli:gone", "hello", wait=True)
    assert a.daemon.io is not None and a.daemon.journal is not None
    leases = a.daemon.journal.leases  # type: ignore[attr-defined]
    a.daemon.io.run(leases.stop_renewing())  # a dies, as far as the others can tell
    set_advertised(pg_dsn, "a", f"http://127.0.0.1:{free_port()}")
    answer = b.send("cli:gone", "still there?", wait=True)
    assert answer.status_code == 200, answer.text
    assert answer.json()["turn"] == 2 and answer.json()["reply"] == "echo: still there?"
    assert "cli:gone" in resident(b)
    assert scrape(b)[("netclaw_cluster_held_requests_total", (("node", "b"), ("outcome", "served")))] == 1


def test_the_cluster_commands_as_the_docs_show_them(node: Node, tmp_path: Any) -> None:  # noqa: F811
    """docs/scale-out.md: `netclaw cluster status|owner|move|drain|resume`, run as written
    against node a's config (any node answers)."""
    from tests.e2e.conftest import run_cli, subprocess_env
    from tests.integration.test_cluster import TOKEN

    a, b = node("a"), node("b")
    a.send("cli:ops", "hello", wait=True)
    assert a.daemon.port is not None and b.daemon.port is not None
    config = tmp_path / "node-a.json"
    config.write_text(
        json.dumps(
            {"gateway": {"host": "127.0.0.1", "port": a.daemon.port, "control_token_env": "NODE_TOKEN"}}
        )
    )
    env = subprocess_env(NODE_TOKEN=TOKEN)

    def cli(*args: str) -> str:
        done = run_cli("cluster", *args, "--config", str(config), env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    status = cli("status")
    assert "*a " in status and " b " in status and "2 live node(s)" in status, status
    assert "node a (" in cli("owner", "cli:ops")
    assert cli("move", "cli:ops", "b").strip() == "cli:ops is on node b now"
    assert json.loads(cli("owner", "cli:ops", "--json"))["node_id"] == "b"
    assert "b is draining: 1 session(s) handed to other nodes" in cli("drain", "b")
    assert "cli:ops" in resident(a)
    assert "draining" in cli("status")
    assert cli("resume", "b").strip() == "b takes sessions again"
    overall = run_cli("status", "--config", str(config), env=env, timeout=60)
    assert overall.returncode == 0, overall.stdout
    assert "cluster:   node a active" in overall.stdout and "peers: b (active)" in overall.stdout, (
        overall.stdout
    )
    bad = run_cli("cluster", "move", "cli:ops", "--config", str(config), env=env)
    assert bad.returncode == 2 and "name the node" in bad.stderr


def test_a_watched_session_moves_its_stream_ends_and_a_new_one_follows_it(node: Node) -> None:  # noqa: F811
    a, b = node("a"), node("b")
    a.send("cli:watched", "hello", wait=True)
    ended = threading.Event()

    def watch(handle: DaemonHandle, seen: list[str], until: str | None = None) -> None:
        auth = {"Authorization": f"Bearer {handle.token}"}
        with (
            httpx.Client(base_url=handle.base_url, headers=auth, timeout=30) as client,
            client.stream("GET", "/api/sessions/cli:watched/events") as stream,
        ):
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    seen.append(line[6:].strip())
                if until is not None and until in line:
                    break
        ended.set()

    watching: list[str] = []
    watcher, _ = in_background(watch, a, watching)
    wait_until(lambda: "cli:watched" in resident(a), 5, "watched")
    wait_until(lambda: "joined" in watching, 5, "the stream to be joined")
    moved = a.http.post("/api/sessions/cli:watched/move", params={"to": "b"})
    assert moved.status_code == 200 and moved.json()["moved"], moved.text
    assert ended.wait(10), "the stream on the old node did not end"
    wait_until(lambda: "cli:watched" in resident(b) and "cli:watched" not in resident(a), 5, "on b")
    ended.clear()
    seen: list[str] = []
    follower, _ = in_background(watch, a, seen, "echo: again")  # through a: forwarded to b
    wait_until(lambda: "joined" in seen, 5, "the new stream to be joined")
    assert a.send("cli:watched", "again", wait=True).json()["turn"] == 2
    follower.join(10)
    assert seen and "joined" in seen[0], seen
    watcher.join(1)


def test_a_request_to_a_node_that_went_silent_is_given_up_once_its_lease_moves(
    node: Node,  # noqa: F811
    pg_dsn: str,
) -> None:
    """a accepts the connection and then says nothing (a paused process: the kernel still
    accepts), and stops renewing: b does not wait for its read timeout, but gives the
    request up as soon as a's lease on the session ends, and serves it itself."""
    import socket

    a, b = node("a"), node("b")
    a.send("cli:silent", "hello", wait=True)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)  # accepts (the kernel does), never answers
    try:
        set_advertised(pg_dsn, "a", f"http://127.0.0.1:{hole.getsockname()[1]}")
        assert a.daemon.io is not None and a.daemon.journal is not None
        a.daemon.io.run(a.daemon.journal.leases.stop_renewing())  # type: ignore[attr-defined]
        started = time.monotonic()
        answer = b.send("cli:silent", "are you there?", wait=True)
        took = time.monotonic() - started
    finally:
        hole.close()
    assert answer.status_code == 200, answer.text
    assert answer.json()["turn"] == 2 and took < 30  # not the 45 s+ read timeout
    assert "cli:silent" in resident(b)
