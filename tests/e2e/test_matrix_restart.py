"""The Matrix channel through the daemon as a subprocess against a real Synapse
(tests/synapse.py): a turn cut short by SIGKILL is answered in its thread exactly once
after the restart — the session resumes the turn, the sync position saved in the bot's
account data brings nothing twice, and a reply is posted under its outbox key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Daemons, Setup, subprocess_env
from tests.e2e.test_cluster_chat_failover import SLOW_S, InFlight
from tests.fakes.scripted_openai import ScriptedOpenAIThread, without_speaker
from tests.synapse import SynapseServer, shown_messages, synapse_for_tests

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synapse() -> Iterator[SynapseServer]:
    yield from synapse_for_tests()


def test_a_turn_cut_short_by_sigkill_is_answered_once_in_its_thread_after_a_restart(
    synapse: SynapseServer, tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    provider = InFlight()
    scripted.set_responder(provider)
    bot, alice = synapse.register("netclaw_e2e"), synapse.register("alice_e2e")
    room = alice.create_room(invite=[bot.user_id])
    setup = Setup(
        tmp_path / "site",
        scripted.base_url,
        matrix={"enabled": True, "homeserver": synapse.url, "channels": [room]},
    )
    env = subprocess_env(MATRIX_ACCESS_TOKEN=bot.token)

    def start() -> None:
        daemons.start(setup.config, setup.data_dir, setup.port, env=env)

    def thread_texts(root: str) -> list[str]:
        found = []
        for message in shown_messages(alice.messages(room), bot.user_id):
            relation = message["raw"]["content"].get("m.relates_to") or {}
            if relation.get("rel_type") == "m.thread" and relation.get("event_id") == root:
                found.append(message["content"]["body"])
        return found

    start()
    alice.wait_for("the bot to join", lambda: alice.members(room).get(bot.user_id) == "join")
    root = alice.say(room, "hello", mention=bot.user_id)
    alice.wait_for("the first reply", lambda: thread_texts(root) == ["echo: hello"])

    def saved_position() -> str:
        data = bot.call("GET", f"/user/{bot.user_id}/account_data/org.netclaw.sync")
        return str(data["since"])

    before = saved_position()
    alice.say(room, "slow: think it over", thread=root)
    assert provider.slow_started.wait(15), "the slow turn never reached the provider"
    # The batch that brought the message is behind the saved position: the restart gets it
    # no more, so only the session's resumed turn (and the outbox) can answer it.
    alice.wait_for("the position saved past the message", lambda: saved_position() != before)
    first = daemons.started[-1]
    first.sigkill()

    start()
    want = ["echo: hello", "echo: slow: think it over"]
    alice.wait_for(
        f"the reply of the turn cut short (so far {thread_texts(root)})",
        lambda: thread_texts(root) == want,
        timeout=SLOW_S + 30,
    )
    time.sleep(1.0)  # absence is the behaviour here (posted once): no late second post
    assert thread_texts(root) == want
    daemon = daemons.started[-1]
    [session] = [s["id"] for s in daemon.sessions()]
    users = [m["content"] for m in daemon.session(session)["messages"] if m["role"] == "user"]
    assert [without_speaker(u) for u in users] == ["hello", "slow: think it over"], users
