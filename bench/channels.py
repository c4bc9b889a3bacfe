"""What a channel's path adds to a turn, next to the CLI's, in the same run.

One daemon (``netclaw run`` as a subprocess, as it is deployed) with the scripted provider
in its own process (echo replies at once, streamed in 8-character deltas) and each
channel pointed at its platform on 127.0.0.1:

- **cli**: the path ``netclaw chat -p`` takes, ``POST /api/sessions/{id}/messages?wait=1``;
  the time until the answer is back (the reference).
- **telegram**: the Bot API fake (``tests/fakes/telegram_api.py``) with the real
  python-telegram-bot in the daemon, long polling: the time from a person's message being
  queued at the fake until the bot's message there shows the whole reply (as a person
  would see it: the last edit included).
- **matrix**: a real Synapse (``tests/synapse.py``; skipped when it is not installed): the
  time from the person's ``/send`` until the bot's reply (its last edit) is in the room.

Messages go one after another, each in the same conversation (a session that already
exists: the steady state, not a session's first turn), after a warm-up of 3. Reported per
channel: p50 and p99, and added = the channel's p50 (p99) - the CLI's, the channel's
whole path beyond what the CLI pays (adapter, platform library, the platform's API calls,
the renderer and its pacing). For Matrix the figure also leaves out the homeserver's own
two trips (in and out), measured alone: two plain clients, one message from one until
the other's /sync has it.

Run from the repo root: ``python bench/channels.py [--messages 40]``; ``--quick``: 8.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c
import httpx
from _provider import ProviderProcess

from tests.fakes.telegram_api import ALICE, TOKEN, FakeTelegramThread
from tests.synapse import MatrixUser, SynapseServer, quoted, synapse_python

WARM_UP = 3
POLL_S = 0.002  # how often a wait looks (a bound on the measurement's own granularity)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g}s")
        time.sleep(POLL_S)


class Daemon:
    """``python -m netclaw.cli run`` on a config, its logs in the work directory."""

    def __init__(self, work: Path, config: dict[str, Any], env: dict[str, str]) -> None:
        self.port = int(config["gateway"]["port"])
        self.base_url = f"http://127.0.0.1:{self.port}"
        path = work / "netclaw.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        self._log = (work / "daemon.log").open("wb")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("NETCLAW_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "netclaw.cli", "run", "--config", str(path)],
            cwd=c.REPO_ROOT,
            env={**clean, "PYTHONPATH": str(c.REPO_ROOT), **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.data_dir = Path(config["data_dir"])

    def ready(self, adapters: list[str], timeout: float = 60) -> httpx.Client:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}; see its log")
            try:
                health = httpx.get(f"{self.base_url}/healthz", timeout=1).json()
            except httpx.HTTPError:
                return False
            states = health.get("adapters", {})
            return all(states.get(a, {}).get("state") == "running" for a in adapters)

        wait_for(up, timeout, f"daemon with {adapters} running")
        token = (self.data_dir / "control.token").read_text(encoding="utf-8").strip()
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def stop(self) -> None:
        c.stop_process(self.proc, 20)
        self._log.close()


def measure(send: Callable[[int], None], rounds: int, what: str) -> list[float]:
    """Seconds per message, after the warm-up."""
    times = []
    for i in range(WARM_UP + rounds):
        started = time.perf_counter()
        send(i)
        if i >= WARM_UP:
            times.append(time.perf_counter() - started)
    c.log(f"{what}: {rounds} messages, median {c.median(times) * 1000:.1f} ms")
    return times


def cli_sender(client: httpx.Client) -> Callable[[int], None]:
    def send(i: int) -> None:
        answer = client.post(
            "/api/sessions/cli:bench/messages", params={"wait": "1"}, json={"text": f"ping {i}"}
        )
        answer.raise_for_status()
        assert f"ping {i}" in answer.text, answer.text

    return send


def telegram_sender(fake: FakeTelegramThread) -> Callable[[int], None]:
    chat = int(ALICE["id"])

    def send(i: int) -> None:
        want = f"echo: ping {i}"
        fake.say(chat, f"ping {i}")
        wait_for(lambda: want in fake.bot_texts(chat), 30, f"telegram reply {i}")

    return send


class MatrixWatcher:
    """Alice's client: a /sync long poll that returns as soon as the room has news, the
    bot's messages in one thread as she sees them (each edit applied)."""

    def __init__(self, alice: MatrixUser, bot: str, room: str) -> None:
        self.alice, self.bot, self.room = alice, bot, room
        self.since = alice.call("GET", "/sync", params={"timeout": 0})["next_batch"]
        self.texts: dict[str, str] = {}  # the bot's event id -> its text now

    def wait(self, want: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while want not in self.texts.values():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {want!r} in the room within {timeout:g}s")
            body = self.alice.call("GET", "/sync", params={"since": self.since, "timeout": 10_000})
            self.since = body["next_batch"]
            room = body.get("rooms", {}).get("join", {}).get(self.room, {})
            for event in room.get("timeline", {}).get("events", []):
                self._see(event)

    def _see(self, event: dict[str, Any]) -> None:
        if event.get("sender") != self.bot or event.get("type") != "m.room.message":
            return
        content = event.get("content") or {}
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            self.texts[relation["event_id"]] = (content.get("m.new_content") or {}).get("body", "")
        else:
            self.texts[event["event_id"]] = content.get("body", "")


def matrix_sender(alice: MatrixUser, watcher: MatrixWatcher, thread: str) -> Callable[[int], None]:
    def send(i: int) -> None:
        alice.say(watcher.room, f"ping {i}", thread=thread)
        watcher.wait(f"echo: ping {i}", 30)

    return send


def matrix_floor(synapse: SynapseServer, rounds: int) -> list[float]:
    """The platform's own one-way time: Bob's message until Carol's /sync has it (two
    plain clients, no netclaw). A bot's answer needs two such trips, in and out."""
    bob, carol = synapse.register("bob"), synapse.register("carol")
    room: str = bob.call("POST", "/createRoom", json={"invite": [carol.user_id]})["room_id"]
    carol.join(room)
    watcher = MatrixWatcher(carol, bob.user_id, room)
    times = []
    for i in range(WARM_UP + rounds):
        started = time.perf_counter()
        bob.say(room, f"one way {i}")
        watcher.wait(f"one way {i}", 30)
        if i >= WARM_UP:
            times.append(time.perf_counter() - started)
    return times


def start_matrix(synapse: SynapseServer) -> tuple[MatrixUser, MatrixUser, str]:
    """The bot account, Alice, and a room she made and invited the bot to."""
    bot, alice = synapse.register("netclaw"), synapse.register("alice")
    room: str = alice.call("POST", "/createRoom", json={"invite": [bot.user_id], "preset": "private_chat"})[
        "room_id"
    ]
    return bot, alice, room


def report(
    name: str, times: list[float], reference: list[float], target_ms: float, platform_s: float = 0.0
) -> None:
    """The channel's p50/p99 next to the CLI's. The figure is what netclaw adds beyond the
    CLI and beyond ``platform_s`` (the platform's own trips, in and out, measured alone)."""
    p50, p99 = c.percentile(times, 50) * 1000, c.percentile(times, 99) * 1000
    ref50, ref99 = c.percentile(reference, 50) * 1000, c.percentile(reference, 99) * 1000
    c.info(f"{name}_p50", p50, "ms")
    c.info(f"{name}_p99", p99, "ms")
    c.info(f"{name}_added_p50", p50 - ref50, "ms", f"next to the CLI's p50 {ref50:.1f} ms")
    c.info(f"{name}_added_p99", p99 - ref99, "ms", f"next to the CLI's p99 {ref99:.1f} ms")
    c.info(f"{name}_ratio_p50", p50 / ref50 if ref50 else 0.0, "x", "the channel's p50 / the CLI's")
    added = p50 - ref50 - platform_s * 1000
    c.figure(f"{name}_added_latency_p50", added, "ms", f"<= {target_ms:g}", added <= target_ms)
    if platform_s:
        c.info(
            f"{name}_platform_trips",
            platform_s * 1000,
            "ms",
            "the platform's own two trips, left out of the figure",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--dir", default=os.environ.get("NETCLAW_BENCH_DIR"))
    c.add_quick(parser, messages=8)
    args = c.apply_quick(parser.parse_args())
    c.info("machine_load", c.machine_load(), "", "1-minute load / cores, at the start")
    with c.temp_dir("netclaw-bench-channels-", args.dir) as work:
        provider = ProviderProcess(work / "provider.log").start()
        fake = FakeTelegramThread()
        fake.start()
        synapse = SynapseServer(python).start() if (python := synapse_python()) else None
        daemon: Daemon | None = None
        try:
            config: dict[str, Any] = {
                "data_dir": str(work / "data"),
                "providers": {"local": {"type": "openai", "base_url": provider.base_url, "timeout_s": 30}},
                "models": {"main": {"provider": "local", "model": "scripted"}},
                "gateway": {"host": "127.0.0.1", "port": c.free_port()},
                "tools": {"workspace_dir": str(work / "workspace")},
                "telegram": {
                    "enabled": True,
                    "api_url": fake.api_url,
                    "allow_dms": True,
                    "poll_timeout_s": 20,
                },
            }
            env = {"TELEGRAM_BOT_TOKEN": TOKEN}
            channels = ["telegram"]
            if synapse is not None:
                bot, alice, room = start_matrix(synapse)
                config["matrix"] = {"enabled": True, "homeserver": synapse.url, "channels": [room]}
                env["MATRIX_ACCESS_TOKEN"] = bot.token
                channels.append("matrix")
            else:
                c.log("matrix: skipped (Synapse is not installed: see tests/synapse.py)")
            daemon = Daemon(work, config, env)
            client = daemon.ready(channels)
            cli = measure(cli_sender(client), args.messages, "cli")
            telegram = measure(telegram_sender(fake), args.messages, "telegram")
            matrix: list[float] = []
            one_way = 0.0
            if synapse is not None:
                alice.call("GET", f"/rooms/{quoted(room)}/joined_members")
                wait_for(
                    lambda: bot.user_id in alice.members(room) and alice.members(room)[bot.user_id] == "join",
                    30,
                    "the bot to join",
                )
                watcher = MatrixWatcher(alice, bot.user_id, room)
                root = alice.say(room, "hello", mention=bot.user_id)  # starts the thread (its session)
                watcher.wait("echo: hello", 30)
                matrix = measure(matrix_sender(alice, watcher, root), args.messages, "matrix")
                one_way = c.percentile(matrix_floor(synapse, args.messages), 50)
                c.info(
                    "matrix_platform_one_way_p50",
                    one_way * 1000,
                    "ms",
                    "Synapse alone: a message from one plain client until another's /sync has it",
                )
            cli_again = measure(cli_sender(client), args.messages, "cli (again, after)")
            reference = cli + cli_again
            c.info(
                "cli_p50",
                c.percentile(reference, 50) * 1000,
                "ms",
                "the reference, measured before and after",
            )
            c.info("cli_p99", c.percentile(reference, 99) * 1000, "ms")
            report("telegram", telegram, reference, target_ms=50)
            if matrix:
                report("matrix", matrix, reference, target_ms=50, platform_s=2 * one_way)
        finally:
            if daemon is not None:
                daemon.stop()
            if synapse is not None:
                synapse.stop()
            fake.stop()
            provider.stop()
    c.info("machine_load_end", c.machine_load(), "", "1-minute load / cores, at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
