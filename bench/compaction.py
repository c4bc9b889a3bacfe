"""Compaction whose summaries always fail: turn latency and prompt size at 300 messages,
next to the same sessions with summaries that succeed.

The real :class:`~netclaw.daemon.Daemon` runs in this process (port 0, a temporary
data_dir); the provider is :mod:`tests.fakes.scripted_openai` on its own thread. Every
request it answers waits ``--delay-ms`` (20 ms) first, chat, memory flush and summary
alike, so the model's time is a known constant and what varies is how many calls a turn
makes. ``--sessions`` (2) sessions run at once, each sending its next message with
``IntakeService.submit(..., wait=True)`` when the last one is answered, to ``--messages``
(300) messages each: tool-free turns, one user message (100-300 characters) and one
reply (400-1,000 characters), ~180 tokens a turn. Window 8,192 tokens,
``max_output_tokens`` 1,024 (trim budget 7,168), ``compaction_threshold`` 0.75: the
first compaction is due around turn 25 and, when summaries work, again every ~16 turns.

Runs (one process, one after the other, same conversation)
    ``healthy``  the summary route answers every required section (~700 characters),
                 the memory flush ``[]``.
    ``failing``  the summary route answers a text without the sections: the quality
                 guard retries once and cancels it, every time. The session backs off
                 (3, 6, 12, 24 turns), gives up after 5 failures in a row and lives on
                 trimming alone.

Measured
    turn latency  ``submit(wait=True)`` to its outcome on the daemon's loop, so a
                  compaction run between two turns is paid by the next one, as a user
                  would see it; reported over the last third of the turns (turns
                  101-150, messages 200-300), both sessions pooled.
    requests      at the fake, by kind (chat / flush / summary) and session, with the
                  fake's count of each prompt: by default with cl100k, netclaw's own
                  tokenizer, and OpenAI's per-message framing, tool schemas included
                  (``--provider-count chars``: chars//4, a provider that counts unlike
                  netclaw, whose counts the session calibrates from). The fake reports
                  it as ``usage.prompt_tokens`` and refuses a prompt above the window
                  with it (400 ``context_length_exceeded``). Over budget = above the
                  trim budget (window - max_output).
    journal       (sqlite3, read-only, afterwards) ``SessionCompacted`` (summaries that
                  succeeded, failed), ``HistoryTrimmed``, failed turns.

Figures (the failing run): p95 turn latency over the healthy run's <= 1.5; slowest turn
of the whole run <= 2 s; summary attempts per session <= 6 (5 tries, then it gives up);
0 requests over the budget; every turn answered. Counts are deterministic (same seed,
same numbers); only the wall times vary. ~10 s; ``--quick``: 60 messages, window 4,096
and max_output 512 (so compaction and a few backoffs happen in 30 turns), ~4 s.

Run from the repo root: ``python bench/compaction.py [--quick] [--messages 300]
[--sessions 2] [--seed 34] [--window 8192] [--max-output 1024] [--delay-ms 20]
[--provider-count cl100k|chars] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
from _common import daemon_settings, figure, info, log, percentile

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.history.compaction import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from netclaw.history.tokens import MESSAGE_OVERHEAD, PRIMING_OVERHEAD, TokenCounter
from tests.fakes._scripted_server import ScriptedServerThread, request_messages, said
from tests.fakes.scripted_openai import Reply, ScriptedOpenAI, estimate_prompt_tokens

MODEL = "scripted"
CHUNK = 256  # characters per SSE delta (speed only)
MAX_TURN_S = 2.0
P95_RATIO = 1.5
MAX_SUMMARY_ATTEMPTS = 6
TAG = re.compile(r"\bS(\d+) step \d+:")

WORDS = (
    "please look at the release notes for the billing service and tell me which of the "
    "open tickets still block the rollout then check the staging logs for timeouts in "
    "the payment worker and compare the retry settings with what production runs today"
).split()


# --------------------------------------------------------------------------- the conversation


@dataclass(frozen=True)
class TurnPlan:
    text: str
    reply: str


def words(rng: random.Random, size: int) -> str:
    out = ""
    while len(out) < size:
        out += rng.choice(WORDS) + " "
    return out[:size].rstrip()


def make_plans(session: int, turns: int, seed: int) -> list[TurnPlan]:
    rng = random.Random(seed * 1000 + session)
    plans = [
        TurnPlan(
            f"S{session} step {n + 1}: {words(rng, rng.randint(100, 300))}",
            f"Done with step {n + 1}. {words(rng, rng.randint(400, 1000))}",
        )
        for n in range(turns)
    ]
    assert len({p.text for p in plans}) == len(plans)
    return plans


def session_id(n: int) -> str:
    return f"cli:compaction-{n}"  # a CLI session: audience "personal", so the flush runs too


def good_summary(body: dict[str, Any]) -> str:
    """A complete structured summary (~700 characters) naming the last step it saw."""
    text = " ".join(str(m.get("content") or "") for m in request_messages(body)[1:])
    steps = re.findall(r"step (\d+):", text)
    last = steps[-1] if steps else "?"
    parts = {
        "Primary request and intent": "- Get the billing service ready for the rollout.",
        "Key decisions": "- Compare staging retry settings with production before rolling out.",
        "Exact identifiers": "- billing service\n- payment worker",
        "Work completed": f"- Steps up to {last} answered.",
        "Pending tasks and open questions": "- Which open tickets still block the rollout.",
        "Current work and next step": f"- Step {last}; next: the following step.",
    }
    assert set(parts) == set(REQUIRED_SECTIONS)
    return "\n\n".join(f"## {name}\n{parts[name]}" for name in REQUIRED_SECTIONS)


# --------------------------------------------------------------------------- the provider


@dataclass(frozen=True, slots=True)
class Sent:
    kind: str  # "chat" | "flush" | "summary"
    session: int  # from the S<n> tag in the transcript (0: none found)
    tokens: int  # the fake's count of the prompt (see CountingOpenAI)
    overflow: bool  # answered 400 context_length_exceeded


class CountingOpenAI(ScriptedOpenAI):
    """The scripted server keeping one small record per request (not its body). It counts
    a prompt's tokens one of two ways (``--provider-count``), reports that count as
    ``usage.prompt_tokens`` and refuses prompts above the window by it:

    - ``cl100k``: as OpenAI documents for its cl100k models, the tokenizer netclaw's
      estimate uses: per message its framing and content, plus the tool schemas and the
      reply priming. The provider counts as netclaw does, so the budget is exact.
    - ``chars``: chars//4 of the message contents, tool-call arguments and tool schemas
      (the scripted fake's own rough count): a provider whose tokenizer differs, which
      netclaw's calibration learns from the counts it reports.
    """

    def __init__(self, *, count: str = "cl100k", **kwargs: Any) -> None:
        super().__init__(max_body_bytes=16 * 1024 * 1024, **kwargs)
        self.count = count
        self.sent: list[Sent] = []
        self.sent_lock = threading.Lock()
        self._counter = TokenCounter()
        self._texts_counted: dict[str, int] = {}  # the same messages come back in every request

    def _count_text(self, text: str) -> int:
        n = self._texts_counted.get(text)
        if n is None:
            n = self._texts_counted[text] = self._counter.count_text(text)
        return n

    def _estimate_prompt_tokens(self, body: dict[str, Any]) -> int:
        tools = body.get("tools") or []
        if self.count == "chars":
            return estimate_prompt_tokens(body) + (len(json.dumps(tools)) // 4 if tools else 0)
        schemas = [t.get("function", t) for t in tools if isinstance(t, dict)]
        total = PRIMING_OVERHEAD + self._counter.count_tools(schemas)
        for m in request_messages(body):
            content = m.get("content")
            total += MESSAGE_OVERHEAD + self._count_text(content if isinstance(content, str) else "")
            if m.get("name"):
                total += self._count_text(str(m["name"])) + 1
        return total

    def _usage(self, body: dict[str, Any], step: Reply, args: list[str]) -> dict[str, int]:
        usage = super()._usage(body, step, args)
        usage["prompt_tokens"] = self._estimate_prompt_tokens(body)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return usage

    def _record(self, request: Any, body: dict[str, Any]) -> None:
        messages = request_messages(body)
        head = str(messages[0].get("content") or "") if messages else ""
        kind = "flush" if FLUSH_MARKER in head else "summary" if SUMMARY_MARKER in head else "chat"
        tag = TAG.search(json.dumps(messages[1:]))
        tokens = self._estimate_prompt_tokens(body)
        overflow = self.context_window is not None and tokens > self.context_window
        with self.sent_lock:
            self.sent.append(Sent(kind, int(tag.group(1)) if tag else 0, tokens, overflow))


def chat_responder(plans: dict[str, TurnPlan], delay_s: float) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        messages = request_messages(body)
        last_user = next(
            m for m in reversed(messages) if m.get("role") == "user" and said(str(m.get("content") or ""))
        )
        plan = plans[said(str(last_user.get("content") or ""))]  # without the turn's context tail
        return Reply(text=plan.reply, chunk_size=CHUNK, delay_s=delay_s)

    return respond


# --------------------------------------------------------------------------- one run


@dataclass
class Turn:
    session: int
    n: int  # 1-based
    seconds: float
    status: str
    answered: bool


@dataclass
class SessionLog:
    summaries_ok: int = 0
    summaries_failed: int = 0
    trims: int = 0
    failed_turns: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    attempt_turns: list[int] = field(default_factory=list)  # the turn count at each summary attempt


@dataclass
class RunResult:
    name: str
    sent: list[Sent]
    turns: list[Turn] = field(default_factory=list)
    sessions: dict[int, SessionLog] = field(default_factory=dict)
    wall_s: float = 0.0
    responder_errors: int = 0
    status_failing: dict[str, int] = field(default_factory=dict)  # what `netclaw status` shows

    def calls(self, kind: str | None = None, session: int | None = None) -> int:
        return sum(
            1
            for s in self.sent
            if (kind is None or s.kind == kind) and (session is None or s.session == session)
        )

    def late(self, total_turns: int) -> list[float]:
        """Turn latencies over the last third of the turns (turns 101-150 of 150)."""
        first = total_turns - total_turns // 3
        return [t.seconds for t in self.turns if t.n > first]

    def over_budget(self, budget: int) -> list[Sent]:
        return [s for s in self.sent if s.tokens > budget]

    @property
    def answered(self) -> int:
        return sum(1 for t in self.turns if t.answered)


def settings_for(data_dir: Path, base_url: str, window: int, max_output: int) -> Settings:
    config: Settings = daemon_settings(
        data_dir,
        base_url,
        model=MODEL,
        window=window,
        max_output=max_output,
        timeout_s=60,
        session={"compaction_threshold": 0.75},
        journal={"synchronous": "normal"},
    )
    return config


async def drive(daemon: Daemon, n: int, plans: list[TurnPlan], result: RunResult) -> None:
    gateway = daemon.gateway
    assert gateway is not None
    for i, plan in enumerate(plans):
        t0 = time.perf_counter()
        _, outcome = await gateway.intake.submit(Inbound(session_id(n), plan.text), wait=True)
        seconds = time.perf_counter() - t0
        assert outcome is not None
        answered = outcome.status == "completed" and bool(outcome.reply)
        result.turns.append(Turn(n, i + 1, seconds, outcome.status, answered))
        if (i + 1) % 50 == 0:
            log(f"  {result.name}: session {n}, {i + 1} turns")


def read_journal(db: Path, sessions: int, result: RunResult) -> None:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for n in range(1, sessions + 1):
            rows = conn.execute(
                "SELECT type, payload FROM events WHERE persistence_id = ? ORDER BY seq", (session_id(n),)
            ).fetchall()
            slog = result.sessions.setdefault(n, SessionLog())
            turns = 0
            for type_, payload in rows:
                data = json.loads(payload)
                if type_ == "TurnRecorded":
                    turns += 1
                    if data["status"] != "completed":
                        slog.failed_turns[(data.get("error") or {}).get("code", "?")] += 1
                elif type_ == "HistoryTrimmed":
                    slog.trims += 1
                elif type_ == "SessionCompacted":
                    if data.get("summary"):
                        slog.summaries_ok += 1
                    elif data.get("summary_failed"):
                        slog.summaries_failed += 1
                    else:
                        continue
                    slog.attempt_turns.append(turns)
                    if data.get("note"):
                        slog.notes[re.split(r"[:(]", data["note"])[0].strip()] += 1


def run_once(
    name: str,
    plans: list[list[TurnPlan]],
    tmp: Path,
    *,
    window: int,
    max_output: int,
    delay_s: float,
    count: str,
) -> RunResult:
    by_text = {p.text: p for ps in plans for p in ps}
    server = CountingOpenAI(count=count, default=chat_responder(by_text, delay_s), context_window=window)
    fake = ScriptedServerThread(server, f"scripted-{name}")
    fake.route(FLUSH_MARKER, lambda body: Reply(text="[]", delay_s=delay_s))
    if name == "failing":
        fake.route(
            SUMMARY_MARKER, lambda body: Reply(text="I would rather not summarise this.", delay_s=delay_s)
        )
    else:
        fake.route(
            SUMMARY_MARKER, lambda body: Reply(text=good_summary(body), chunk_size=CHUNK, delay_s=delay_s)
        )
    result = RunResult(name, server.sent)
    data_dir = tmp / name
    daemon: Daemon | None = None
    fake.start()
    try:
        daemon = Daemon(settings_for(data_dir, fake.base_url, window, max_output))
        daemon.start()
        assert daemon.io is not None

        async def all_sessions() -> None:
            await asyncio.gather(*(drive(daemon, n + 1, ps, result) for n, ps in enumerate(plans)))
            assert daemon.manager is not None  # read on the loop, where the manager lives
            result.status_failing = dict(daemon.manager.compaction_failing)

        t0 = time.perf_counter()
        daemon.io.run(all_sessions(), 1800)
        result.wall_s = time.perf_counter() - t0
    finally:
        if daemon is not None:
            daemon.stop()
        fake.stop()
    result.responder_errors = len(server.errors)
    read_journal(data_dir / "netclaw.db", len(plans), result)
    return result


# --------------------------------------------------------------------------- report


def count_figure(name: str, value: int, unit: str, target: str, met: bool) -> None:
    """:func:`_common.figure` for a whole number (printed without decimals)."""
    print(f"figure: {name} = {value} {unit} (target {target}: {'met' if met else 'missed'})", flush=True)


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def report_run(r: RunResult, turns: int, sessions: int, budget: int) -> None:
    late = r.late(turns)
    first = turns - turns // 3
    ms = [x * 1000 for x in late]
    info(
        f"{r.name}_turn_latency",
        f"p50 {c.fmt(percentile(ms, 50))} / p95 {c.fmt(percentile(ms, 95))} / max {c.fmt(max(ms, default=0))}",
        "ms",
        f"submit to outcome, turns {first + 1}-{turns} (messages {2 * first}-{2 * turns}), "
        f"{len(late)} turns over {sessions} session(s)",
    )
    all_ms = [t.seconds * 1000 for t in r.turns]
    slowest = sorted(r.turns, key=lambda t: -t.seconds)[:3]
    info(
        f"{r.name}_turn_latency_all",
        f"p50 {c.fmt(percentile(all_ms, 50))} / p95 {c.fmt(percentile(all_ms, 95))} / max {c.fmt(max(all_ms, default=0))}",
        "ms",
        "every turn; slowest: "
        + ", ".join(f"S{t.session} turn {t.n} {t.seconds * 1000:.0f} ms" for t in slowest),
    )
    per_session = "; ".join(
        f"S{n}: {r.calls('summary', n)} summary, {r.calls('flush', n)} flush, {r.calls('chat', n)} chat"
        for n in sorted(r.sessions)
    )
    info(
        f"{r.name}_llm_calls",
        str(r.calls()),
        "requests",
        f"chat {r.calls('chat')}, flush {r.calls('flush')}, summary {r.calls('summary')} "
        f"(a summary attempt is 1 request, 2 when the quality guard retries); {per_session}",
    )
    attempts = "; ".join(
        f"S{n}: {s.summaries_ok} ok, {s.summaries_failed} failed, at turns {s.attempt_turns}"
        for n, s in sorted(r.sessions.items())
    )
    info(f"{r.name}_summary_attempts", str(max_attempts(r)), "max per session", attempts)
    chat = [s.tokens for s in r.sent if s.kind == "chat"]
    other = [s.tokens for s in r.sent if s.kind != "chat"]
    over = r.over_budget(budget)
    info(
        f"{r.name}_max_prompt",
        f"{max(chat, default=0):,}",
        "tokens",
        f"largest chat request (the fake's count) vs the trim budget {budget:,}; "
        f"largest flush/summary request {max(other, default=0):,}; {len(over)} request(s) over the budget, "
        f"{sum(1 for s in r.sent if s.overflow)} refused as over the window",
    )
    trims = sum(s.trims for s in r.sessions.values())
    notes: Counter[str] = Counter()
    for s in r.sessions.values():
        notes.update(s.notes)
    info(f"{r.name}_trims", str(trims), "count", f"HistoryTrimmed events; compaction notes {dict(notes)}")
    failed: Counter[str] = Counter()
    for s in r.sessions.values():
        failed.update(s.failed_turns)
    statuses = Counter(t.status for t in r.turns)
    info(
        f"{r.name}_turns_answered",
        f"{r.answered}/{turns * sessions}",
        "turns",
        f"outcomes {dict(statuses)}"
        + (f"; failed by code {dict(failed)}" if failed else "")
        + (f"; responder errors {r.responder_errors}" if r.responder_errors else ""),
    )
    info(
        f"{r.name}_status_compaction_failing",
        json.dumps(r.status_failing, sort_keys=True),
        note="sessions and failures in a row, as `netclaw status` and /metrics show them at the end",
    )
    info(f"{r.name}_wall_time", r.wall_s, "s")


def max_attempts(r: RunResult) -> int:
    return max((s.summaries_ok + s.summaries_failed for s in r.sessions.values()), default=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 messages, window 4096: a few seconds")
    parser.add_argument("--messages", type=int, default=None, help="messages per session (300; quick 60)")
    parser.add_argument("--sessions", type=int, default=2, help="sessions run at once")
    parser.add_argument("--seed", type=int, default=34, help="seed of the scripted conversations")
    parser.add_argument("--window", type=int, default=None, help="context window (8192; quick 4096)")
    parser.add_argument("--max-output", type=int, default=None, help="max_output_tokens (1024; quick 512)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the fake's wait before every answer")
    parser.add_argument(
        "--provider-count",
        choices=("cl100k", "chars"),
        default="cl100k",
        help="how the fake counts prompt tokens (and checks them against the window): with netclaw's "
        "tokenizer (cl100k, OpenAI's framing), or chars//4 (a provider whose tokenizer differs)",
    )
    parser.add_argument("--dir", default=None, help="where the temporary data_dirs go")
    args = parser.parse_args()

    messages = args.messages or (60 if args.quick else 300)
    window = args.window or (4096 if args.quick else 8192)
    max_output = args.max_output or (512 if args.quick else 1024)
    turns = messages // 2
    budget = window - max_output
    plans = [make_plans(n + 1, turns, args.seed) for n in range(args.sessions)]
    started = time.perf_counter()
    load_before = load_line()
    results: list[RunResult] = []
    with c.temp_dir("netclaw-bench-compaction-", args.dir) as tmp:
        for name in ("healthy", "failing"):
            log(f"run {name} ...")
            r = run_once(
                name,
                plans,
                tmp,
                window=window,
                max_output=max_output,
                delay_s=args.delay_ms / 1000,
                count=args.provider_count,
            )
            log(f"run {name}: {r.wall_s:.1f} s, {r.answered}/{turns * args.sessions} answered")
            results.append(r)
    healthy, failing = results

    info(
        "conversation",
        f"{args.sessions} session(s) x {turns} turns ({2 * turns} messages), tool-free",
        note=f"window {window}, max_output {max_output}, trim budget {budget}, threshold 0.75; "
        f"every answer after {args.delay_ms:g} ms; provider counts {args.provider_count}; seed {args.seed}",
    )
    for r in results:
        report_run(r, turns, args.sessions, budget)
    info("machine_load", f"{load_before} at start, {load_line()} at end", note="os.getloadavg 1/5/15 min")
    log(f"wall time {time.perf_counter() - started:.0f} s")

    h95 = percentile(healthy.late(turns), 95)
    f95 = percentile(failing.late(turns), 95)
    ratio = f95 / h95 if h95 > 0 else float("nan")
    info("compaction_p95_turn", f"healthy {c.fmt(h95 * 1000)} ms, failing {c.fmt(f95 * 1000)} ms")
    total = turns * args.sessions
    reference = healthy.answered == total  # a reference that dropped turns compares with nothing
    if not reference:
        info(
            "healthy_complete",
            f"{healthy.answered}/{total}",
            note="REFERENCE INCOMPLETE: the ratio counts as missed",
        )
    figure(
        "compaction_failing_turn_p95_ratio",
        ratio,
        "of healthy",
        f"<= {P95_RATIO}",
        ratio <= P95_RATIO and reference,
    )
    slowest = max((t.seconds for t in failing.turns), default=float("nan"))
    figure("compaction_failing_max_turn_s", slowest, "s", f"<= {MAX_TURN_S:g}", slowest <= MAX_TURN_S)
    attempts = max_attempts(failing)
    count_figure(
        "compaction_failing_summary_attempts",
        attempts,
        "per session",
        f"<= {MAX_SUMMARY_ATTEMPTS}",
        attempts <= MAX_SUMMARY_ATTEMPTS,
    )
    over = len(failing.over_budget(budget))
    count_figure("compaction_failing_over_budget_requests", over, "requests", "== 0", over == 0)
    count_figure(
        "compaction_failing_turns_answered",
        failing.answered,
        "turns",
        f"== {total}",
        failing.answered == total,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
