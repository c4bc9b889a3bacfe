"""The chaos harness shared by ``tests/e2e/test_chaos.py`` (short, in CI) and
``bench/chaos.py`` (long): concurrent senders with idempotency keys, a killer that
SIGKILLs the daemon while a turn, a tool round or a compaction call is under way, and a
check, through the API and the database, of what every acknowledged message became.

Each session has one sender that sends its messages in order, retrying each (same
``Idempotency-Key``) until it is acknowledged with a 202. After the run every session must
hold exactly the acknowledged messages, once each, in the order sent, and exactly one
final answer for each.
"""

from __future__ import annotations

import random
import re
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from netclaw.history import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from tests.e2e.conftest import DaemonProcess, config_data, free_port, write_json
from tests.fakes._scripted_server import said
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

SUMMARY = "\n".join(f"## {section}\n- chaos" for section in REQUIRED_SECTIONS)
KINDS = ("turn", "tool", "compaction")
MAX_BACKLOG = 8


@dataclass
class ChaosConfig:
    sessions: int = 4
    messages: int = 12  # per session (the bench sends until its time is up instead)
    kills: int = 3
    duration_s: float | None = None  # the bench: send for this long
    seed: int = 7
    call_delay_s: float = 0.15  # the scripted model's answer delay: kills land mid-call


@dataclass
class ChaosResult:
    acked: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    answered_twice: int = 0
    unanswered: int = 0
    tool_runs: int = 0  # tool results in the transcripts
    audited_wrong: int = 0  # tool runs missing from the audit trail, or in it more than once
    kills: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    restart_s: list[float] = field(default_factory=list)
    resumed: int = 0  # sessions with unfinished work that a restart resumed (from the start-up lines)
    problems: list[str] = field(default_factory=list)

    @property
    def restart_max_s(self) -> float:
        return max(self.restart_s, default=0.0)

    @property
    def restart_median_s(self) -> float:
        return statistics.median(self.restart_s) if self.restart_s else 0.0


class Chaos:
    def __init__(self, root: Path, scripted: ScriptedOpenAIThread, config: ChaosConfig) -> None:
        self.root = root
        self.scripted = scripted
        self.config = config
        self.random = random.Random(config.seed)
        self.data_dir = root / "data"
        self.port = free_port()
        self.config_path = write_json(
            root / "netclaw.json",
            config_data(
                self.data_dir,
                scripted.base_url,
                self.port,
                models={
                    "main": {
                        "provider": "local",
                        "model": "scripted",
                        "context_window": 6000,
                        "max_output_tokens": 500,
                    }
                },
                session={"compaction_threshold": 0.5, "keep_recent_tool_results": 1},
            ),
        )
        self.daemon: DaemonProcess | None = None
        self.lock = threading.Lock()
        self.sent: dict[str, list[str]] = {}  # session -> acknowledged texts, in order
        self.in_call = {kind: threading.Event() for kind in KINDS}
        self.result = ChaosResult()
        self._stop_sending = threading.Event()
        scripted.set_responder(self._respond)
        scripted.route(SUMMARY_MARKER, self._compaction(SUMMARY))
        scripted.route(FLUSH_MARKER, self._compaction("[]"))

    # -- the scripted model -------------------------------------------------------------------

    def _respond(self, body: dict[str, Any]) -> Reply:
        # A turn's volatile tail is netclaw's note: the model answers what people said.
        messages = [
            {**m, "content": said(str(m.get("content")))}
            for m in body.get("messages") or []
            if said(str(m.get("content")))
        ]
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and "[tool]" in str(last.get("content")):
            self.in_call["tool"].set()
            return Reply(tool_calls=[ToolCallSpec("current_time", {})], delay_s=self.config.call_delay_s)
        self.in_call["turn"].set()
        text = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        # Each answer names its message, and is long enough that sessions compact now and then.
        return Reply(text=f"answer to <{text}> " + "lorem ipsum " * 40, delay_s=self.config.call_delay_s)

    def _compaction(self, text: str) -> Callable[[dict[str, Any]], Reply]:
        def answer(body: dict[str, Any]) -> Reply:
            self.in_call["compaction"].set()
            return Reply(text=text, delay_s=self.config.call_delay_s)

        return answer

    # -- the daemon ---------------------------------------------------------------------------

    def start_daemon(self) -> float:
        started = time.monotonic()
        self.daemon = DaemonProcess(self.config_path, self.data_dir, self.port, self.root / "logs")
        self.daemon.wait_ready(timeout=30)
        return time.monotonic() - started

    def kill_daemon(self) -> None:
        assert self.daemon is not None
        self.daemon.sigkill()
        self.daemon.close()

    # -- senders and the killer -----------------------------------------------------------------

    def _send_all(self, session_id: str) -> None:
        n = 0
        deadline = time.monotonic() + self.config.duration_s if self.config.duration_s else None
        while not self._stop_sending.is_set():
            if deadline is None and n >= self.config.messages:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            tool = " [tool]" if n % 4 == 3 else ""
            text = f"{session_id} message {n}{tool} " + "filler " * self.random.randint(5, 60)
            self._wait_for_backlog(session_id)
            self._send_one(session_id, f"{session_id}-{n}", text.strip())
            n += 1
            time.sleep(self.random.uniform(0.0, 0.05))

    def _wait_for_backlog(self, session_id: str) -> None:
        """Keep at most ``MAX_BACKLOG`` messages queued per session: a sender far ahead of
        its session would only measure how long the queue takes to drain."""
        while not self._stop_sending.is_set():
            try:
                rows = self._sessions()
            except (httpx.HTTPError, OSError, ValueError):
                return  # down: the send retries anyway
            row = next((r for r in rows if r.get("id") == session_id), None)
            if row is None or int(row.get("pending") or 0) < MAX_BACKLOG:
                return
            time.sleep(0.1)

    def _sessions(self) -> list[dict[str, Any]]:
        token = (self.data_dir / "control.token").read_text().strip()
        response = httpx.get(
            f"http://127.0.0.1:{self.port}/api/sessions",
            headers={"Authorization": f"Bearer {token}"},
            timeout=5,
        )
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()
        return rows

    def _send_one(self, session_id: str, key: str, text: str) -> None:
        url = f"http://127.0.0.1:{self.port}/api/sessions/{session_id}/messages"
        while True:
            token_file = self.data_dir / "control.token"
            try:
                token = token_file.read_text().strip()
                response = httpx.post(
                    url,
                    json={"text": text, "user": "chaos"},
                    headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
                    timeout=10,
                )
            except (httpx.HTTPError, OSError):
                time.sleep(0.05)  # the daemon is down: the same key again in a moment
                continue
            if response.status_code == 202:
                with self.lock:
                    self.sent.setdefault(session_id, []).append(text)
                    self.result.acked += 1
                return
            if response.status_code >= 500 or response.status_code == 429:
                time.sleep(0.05)
                continue
            raise AssertionError(f"{key}: unexpected {response.status_code}: {response.text}")

    def _kill_loop(self, kills: int | None) -> None:
        done = 0
        while not self._stop_sending.is_set() and (kills is None or done < kills):
            kind = KINDS[done % len(KINDS)]
            self.in_call[kind].clear()
            time.sleep(self.random.uniform(0.2, 1.0))
            if not self.in_call[kind].wait(5):  # nothing of that kind came: any moment will do
                kind = "turn"
            time.sleep(self.random.uniform(0.0, self.config.call_delay_s))  # mid-call
            self.kill_daemon()
            with self.lock:
                self.result.kills[kind] += 1
            self.result.restart_s.append(self.start_daemon())
            done += 1

    def run(self) -> ChaosResult:
        self.result.restart_s.append(self.start_daemon())
        names = [f"cli:chaos-{i}" for i in range(self.config.sessions)]
        senders = [threading.Thread(target=self._send_all, args=(name,), daemon=True) for name in names]
        killer = threading.Thread(
            target=self._kill_loop, args=(None if self.config.duration_s else self.config.kills,), daemon=True
        )
        for thread in (*senders, killer):
            thread.start()
        for thread in senders:
            thread.join()
        self._stop_sending.set()
        killer.join()
        self._settle()
        self.check()
        self.result.resumed = sum(
            int(found.group(1))
            for err in (self.root / "logs").glob("*.err")
            for found in re.finditer(r"(\d+) session\(s\) resumed", err.read_text(errors="replace"))
        )
        return self.result

    def close(self) -> None:
        self._stop_sending.set()
        if self.daemon is not None:
            self.daemon.close()

    # -- the verdict ----------------------------------------------------------------------------

    def _settle(self, idle_timeout: float = 60.0) -> None:
        """Every acknowledged message answered; gives up only after ``idle_timeout`` with
        no progress (a stuck session is a finding, a slow one is not)."""
        assert self.daemon is not None
        last, changed = None, time.monotonic()
        while time.monotonic() - changed < idle_timeout:
            rows = self.daemon.sessions()
            pending = sum(int(r.get("pending") or 0) for r in rows)
            if pending == 0 and len(rows) >= len(self.sent):
                return
            if pending != last:
                last, changed = pending, time.monotonic()
            time.sleep(0.2)
        self.result.problems.append(f"{last} message(s) still pending, no progress for {idle_timeout:g}s")

    def check(self) -> None:
        assert self.daemon is not None
        for session_id, sent in self.sent.items():
            messages = self.daemon.session(session_id)["messages"]
            users = [m["content"] for m in messages if m["role"] == "user"]
            self._compare(session_id, sent, users)
            self._answers(session_id, messages)
            self._audited(session_id, messages)
        self._journal_identities()

    def _compare(self, session_id: str, sent: list[str], users: list[str]) -> None:
        result = self.result
        for text in sent:
            count = users.count(text)
            if count == 0:
                result.lost += 1
                result.problems.append(f"{session_id}: lost {text[:40]!r}")
            elif count > 1:
                result.duplicated += count - 1
                result.problems.append(f"{session_id}: {count}x {text[:40]!r}")
        seen = [u for u in dict.fromkeys(users) if u in sent]
        if seen != [t for t in sent if t in seen]:
            result.reordered += 1
            result.problems.append(f"{session_id}: messages out of order")

    def _answers(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """After each user message: exactly one final answer (an assistant message without
        tool calls), and it answers that message."""
        current: str | None = None
        finals = 0

        def close() -> None:
            if current is None:
                return
            if finals == 0:
                self.result.unanswered += 1
                self.result.problems.append(f"{session_id}: no answer to {current[:40]!r}")
            elif finals > 1:
                self.result.answered_twice += 1
                self.result.problems.append(f"{session_id}: {finals} answers to {current[:40]!r}")

        for m in messages:
            if m["role"] == "user":
                close()
                current, finals = m["content"], 0
            elif (
                m["role"] == "assistant"
                and not m.get("tool_calls")
                and current is not None
                and f"<{current}>" in str(m.get("content"))
            ):
                finals += 1
        close()

    def _audited(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """Every tool run of the transcript is in the audit trail exactly once."""
        assert self.daemon is not None
        assert self.daemon.http is not None
        response = self.daemon.http.get("/api/audit", params={"session": session_id, "limit": "100000"})
        response.raise_for_status()
        audited = [e["detail"]["call_id"] for e in response.json() if e["kind"] == "tool_run"]
        ran = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        self.result.tool_runs += len(ran)
        if sorted(audited) != sorted(ran) or len(set(audited)) != len(audited):
            self.result.audited_wrong += 1
            self.result.problems.append(
                f"{session_id}: {len(ran)} tool run(s), {len(audited)} in the audit trail "
                f"({len(set(audited))} distinct)"
            )

    def _journal_identities(self) -> None:
        """Straight from the database: no idempotency identity was admitted twice."""
        with sqlite3.connect(f"file:{self.data_dir / 'netclaw.db'}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT persistence_id, json_extract(payload, '$.message.identity') AS identity, COUNT(*)"
                " FROM events WHERE type = 'InputAdmitted' AND identity IS NOT NULL"
                " GROUP BY persistence_id, identity HAVING COUNT(*) > 1"
            ).fetchall()
        for pid, identity, count in rows:
            self.result.duplicated += count - 1
            self.result.problems.append(f"{pid}: identity {identity} admitted {count} times")
