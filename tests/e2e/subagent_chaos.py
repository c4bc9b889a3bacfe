"""Sub-agents under SIGKILL: the harness shared by ``tests/e2e/test_subagent_crash.py``
(a few runs in CI; ``NETCLAW_SUBAGENT_CRASH_RUNS=30`` for the long run).

Each run gives a new parent session ``SPAWN 3 <tag>``: it spawns three children that each
run two tool rounds and answer; their answers come back to the parent, which answers each.
The daemon is SIGKILLed at a random moment (sometimes twice: once more while it recovers)
and started again on the same data_dir. The scripted model waits a random while before each
answer, so kills land while the parent spawns, while children work, between a child's
answer and the parent's admission of it, and while the parent answers. After each run the
journal must say: three children spawned (no fourth), each child's answer recorded once and
admitted to its parent exactly once, and the parent answered each exactly once.
"""

from __future__ import annotations

import collections
import json
import random
import sqlite3
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.e2e.conftest import DaemonProcess, Daemons, Setup, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.subagent_script import FamilyScript

CHILDREN = 3
MOMENTS = (
    "spawning",
    "children working",
    "answer owed to the parent",
    "answer admitted, its delivery not recorded",
    "parent answering",
    "settled",
)


@dataclass
class CrashResult:
    runs: int = 0
    kills: int = 0
    moments: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    restart_s: list[float] = field(default_factory=list)

    def summary(self) -> str:
        where = ", ".join(f"{m}: {self.moments[m]}" for m in MOMENTS)
        return f"{self.runs} runs, {self.kills} SIGKILLs ({where}); problems: {len(self.problems)}"


def rows(db: Path, session_id: str, kind: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        found = conn.execute(
            "SELECT payload FROM events WHERE persistence_id=? AND type=? ORDER BY seq", (session_id, kind)
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(p) for (p,) in found]


def moment(db: Path, parent: str) -> str:
    """Where the family stood when the daemon died (read from the journal it left)."""
    spawned = rows(db, parent, "ChildSpawned")
    if len(spawned) < CHILDREN or not rows(db, parent, "StepRecorded"):
        return "spawning"
    kids = [f"agent:{parent}/{n}" for n in range(1, CHILDREN + 1)]
    identities = {r["message"].get("identity") for r in rows(db, parent, "InputAdmitted")}
    answered = [k for k in kids if any(r["status"] == "completed" for r in rows(db, k, "TurnRecorded"))]
    if any(f"subagent:{k}:1" not in identities for k in answered):
        return "answer owed to the parent"
    if any(not rows(db, k, "ReplyDelivered") for k in answered):
        return "answer admitted, its delivery not recorded"
    if len(answered) < CHILDREN:
        return "children working"
    acks = [r for r in rows(db, parent, "TurnRecorded") if r["turn"] > 1]
    return "settled" if len(acks) == CHILDREN else "parent answering"


def check(db: Path, parent: str, tag: str) -> list[str]:
    """What is wrong with the family's journal (nothing, if exactly once held)."""
    problems = []
    spawned = rows(db, parent, "ChildSpawned")
    if sorted(r["task"]["n"] for r in spawned) != list(range(1, CHILDREN + 1)):
        problems.append(f"{parent}: spawned {[r['task']['n'] for r in spawned]}, not 1..{CHILDREN} once each")
    admitted = collections.Counter(r["message"].get("identity") for r in rows(db, parent, "InputAdmitted"))
    recorded = rows(db, parent, "TurnRecorded")
    replies = [m["content"] for r in recorded for m in r.get("messages", []) if m["role"] == "assistant"]
    for n in range(1, CHILDREN + 1):
        child = f"agent:{parent}/{n}"
        turns = rows(db, child, "TurnRecorded")
        if [(r["turn"], r["status"]) for r in turns] != [(1, "completed")]:
            problems.append(f"{child}: turns recorded {[(r['turn'], r['status']) for r in turns]}")
        tasks = rows(db, child, "InputAdmitted")
        if len(tasks) != 1:
            problems.append(f"{child}: {len(tasks)} inputs admitted (its task, once, expected)")
        if admitted[f"subagent:{child}:1"] != 1:
            problems.append(
                f"{parent}: the answer of {child} admitted {admitted[f'subagent:{child}:1']} times"
            )
        answers = sum(1 for text in replies if text == f"ACK {child}: RESULT {tag}-{n}")
        if answers != 1:
            problems.append(f"{parent}: answered {child} {answers} times")
    if replies.count(f"spawned {tag}") != 1:
        problems.append(f"{parent}: its first turn answered {replies.count(f'spawned {tag}')} times")
    if any(r["status"] != "completed" for r in recorded):
        problems.append(f"{parent}: turns {[(r['turn'], r['status']) for r in recorded]}")
    return problems


class SubagentCrash:
    def __init__(
        self, root: Path, scripted: ScriptedOpenAIThread, daemons: Daemons, *, seed: int = 31
    ) -> None:
        self._random = random.Random(seed)
        self.script = FamilyScript(rounds=2, child_delay_s=(0.05, 0.5), parent_delay_s=(0.05, 0.3), seed=seed)
        scripted.set_responder(self.script)
        self.setup = Setup(root, scripted.base_url, session={"turn_timeout_s": 60})
        self._daemons = daemons
        self._daemon: DaemonProcess | None = None

    @property
    def db(self) -> Path:
        return self.setup.db_path

    def _start(self, result: CrashResult) -> DaemonProcess:
        started = time.monotonic()
        self._daemon = self._daemons.start(self.setup.config, self.setup.data_dir, self.setup.port)
        result.restart_s.append(time.monotonic() - started)
        return self._daemon

    def _kill(self, result: CrashResult, parent: str) -> None:
        assert self._daemon is not None
        self._daemon.sigkill()
        result.kills += 1
        result.moments[moment(self.db, parent)] += 1

    def _settled(self, parent: str) -> bool:
        return moment(self.db, parent) == "settled"

    def _after_an_answer(self, parent: str) -> None:
        """Return a few ms after a child of ``parent`` recorded its answer (watching the
        journal): about the time its way back to the parent takes."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
            try:
                found = conn.execute(
                    "SELECT 1 FROM events WHERE persistence_id LIKE ? AND type='TurnRecorded' LIMIT 1",
                    (f"agent:{parent}/%",),
                ).fetchone()
            finally:
                conn.close()
            if found:
                time.sleep(self._random.uniform(0.0, 0.006))
                return
            time.sleep(0.001)

    def run(self, runs: int) -> CrashResult:
        result = CrashResult()
        daemon = self._start(result)
        for k in range(runs):
            tag = f"r{k}"
            parent = f"cli:family-{k}"
            response = daemon.post(parent, f"SPAWN {CHILDREN} {tag}")
            assert response.status_code == 202, response.text
            if k % 2:  # a random moment of the family's life
                time.sleep(self._random.uniform(0.05, 1.5))
            else:  # just after a child recorded its answer: aimed at the answer's way back
                self._after_an_answer(parent)
            self._kill(result, parent)
            daemon = self._start(result)
            if self._random.random() < 0.3:  # once more, while it recovers and catches up
                time.sleep(self._random.uniform(0.0, 1.0))
                self._kill(result, parent)
                daemon = self._start(result)
            try:
                wait_until(
                    partial(self._settled, parent),
                    45,
                    f"the family of {parent} to settle",
                )
            except AssertionError as exc:
                result.problems.append(str(exc))
            time.sleep(0.2)  # absence is the behaviour here: no duplicate shows up late
            result.problems += check(self.db, parent, tag)
            result.runs += 1
        return result
