"""Memory at passivation: a session going to sleep saves what it learnt, with its source;
a message during the extraction aborts it and nothing half-written remains; a slow or
failing extraction never keeps a session awake."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from netclaw.history import FLUSH_MARKER
from netclaw.persistence import NewMemory, SqliteMemoryStore, prepare_database
from tests.conftest import DaemonHandle, wait_until
from tests.e2e.conftest import journal_rows
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread

StartDaemon = Callable[..., DaemonHandle]
SLEEPY = {"idle_timeout_s": 0.3, "passivation_grace_s": 0.5}
OBSERVATIONS = json.dumps([{"text": "the staging database is called pg-stage-2", "kind": "fact"}])


def resident(handle: DaemonHandle, session_id: str) -> bool:
    return any(s["id"] == session_id and s["resident"] for s in handle.http.get("/api/sessions").json())


def extraction_calls(scripted: ScriptedOpenAIThread) -> int:
    return sum(1 for r in scripted.requests if FLUSH_MARKER in json.dumps(r))


def test_a_passivating_session_saves_what_it_learnt_once(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(session=SLEEPY)
    scripted.route(FLUSH_MARKER, lambda body: Reply(text=OBSERVATIONS))
    sid = "cli:sleepy"
    assert handle.send(sid, "we moved staging to pg-stage-2", wait=True).status_code == 200
    wait_until(lambda: not resident(handle, sid), timeout=8, what="passivation")
    assert extraction_calls(scripted) == 1
    [memory] = handle.http.get("/api/memories", params={"session": sid}).json()
    assert memory["text"] == "the staging database is called pg-stage-2"
    assert (memory["source_session"], memory["source_turn"], memory["audience"]) == (sid, 1, "personal")
    assert journal_rows(handle.daemon.settings.database_path, sid, "MemoriesExtracted") == [
        {"through_turn": 1, "saved": 1}
    ]
    # Woken and sent to sleep again with nothing new said: no second extraction.
    handle.http.post(f"/api/sessions/{sid}/cancel")  # wakes it (nothing to cancel)
    wait_until(lambda: not resident(handle, sid), timeout=8, what="passivation again")
    assert extraction_calls(scripted) == 1


def test_a_message_during_the_extraction_aborts_it_and_nothing_is_written(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(session=SLEEPY)
    slow = {"n": 0}

    def extract(body: dict[str, Any]) -> Reply:
        slow["n"] += 1
        return Reply(text=OBSERVATIONS, delay_s=1.0 if slow["n"] == 1 else 0.0)

    scripted.route(FLUSH_MARKER, extract)
    sid = "cli:interrupted"
    assert handle.send(sid, "remember pg-stage-2", wait=True).status_code == 200
    wait_until(lambda: extraction_calls(scripted) == 1, what="the extraction to start")
    assert handle.send(sid, "one more thing", wait=True).status_code == 200  # aborts passivation
    wait_until(
        lambda: any(FLUSH_MARKER in json.dumps(body) for body in scripted.answered),
        what="the first extraction's answer to go out (it is dropped)",
    )
    assert journal_rows(handle.daemon.settings.database_path, sid, "MemoriesExtracted")[:1] != [
        {"through_turn": 1, "saved": 1}
    ]
    # The next passivation extracts both turns, once.
    wait_until(lambda: not resident(handle, sid), timeout=8, what="passivation")
    memories = handle.http.get("/api/memories", params={"session": sid}).json()
    assert [m["source_turn"] for m in memories] == [2]
    assert journal_rows(handle.daemon.settings.database_path, sid, "MemoriesExtracted") == [
        {"through_turn": 2, "saved": 1}
    ]


def test_a_failing_or_slow_extraction_does_not_keep_the_session_awake(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    handle = start_daemon(session=SLEEPY)
    scripted.route(FLUSH_MARKER, lambda body: ErrorReply(status=400, message="no"))
    sid = "cli:failing"
    assert handle.send(sid, "hello", wait=True).status_code == 200
    wait_until(lambda: not resident(handle, sid), timeout=8, what="passivation despite the failure")
    assert handle.http.get("/api/memories", params={"session": sid}).json() == []

    scripted.route(FLUSH_MARKER, lambda body: Reply(text=OBSERVATIONS, delay_s=10))
    slow = "cli:slow"
    assert handle.send(slow, "hello", wait=True).status_code == 200
    started = time.monotonic()
    wait_until(lambda: not resident(handle, slow), timeout=10, what="passivation despite the timeout")
    assert time.monotonic() - started < 0.3 + 0.5 + 2.0 + 1.5  # idle + grace + margin + slack
    assert handle.http.get("/api/memories", params={"session": slow}).json() == []


def test_public_sessions_extract_nothing(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, monkeypatch: Any
) -> None:
    monkeypatch.setenv("HOOK", "hook-secret-123")
    handle = start_daemon(
        session=SLEEPY,
        webhooks={
            "routes": {"alerts": {"auth": {"type": "bearer", "secret_env": "HOOK"}, "session_key": "$.k"}}
        },
    )
    answer = handle.http.post(
        "/webhooks/alerts",
        json={"k": "a", "text": "disk full"},
        headers={"Authorization": "Bearer hook-secret-123"},
    )
    assert answer.status_code == 202
    sid = answer.json()["session_id"]
    wait_until(lambda: handle.transcript(sid)[-1]["role"] == "assistant", what="the reply")
    wait_until(lambda: not resident(handle, sid), timeout=8, what="passivation")
    assert extraction_calls(scripted) == 0


def test_a_passivation_that_crosses_a_second_request_still_stops(
    start_daemon: Callable[..., DaemonHandle],
) -> None:
    """Found by bench/scale.py: a session passivating by itself while the manager's own
    request to passivate was in flight was told "a command is on its way" and waited for a
    stop that never came (thousands stayed resident). Two requests in one loop callback
    make the crossing certain: the second is routed before the first's stop request."""
    from netclaw.sessions._core.commands import PassivateNow

    handle = start_daemon(session={"idle_timeout_s": 3600, "passivation_grace_s": 0})
    assert handle.send("crossing", "hello", wait=True).status_code == 200
    manager = handle.daemon.manager
    assert manager is not None and handle.daemon.io is not None

    async def twice() -> None:
        manager.route("crossing", PassivateNow())
        manager.route("crossing", PassivateNow())

    handle.daemon.io.run(twice(), 5)
    wait_until(lambda: not resident(handle, "crossing"), timeout=5, what="the session to passivate")
    assert handle.send("crossing", "and back", wait=True).status_code == 200  # it recovers as usual


SISTER_THEN = "Anna, the user's sister, works as a nurse at St. Mary's hospital."
SISTER_NOW = "Anna, the user's sister, now works as a nurse at the city hospital in Leeds."


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if request.param == "sqlite":
        return {}
    monkeypatch.setenv("NETCLAW_TEST_PG_DSN", request.getfixturevalue("pg_dsn"))
    return {
        "journal": {"backend": "postgres", "dsn_env": "NETCLAW_TEST_PG_DSN"},
        "cluster": {"node_id": "n1"},
    }


def test_a_changed_fact_is_recalled_changed_in_another_session(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread, backend: dict[str, Any]
) -> None:
    """Told in one session, changed in a second, asked about in a third of the same
    audience: the third's recall carries the changed fact (found by meaning: the question
    names neither Anna nor a hospital), never the old one; the old memory is kept, marked
    as replaced by the one the second session learnt."""
    handle = start_daemon(session=SLEEPY, **backend)
    told = {"cli:first": SISTER_THEN, "cli:second": SISTER_NOW}
    extracted = {"fact": ""}
    scripted.route(
        FLUSH_MARKER, lambda body: Reply(text=json.dumps([{"text": extracted["fact"], "kind": "fact"}]))
    )
    for sid, fact in told.items():
        extracted["fact"] = fact
        assert handle.send(sid, f"note this: {fact}", wait=True).status_code == 200
        wait_until(lambda sid=sid: not resident(handle, sid), timeout=8, what=f"{sid} to passivate")
        wait_until(
            lambda sid=sid: handle.http.get("/api/memories", params={"session": sid}).json() != [],
            what=f"what {sid} learnt",
        )

    assert handle.send("cli:third", "What does my sister do for a living?", wait=True).status_code == 200
    sent = json.dumps(scripted.requests[-1]["messages"])
    assert "city hospital in Leeds" in sent and "St. Mary's" not in sent

    memories = {m["text"]: m for m in handle.http.get("/api/memories").json()}
    now, then = memories[SISTER_NOW], memories[SISTER_THEN]
    assert (now["source_session"], now["source_turn"], now["superseded_by"]) == ("cli:second", 1, None)
    assert (then["source_session"], then["superseded_by"]) == ("cli:first", now["id"])
    # People search the same way: by meaning, the live fact only.
    found = handle.http.get("/api/memories", params={"q": "my sister's job"}).json()
    assert [m["text"] for m in found] == [SISTER_NOW]
    assert handle.http.get("/healthz").json()["memory"] == {
        "embeddings": "all-MiniLM-L6-v2-int8",
        "recall": "ready",
    }


def test_extraction_sees_related_memories_and_says_which_one_changed(
    start_daemon: StartDaemon, scripted: ScriptedOpenAIThread
) -> None:
    """A change the words alone do not give away: the extraction is shown the saved
    memories related to what was said, with their numbers, and the model's "replaces"
    supersedes the one it names; a number it was not shown replaces nothing."""
    handle = start_daemon(session=SLEEPY)
    shown: list[str] = []

    def extract(body: dict[str, Any]) -> Reply:
        transcript = body["messages"][-1]["content"]
        shown.append(transcript)
        if "ambulance" not in transcript:
            return Reply(
                text=json.dumps([{"text": SISTER_THEN, "kind": "fact"}, {"text": "The user likes jazz."}])
            )
        [number] = [
            line.split(":")[0] for line in transcript.splitlines() if "St. Mary's" in line and ":" in line
        ]
        return Reply(
            text=json.dumps(
                [
                    {
                        "text": "Anna, the user's sister, is a paramedic with the ambulance service now.",
                        "replaces": int(number),
                    },
                    {"text": "The user plays the trumpet.", "replaces": 999},
                ]
            )
        )

    scripted.route(FLUSH_MARKER, extract)
    assert handle.send("cli:one", "my sister Anna is a nurse at St. Mary's", wait=True).status_code == 200
    wait_until(lambda: not resident(handle, "cli:one"), timeout=8, what="the first session to passivate")
    assert "Memories already saved" not in shown[0]  # nothing saved yet
    assert handle.send("cli:two", "Anna left nursing, she drives an ambulance", wait=True).status_code == 200
    wait_until(lambda: not resident(handle, "cli:two"), timeout=8, what="the second session to passivate")
    wait_until(lambda: len(handle.http.get("/api/memories").json()) == 4, what="what the second one learnt")

    memories = {m["text"]: m for m in handle.http.get("/api/memories").json()}
    paramedic = memories["Anna, the user's sister, is a paramedic with the ambulance service now."]
    assert memories[SISTER_THEN]["superseded_by"] == paramedic["id"]
    assert paramedic["source_session"] == "cli:two"
    assert all(m["superseded_by"] is None for t, m in memories.items() if t != SISTER_THEN)  # 999: nothing

    assert handle.send("cli:three", "What does my sister do for a living?", wait=True).status_code == 200
    sent = json.dumps(scripted.requests[-1]["messages"])
    assert "paramedic" in sent and "St. Mary's" not in sent


def test_status_says_recall_is_by_words_while_memories_are_re_embedded(
    start_daemon: StartDaemon, make_settings: Callable[..., Any]
) -> None:
    """Memories saved without embeddings (or with another model) are embedded in the
    background after a start with the default model; /status says so meanwhile."""
    settings = make_settings()
    prepare_database(settings.database_path)

    async def seed() -> None:
        store = await SqliteMemoryStore(settings.database_path).open()  # no embedder: keywords only
        texts = [
            f"Note {n}: the user's plant number {n} needs water every {n % 9 + 1} days." for n in range(3000)
        ]
        for start in range(0, len(texts), 500):
            await store.add(
                [NewMemory(t) for t in texts[start : start + 500]], session_id="cli:old", audience="personal"
            )
        await store.close()

    asyncio.run(seed())
    handle = start_daemon()

    def status() -> str:
        return str(handle.send("cli:status", "/status").json()["notice"])

    wait_until(
        lambda: "still being embedded with all-MiniLM-L6-v2-int8" in status(), timeout=30, what="re-embedding"
    )
    assert "3000 personal memories (" in status() and "recalled by their words until then" in status()
    wait_until(lambda: "still being embedded" not in status(), timeout=300, what="re-embedding done")
    assert "3000 personal memories." in status()
