"""Two nodes on one PostgreSQL, in one process: each session is resident on one node,
and whatever reaches the other node for it — API calls, SSE streams, webhook input — is
answered by its owner (forwarded over HTTP); Discord's one gateway connection is held by
one node at a time. The failover of a node that dies is
tests/e2e/test_cluster_failover.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.errors import SessionMoved
from netclaw.process.runtime import Reply
from netclaw.sessions import ReportStatus, StatusReport
from tests.conftest import DaemonHandle, wait_until
from tests.e2e.conftest import free_port
from tests.fakes.discord_port import FakeDiscordServer
from tests.fakes.scripted_openai import Reply as ScriptedReply
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.slack_api import APP_TOKEN as SLACK_APP_TOKEN
from tests.fakes.slack_api import BOT_TOKEN as SLACK_BOT_TOKEN
from tests.fakes.slack_api import FakeSlackThread
from tests.integration.test_discord import ALLOWED, BOT_ID, discord_server  # noqa: F401 - the fixture
from tests.integration.test_sessions import chat_rows
from tests.integration.test_slack import MENTION, fake_slack, reply_in  # noqa: F401 - the fixture
from tests.integration.test_webhooks import deliver, routes, secrets  # noqa: F401 - the fixture

Node = Callable[..., DaemonHandle]
TOKEN = "cluster-test-token-0123456789abcdef"


@pytest.fixture
def node(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, start_daemon: Callable[..., DaemonHandle], tmp_path: Path
) -> Node:
    monkeypatch.setenv("CLUSTER_TEST_PG_DSN", pg_dsn)
    monkeypatch.setenv("CLUSTER_TEST_TOKEN", TOKEN)

    def start(name: str, **sections: Any) -> DaemonHandle:
        port = free_port()
        cluster = {
            "node_id": name,
            "advertise_url": f"http://127.0.0.1:{port}",
            "lease_s": 3,
            "drain_linger_s": 0,
        }
        return start_daemon(
            data_dir=str(tmp_path / name),
            gateway={"host": "127.0.0.1", "port": port, "control_token_env": "CLUSTER_TEST_TOKEN"},
            journal={"backend": "postgres", "dsn_env": "CLUSTER_TEST_PG_DSN"},
            cluster={**cluster, **sections.pop("cluster", {})},
            **sections,
        )

    return start


def resident(handle: DaemonHandle) -> set[str]:
    assert handle.daemon.manager is not None
    return set(handle.daemon.manager.resident())


def forwarded(handle: DaemonHandle) -> int:
    assert handle.daemon.forwarder is not None
    return handle.daemon.forwarder.forwarded


def test_a_message_sent_to_another_node_is_answered_by_the_sessions_owner(node: Node) -> None:
    a, b = node("a"), node("b")
    assert a.send("cli:one", "first", wait=True).json()["reply"] == "echo: first"
    answer = b.send("cli:one", "second", wait=True)
    assert answer.status_code == 200, answer.text
    assert answer.json()["turn"] == 2 and answer.json()["reply"] == "echo: second"
    assert forwarded(b) == 1 and forwarded(a) == 0
    assert "cli:one" in resident(a) and "cli:one" not in resident(b)
    # any node shows the same conversation: its owner's
    assert chat_rows(b.transcript("cli:one")) == chat_rows(a.transcript("cli:one"))
    assert [text for _, text in chat_rows(a.transcript("cli:one"))] == [
        "first",
        "echo: first",
        "second",
        "echo: second",
    ]
    # a control call too
    assert b.http.post("/api/sessions/cli:one/cancel").json() == {"cancelled": False}
    assert forwarded(b) >= 3


def test_an_idempotent_resend_through_another_node_is_recorded_once(node: Node) -> None:
    a, b = node("a"), node("b")
    first = a.send("cli:key", "once", headers={"Idempotency-Key": "k-1"})
    again = b.send("cli:key", "once", headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202 and again.status_code == 202, again.text
    assert again.json()["message_id"] == first.json()["message_id"] and again.json()["duplicate"]
    wait_until(lambda: len(chat_rows(a.transcript("cli:key"))) == 2, 10, "the one reply")


def test_an_sse_stream_on_another_node_carries_the_owners_outputs(node: Node) -> None:
    a, b = node("a"), node("b")
    a.send("cli:watch", "hello", wait=True)  # resident on a
    seen: list[dict[str, Any]] = []
    opened = threading.Event()

    def watch() -> None:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with (
            httpx.Client(base_url=b.base_url, headers=auth, timeout=30) as client,
            client.stream("GET", "/api/sessions/cli:watch/events") as stream,
        ):
            opened.set()
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                    if seen[-1].get("status") == "completed" and seen[-1].get("turn") == 2:
                        return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert opened.wait(10)
    wait_until(lambda: forwarded(b) >= 1, 5, "the stream forwarded to a")
    a.send("cli:watch", "are you there", wait=True)
    watcher.join(15)
    assert not watcher.is_alive(), seen
    assert any("echo: are you there" in json.dumps(event) for event in seen), seen


def test_webhook_input_reaching_another_node_is_taken_by_the_owner(
    node: Node,
    secrets: None,  # noqa: F811
) -> None:
    a, b = node("a", webhooks=routes()), node("b", webhooks=routes())
    first = deliver(a, {"thread": "t9", "text": "disk full"}, key="d1", wait=True)
    assert first.status_code == 200, first.text
    session_id = first.json()["session_id"]
    second = deliver(b, {"thread": "t9", "text": "disk still full"}, key="d2", wait=True)
    assert second.status_code == 200, second.text
    assert second.json()["session_id"] == session_id and second.json()["turn"] == 2
    assert forwarded(b) == 1 and session_id not in resident(b)
    again = deliver(b, {"thread": "t9", "text": "disk still full"}, key="d2", wait=True)
    assert again.status_code == 200 and again.json()["session_id"] == session_id
    users = [text for role, text in chat_rows(a.transcript(session_id)) if role == "user"]
    assert len(users) == 2, users  # the redelivered d2 recorded once


def test_a_node_that_stops_hands_its_sessions_to_the_next_node_at_once(node: Node) -> None:
    a, b = node("a"), node("b")
    a.send("cli:move", "one", wait=True)
    a.stop()  # graceful: its leases are released
    answer = b.send("cli:move", "two", wait=True)
    assert answer.status_code == 200 and answer.json()["turn"] == 2, answer.text
    assert "cli:move" in resident(b) and forwarded(b) == 0


def test_a_starting_node_leaves_alone_the_turns_other_nodes_are_running(
    node: Node, scripted: ScriptedOpenAIThread
) -> None:
    """Sessions with a turn running on another node are that node's: a node that starts
    meanwhile recovers none of them (it used to try each one before it listened)."""
    a = node("a")
    scripted.enqueue(ScriptedReply(text="slowly", delay_s=3.0))
    assert a.send("cli:busy", "take your time").status_code == 202
    wait_until(lambda: len(scripted.requests) == 1, 5, "the turn to reach the model")
    b = node("b")
    assert b.daemon.manager is not None and b.daemon.manager.started == 0
    assert "cli:busy" not in resident(b) and "cli:busy" in resident(a)
    wait_until(lambda: chat_rows(a.transcript("cli:busy"))[-1:] == [("assistant", "slowly")], 10, "a's reply")


def test_commands_reaching_an_actor_whose_session_another_node_owns_are_sent_after_it(node: Node) -> None:
    """An actor started here for a session node a holds cannot recover it; what reaches it
    before it is retired is refused as moved (the gateway then follows the session to its
    node), never as a plain failure the client would see as a 503."""
    a, b = node("a"), node("b")
    assert a.send("cli:owned", "one", wait=True).status_code == 200
    manager = b.daemon.manager
    assert manager is not None and b.daemon.io is not None

    async def ask_twice() -> list[BaseException | StatusReport]:
        replies: list[Reply[StatusReport]] = [Reply(asyncio.get_running_loop()) for _ in range(2)]
        for reply in replies:  # both in its inbox before the loop hears that it broke
            manager.route("cli:owned", ReportStatus(reply))
        return list(await asyncio.gather(*(r.wait(10) for r in replies), return_exceptions=True))

    answers = b.daemon.io.run(ask_twice(), 20)
    assert all(isinstance(answer, SessionMoved) for answer in answers), answers
    assert "resident on node a" in str(answers[0])


def test_without_an_advertised_address_the_owner_is_named_in_a_503(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, start_daemon: Callable[..., DaemonHandle], tmp_path: Path
) -> None:
    monkeypatch.setenv("CLUSTER_TEST_PG_DSN", pg_dsn)
    journal = {"backend": "postgres", "dsn_env": "CLUSTER_TEST_PG_DSN"}
    a = start_daemon(data_dir=str(tmp_path / "a"), journal=journal, cluster={"node_id": "a"})
    b = start_daemon(data_dir=str(tmp_path / "b"), journal=journal, cluster={"node_id": "b"})
    a.send("cli:here", "one", wait=True)
    refused = b.send("cli:here", "two")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "owned_elsewhere"
    assert "resident on node a" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) >= 1


def test_discords_one_gateway_connection_is_held_by_one_node_and_moves(
    discord_server: FakeDiscordServer,  # noqa: F811 - the fixture, requested first (torn down last)
    node: Node,
) -> None:
    discord = {"enabled": True, "channels": [ALLOWED]}
    a = node("a", discord=discord)
    assert a.http.get("/healthz").json()["adapters"]["discord"] == {"state": "running"}
    b = node("b", discord=discord)
    health = b.http.get("/healthz").json()
    assert health["status"] == "ok", health  # standing by is healthy
    assert health["adapters"]["discord"] == {"state": "standby", "detail": "node a holds the connection"}
    assert discord_server.connected == 1 and discord_server.identifies == 1

    discord_server.post_message(f"<@{BOT_ID}> who answers?", mentions_bot=True)
    discord_server.wait_for(lambda: bool(discord_server.threads), what="a thread")
    thread = discord_server.threads[0]["id"]
    discord_server.wait_for(
        lambda: discord_server.bot_messages(thread) == ["echo: who answers?"], what="one reply"
    )

    a.stop()  # its lease is released: b connects at its next try (lease_s / 3)
    wait_until(
        lambda: b.http.get("/healthz").json()["adapters"]["discord"] == {"state": "running"},
        10,
        "b to connect",
    )
    assert discord_server.identifies == 2
    wait_until(lambda: discord_server.connected == 1, 5, "a's connection to be gone")
    discord_server.post_message("still there?", channel_id=thread)
    # Streamed: posted with its first words, then edited until whole.
    discord_server.wait_for(
        lambda: discord_server.bot_messages(thread) == ["echo: who answers?", "echo: still there?"],
        what="b's reply",
    )


def test_a_discord_reply_recorded_on_a_node_without_the_connection_is_posted_by_the_holder(
    discord_server: FakeDiscordServer,  # noqa: F811 - the fixture, requested first (torn down last)
    node: Node,
) -> None:
    """b runs a turn of a Discord session (here: input through b's API) but does not hold
    the Discord connection: it lets the session go, and a, which does, takes it over and
    posts the reply — once."""
    discord = {"enabled": True, "channels": [ALLOWED]}
    a = node("a", discord=discord)
    b = node("b", discord=discord)
    session_id = f"discord:{ALLOWED}"
    answer = b.send(session_id, "from the api", wait=True)
    assert answer.status_code == 200 and answer.json()["reply"] == "echo: from the api", answer.text
    discord_server.wait_for(
        lambda: discord_server.bot_messages(ALLOWED) == ["echo: from the api"], what="a's post of b's reply"
    )
    wait_until(lambda: session_id in resident(a) and session_id not in resident(b), 5, "the session on a")
    # Absence is the behaviour here (posted once): a's outbox looks again within a poll
    # (lease_s / 3 = 1 s) and must find nothing owed.
    time.sleep(1.5)
    assert discord_server.bot_messages(ALLOWED) == ["echo: from the api"]


def test_a_slack_message_reaching_another_node_is_answered_once_by_the_owner(
    fake_slack: FakeSlackThread,  # noqa: F811 - the fixture, requested first (torn down last)
    node: Node,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slack hands each event to one Socket Mode connection (here: the newest): a thread
    reply arriving at b for a session a owns runs on a and is answered once, with no error
    note from b and no reaction left behind."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", SLACK_BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", SLACK_APP_TOKEN)
    slack = {"enabled": True, "channels": ["C1"], "api_url": fake_slack.api_url}
    a = node("a", slack=slack)
    ts, _ = fake_slack.say("C1", f"{MENTION} hello there")
    reply_in(fake_slack, "C1", ts, "echo: hello there")
    session_id = f"slack:C1:{ts}"
    assert session_id in resident(a)

    b = node("b", slack=slack)  # the newest connection: Slack sends the next events to b
    fake_slack.say("C1", "and a follow-up", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: and a follow-up")
    assert forwarded(b) >= 1 and session_id not in resident(b)
    assert [m["content"] for m in a.transcript(session_id) if m["role"] == "user"] == [
        "hello there",
        "and a follow-up",
    ]
    wait_until(lambda: fake_slack.find("C1", ts)["reactions_by_bot"] == [], 10, "no reaction left")  # type: ignore[index]
    time.sleep(0.5)  # absence is the behaviour here (answered once): no late second post
    texts = [m["text"] for m in fake_slack.bot_messages("C1", ts)]
    assert texts == ["echo: hello there", "echo: and a follow-up"], texts
