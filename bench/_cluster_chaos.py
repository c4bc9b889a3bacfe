"""The operator's run of bench/cluster.py: three nodes on one PostgreSQL under closed-loop
clients (``?wait=1``, an idempotency key each, resent on any miss — tests/e2e/cluster_load.py),
through, in order:

1. a SIGTERM of the busiest node (it drains; the clients' balancer takes it out), then
   its restart — the rebalancer gives it its share back;
2. ``kills`` SIGKILLs of the busiest node, each followed by its restart;
3. a paused owner (SIGSTOP past its lease, then SIGCONT: its stale writes are refused);
4. a database restart (PostgreSQL stopped for ``db_down_s``, started again);
5. a rolling upgrade: each node in turn SIGTERMed and started as the next release
   (tests/e2e/next_release.py: another version, protocol 2, one more migration).

Then the journal is checked: every answered message recorded once, none lost, none
answered twice, each session's messages in the order its client sent them. The
provider is a scripted server in this process (a short delay per turn, so turns are
under way at every event), whose request log says which messages reached it twice.
"""

from __future__ import annotations

import collections
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _cluster_nodes import LEASE_S, TOKEN, Node, held_by, owners
from _common import REPO_ROOT, log

from tests.e2e.cluster_load import Clients
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, _last_user_text
from tests.postgres import PostgresServer

NEXT_RELEASE = [sys.executable, str(REPO_ROOT / "tests" / "e2e" / "next_release.py")]
TURN_S = 0.1  # the provider's delay per answer


@dataclass
class ChaosResult:
    answered: int = 0
    lost: int = 0  # answered (or sent) but not in the journal, or never answered
    duplicated: int = 0  # a message recorded twice
    answered_twice: int = 0  # messages whose turn was recorded more than once
    out_of_order: int = 0  # sessions whose messages are not in their client's order
    sigterm_misses: int = 0  # requests clients had to send again around the SIGTERM
    sigterm_reruns: int = 0  # messages sent to the provider twice around the SIGTERM
    unavailable_per_kill: list[int] = field(default_factory=list)  # 503s seen per SIGKILL
    other_misses_per_kill: list[int] = field(default_factory=list)  # dropped connections etc.
    rebalance_s: list[float] = field(default_factory=list)  # restart → within 20% of the share
    db_healthy_s: float = float("nan")  # database back → every node healthy (the slowest)
    upgrade_misses: int = 0  # client-visible misses other than dropped connections, during the upgrade
    upgrade_miss_kinds: dict[str, int] = field(default_factory=dict)  # every miss during it, by kind
    problems: list[str] = field(default_factory=list)


class ChaosRun:
    def __init__(
        self, root: Path, server: PostgresServer, *, sessions: int, kills: int, steady_s: float
    ) -> None:
        self.root = root
        self.server = server
        self.dsn = server.create_database()
        self.sessions = [f"cli:chaos-{i}" for i in range(sessions)]
        self.kills = kills
        self.steady_s = steady_s
        self.result = ChaosResult()
        self.scripted = ScriptedOpenAIThread()
        self.nodes: dict[str, Node] = {}
        self.clients: Clients | None = None

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> ChaosResult:
        # A killed node's connections break mid-answer: the scripted provider says so, loudly.
        logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
        with self.scripted:
            self.scripted.set_responder(
                lambda body: Reply(text=f"echo: {_last_user_text(body)}", delay_s=TURN_S)
            )
            cluster = {"drain_s": 10, "rebalance_every_s": 5, "drain_linger_s": 1.5}
            for name in ("n1", "n2", "n3"):
                self.nodes[name] = Node(self.root, name, self.scripted.base_url, self.dsn, **cluster).start()
            urls = {name: node.url for name, node in self.nodes.items()}
            with Clients(urls, TOKEN, self.sessions, timeout_s=60, give_up_s=120) as clients:
                self.clients = clients
                try:
                    self._steady("warming up", minimum=len(self.sessions) * 3)
                    self._sigterm()
                    for k in range(self.kills):
                        self._sigkill(k)
                    self._pause()
                    self._database_restart()
                    self._rolling_upgrade()
                finally:
                    clients.stop()
            self._check_journal()
            for node in self.nodes.values():
                node.stop()
        return self.result

    def _steady(self, what: str, minimum: int = 0) -> None:
        assert self.clients is not None
        before = self.clients.answered
        deadline = time.monotonic() + max(self.steady_s, 1.0) + 60
        time.sleep(self.steady_s)
        while self.clients.answered < before + max(minimum, 1) and time.monotonic() < deadline:
            time.sleep(0.2)
        log(f"{what}: {self.clients.answered - before} answered")

    def _busiest(self) -> str:
        held = held_by(self.dsn)
        return held.most_common(1)[0][0] if held else "n1"

    def _restart(self, name: str, **kwargs: Any) -> None:
        """Start the node again and time how soon it holds its share of the sessions."""
        assert self.clients is not None
        node = self.nodes[name]
        node.start(**kwargs)
        self.clients.put_back(name, node.url)
        started = time.monotonic()
        while time.monotonic() - started < 150:
            held = held_by(self.dsn)
            share = sum(held.values()) / len(self.nodes)
            if abs(held[name] - share) <= max(0.2 * share, 1.0):  # 20%, or one session when few
                self.result.rebalance_s.append(time.monotonic() - started)
                log(
                    f"{name} holds {held[name]} of {sum(held.values())} after {self.result.rebalance_s[-1]:.1f}s"
                )
                return
            time.sleep(0.25)
        self.result.problems.append(
            f"{name} did not get its share back within 150 s: {dict(held_by(self.dsn))}"
        )

    def _sigterm(self) -> None:
        assert self.clients is not None
        name = self._busiest()
        node = self.nodes[name]
        calls_before = self._provider_calls()
        started = time.monotonic()
        node.signal(signal.SIGTERM)
        self.clients.take_out(name)
        assert node.proc is not None
        node.proc.wait(60)
        log(f"SIGTERM: {name} drained and stopped in {time.monotonic() - started:.1f}s")
        self._steady("after the SIGTERM")
        self.result.sigterm_misses = len(self.clients.misses_between(started, time.monotonic()))
        calls = self._provider_calls()
        self.result.sigterm_reruns = sum(
            1
            for text, n in calls.items()
            if n > 1 and calls_before.get(text, 0) <= 1 and n > calls_before.get(text, 0)
        )
        self._restart(name)

    def _sigkill(self, k: int) -> None:
        assert self.clients is not None
        name = self._busiest()
        killed = time.monotonic()
        self.nodes[name].kill()
        self.clients.take_out(name)
        time.sleep(LEASE_S + 2)
        self._steady(f"after SIGKILL {k + 1}")
        window = (killed, time.monotonic())
        unavailable = len(self.clients.misses_between(*window, "503"))
        self.result.unavailable_per_kill.append(unavailable)
        self.result.other_misses_per_kill.append(len(self.clients.misses_between(*window)) - unavailable)
        log(
            f"SIGKILL {k + 1} of {name}: {unavailable} 503(s), {self.result.other_misses_per_kill[-1]} other miss(es)"
        )
        for miss in self.clients.misses_between(*window, "503"):
            log(f"  503 from {miss.node}: {miss.detail}")
        self._restart(name)

    def _pause(self) -> None:
        name = self._busiest()
        node = self.nodes[name]
        node.signal(signal.SIGSTOP)
        time.sleep(LEASE_S + 1.5)  # past its lease: the others take its sessions over
        node.signal(signal.SIGCONT)
        self._steady("after the pause")
        log(f"paused {name} past its lease and woke it")

    def _database_restart(self, down_s: float = 4.0) -> None:
        self.server.stop()
        time.sleep(down_s)
        self.server.start()
        back = time.monotonic()
        pending = set(self.nodes)
        while pending and time.monotonic() - back < 60:
            for name in list(pending):
                status, body = self.nodes[name].health()
                if status == 200 and body.get("status") == "ok":
                    pending.discard(name)
            time.sleep(0.05)
        self.result.db_healthy_s = time.monotonic() - back
        if pending:
            self.result.problems.append(
                f"nodes still unhealthy 60 s after the database returned: {sorted(pending)}"
            )
        log(f"database back: every node healthy after {self.result.db_healthy_s:.2f}s")
        self._steady("after the database restart")

    def _rolling_upgrade(self) -> None:
        assert self.clients is not None
        started = time.monotonic()
        for name, node in self.nodes.items():
            node.signal(signal.SIGTERM)
            self.clients.take_out(name)
            assert node.proc is not None
            node.proc.wait(60)
            node.start(launcher=NEXT_RELEASE)
            self.clients.put_back(name, node.url)
            self._steady(f"{name} upgraded")
        dropped = ("ConnectError", "RemoteProtocolError", "ReadError")
        misses = self.clients.misses_between(started, time.monotonic())
        self.result.upgrade_misses = sum(1 for m in misses if m.what not in dropped)
        self.result.upgrade_miss_kinds = dict(collections.Counter(f"{m.what}@{m.node}" for m in misses))
        for miss in misses:
            if miss.what not in dropped:
                log(f"upgrade: {miss.what} from {miss.node}: {miss.detail}")
        versions = {n["version"] for n in self._status()["nodes"]}
        if versions != {"0.2.0-next"}:
            self.result.problems.append(f"after the upgrade the nodes run {versions}")

    # -- checks -------------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        import httpx

        node = next(iter(self.nodes.values()))
        answer = httpx.get(
            f"{node.url}/api/cluster", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        result: dict[str, Any] = answer.json()
        return result

    def _provider_calls(self) -> collections.Counter[str]:
        return collections.Counter(_last_user_text(body) for body in self.scripted.requests)

    def _check_journal(self) -> None:
        import psycopg

        assert self.clients is not None
        result, clients = self.result, self.clients
        result.answered = clients.answered
        result.lost = len(clients.lost)
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT persistence_id, type, payload FROM events"
                " WHERE type IN ('InputAdmitted', 'TurnRecorded') ORDER BY persistence_id, seq"
            ).fetchall()
        inputs: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
        recorded: collections.Counter[tuple[str, str]] = collections.Counter()  # (session, message) → turns
        for session_id, kind, payload in rows:
            data = json.loads(payload)
            if kind == "InputAdmitted":
                message = data["message"]
                inputs[session_id].append((str(message["id"]), str(message["content"])))
            else:
                recorded[(session_id, str(data["message_id"]))] += 1
        result.answered_twice = sum(1 for n in recorded.values() if n > 1)
        for session_id, acked in clients.acked.items():
            ids = collections.Counter(message_id for message_id, _ in inputs[session_id])
            result.duplicated += sum(n - 1 for n in ids.values() if n > 1)
            result.lost += sum(1 for message_id, _ in acked if ids[message_id] == 0)
            order = [int(text.rsplit("-m", 1)[1]) for _, text in inputs[session_id] if "-m" in text]
            if order != sorted(order):
                result.out_of_order += 1
        live = owners(self.dsn)
        log(f"journal checked: {result.answered} answered, {len(live)} sessions live")
