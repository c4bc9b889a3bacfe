"""Prompt caching: how much of each request repeats the previous one, and what it saves.

One session of 200 turns (``--turns``) with recalled memories and tool rounds, played by
the real :class:`~netclaw.daemon.Daemon` in this process (port 0, a temporary data_dir)
against the scripted providers of ``tests/fakes`` on threads. Every turn's user message
(100-300 characters) shares words with a few of the memories seeded before the run, so
recall finds 1-3 of them most turns (they go into the turn's volatile tail); about half the
turns call a benchmark tool ``bench_lookup`` (800-2,000 characters of deterministic text)
once or twice before answering (200-500 characters). ``--skills`` (20) typical skills are
installed, so their index is in every system prompt (issue 30: the prefix holds with
them). Window 32,768 tokens, max output 4,096; compaction at 0.75 of the window;
everything seeded.

Runs
    ``openai``      the OpenAI-compatible fake. For each chat request (the compaction's
                    flush and summary calls are counted apart), its **prefix share**: how
                    much of it — tools, then messages, as JSON as sent — is a prefix of the
                    previous chat request's (the length of their common prefix over its
                    length). A request is *after a break* when a trim or a compaction was
                    recorded since the previous one.
    ``anthropic``   the Anthropic fake with its simulated prompt cache (it reads the
                    longest held prefix at the request's ``cache_control`` breakpoints and
                    writes up to the last one; see ``tests.fakes._scripted_server.PrefixCache``):
                    each request's uncached input, cache reads and cache writes, as usage
                    reports them.
    ``uncached``    the same with ``providers.<name>.prompt_cache`` off: no breakpoints,
                    everything billed as input.
    ``fallback``    a main model whose provider (the Anthropic fake) answers every request
                    529 overloaded, with one retry, and a fallback on the OpenAI fake: the
                    requests each provider saw for one turn.

Figures
    ``prefix_share_steady_mean``      mean share of the chat requests from turn 10 on. Target >= 0.95.
    ``prefix_share_min``              the lowest share of a request that is not right after a
                                      break. Target >= 0.80.
    ``cache_breaks_per_25_turns``     trims + compactions per 25 turns. Target <= 1.
    ``billed_input_ratio_turn_200``   the last turn's billed input-token equivalent with
                                      Anthropic-style pricing (uncached 1x, cache reads 0.1x,
                                      writes 1.25x), cached over uncached. Target <= 0.25.
    ``fallback_extra_requests``       requests beyond the main model's retries until the turn
                                      was answered. Target <= 1.

``--quick`` plays 30 turns in a few seconds (the figures are printed, their targets mean
little there). Run from the repo root: ``python bench/cache.py [--turns 200] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import _common as c
from _common import daemon_settings, figure, info, log, machine_load

from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.history.compaction import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from netclaw.persistence import NewMemory
from netclaw.tools import Tool, ToolContext
from skills import TYPICAL  # bench/skills.py: typical one-line descriptions
from tests.fakes._scripted_server import ScriptedServerThread, request_messages, said
from tests.fakes.scripted_anthropic import Reply as AReply
from tests.fakes.scripted_anthropic import ScriptedAnthropic, overloaded
from tests.fakes.scripted_anthropic import ToolCallSpec as AToolCall
from tests.fakes.scripted_openai import Reply, ScriptedOpenAI, ToolCallSpec

SESSION = "cli:cache-bench"
TOOL = "bench_lookup"
WINDOW, MAX_OUTPUT = 32768, 4096
STEADY_FROM_TURN = 10
CHUNK = 256
TOPICS = (
    "deploy pipeline staging rollout canary",
    "database migration schema index vacuum",
    "worker queue retry backoff deadline",
    "cache eviction timeout memory pressure",
    "logging level tracing sampling exporter",
    "billing invoice currency rounding tax",
    "search ranking bm25 synonyms stemming",
    "backup snapshot restore retention offsite",
)
MEMORIES = [
    ("The staging rollout needs a canary at 5 percent for one hour", "decision"),
    ("Database migrations run with an index rebuild on Sundays", "fact"),
    ("The worker queue retries with exponential backoff up to a deadline of 10 minutes", "fact"),
    ("Cache eviction follows memory pressure; timeouts are 30 seconds", "fact"),
    ("The user prefers tracing sampled at 1 percent in production", "preference"),
    ("Invoices round currency amounts half-even before tax", "fact"),
    ("Search ranking uses bm25 with a synonyms list and light stemming", "fact"),
    ("Backups snapshot nightly; retention is 30 days with an offsite copy", "fact"),
]
FILLER = (
    "please look into the setup and tell me what changed since last week and what we should do next".split()
)


@dataclass(frozen=True)
class Plan:
    text: str
    rounds: tuple[tuple[str, ...], ...]
    reply: str


def make_plans(turns: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    plans = []
    for n in range(turns):
        topic = rng.choice(TOPICS).split()
        words = [rng.choice(topic if rng.random() < 0.4 else FILLER) for _ in range(rng.randint(18, 50))]
        text = f"Turn {n + 1}: " + " ".join(words)
        shape = rng.random()
        rounds: tuple[tuple[str, ...], ...] = ()
        if shape < 0.3:
            rounds = ((f"{topic[0]}/{n}",),)
        elif shape < 0.45:
            rounds = ((f"{topic[0]}/{n}", f"{topic[1]}/{n}"),)
        elif shape < 0.55:
            rounds = ((f"{topic[0]}/{n}",), (f"{topic[2]}/{n}",))
        reply = f"About turn {n + 1}: " + " ".join(
            rng.choice(FILLER + topic) for _ in range(rng.randint(40, 90))
        )
        plans.append(Plan(text, rounds, reply))
    return plans


def lookup_text(key: str) -> str:
    rng = random.Random(zlib.crc32(key.encode()))
    size = rng.randint(800, 2000)
    out = f"# {key}\n"
    while len(out) < size:
        out += " ".join(rng.choice(FILLER) for _ in range(12)) + f" = {rng.randint(1, 9999)}\n"
    return out[:size]


async def lookup(args: Mapping[str, Any], ctx: ToolContext) -> str:
    return lookup_text(str(args.get("key", "")))


LOOKUP = Tool(
    name=TOOL,
    description="Look something up in the project notes.",
    parameters={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    handler=lookup,
)

SUMMARY = "\n\n".join(f"## {name}\n- the conversation so far, in short" for name in REQUIRED_SECTIONS)


# --------------------------------------------------------------------------- what the fakes saw


@dataclass
class Seen:
    """One chat request as a provider saw it."""

    at: float  # time.time() when it arrived
    turn: int  # 1-based, from its user message
    wire: str  # tools + messages (system too, for Anthropic) as JSON, cache markers left out
    prompt: int = 0  # usage: whole prompt tokens
    read: int = 0
    write: int = 0


@dataclass
class Record:
    chat: list[Seen] = field(default_factory=list)
    compaction_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else "" for p in content)
    return ""


def _strip_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_marks(v) for v in value]
    return value


def _where(body: dict[str, Any], by_text: dict[str, int]) -> tuple[int, int]:
    """(the turn a chat request belongs to, the tool rounds it already has)."""
    messages = request_messages(body)
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") != "user":
            continue
        for piece in _pieces(m.get("content")):
            if piece in by_text:
                rounds = sum(1 for later in messages[i + 1 :] if _calls_tools(later))
                return by_text[piece], rounds
    raise KeyError("no user message of the plan in the request")


def _pieces(content: Any) -> list[str]:
    if isinstance(content, list):
        return [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return [said(_text(content))]  # an OpenAI-compatible message carries its turn's tail in it


def _calls_tools(message: dict[str, Any]) -> bool:
    if message.get("role") != "assistant":
        return False
    if message.get("tool_calls"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in content
    )


class WatchedOpenAI(ScriptedOpenAI):
    def __init__(self, plans: list[Plan], record: Record, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.by_text = {p.text: n + 1 for n, p in enumerate(plans)}
        self.record = record

    def _record(self, request: Any, body: dict[str, Any]) -> None:
        if _is_compaction(body):
            with self.record.lock:
                self.record.compaction_calls += 1
            return
        turn, _ = _where(body, self.by_text)
        wire = json.dumps([body.get("tools") or [], body["messages"]], separators=(",", ":"))
        with self.record.lock:
            self.record.chat.append(Seen(time.time(), turn, wire))

    def _usage(self, body: dict[str, Any], step: Reply, args: list[str]) -> dict[str, Any]:
        usage = super()._usage(body, step, args)
        if not _is_compaction(body):
            with self.record.lock:
                seen = self.record.chat[-1]
                seen.prompt = usage["prompt_tokens"]
                seen.read = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return usage


class WatchedAnthropic(ScriptedAnthropic):
    def __init__(self, plans: list[Plan], record: Record, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.by_text = {p.text: n + 1 for n, p in enumerate(plans)}
        self.record = record

    def _record(self, request: Any, body: dict[str, Any]) -> None:
        super()._record(request, body)
        self.requests.clear()  # the bench keeps its own record (200 turns of bodies is a lot)
        if _is_compaction(body):
            with self.record.lock:
                self.record.compaction_calls += 1
            return
        turn, _ = _where(body, self.by_text)
        stripped = _strip_marks([body.get("tools") or [], body.get("system"), body["messages"]])
        with self.record.lock:
            self.record.chat.append(Seen(time.time(), turn, json.dumps(stripped, separators=(",", ":"))))

    def _usage(
        self, body: dict[str, Any], step: AReply, calls: list[tuple[str, str, str]]
    ) -> tuple[int, int, int, int]:
        fresh, output, read, write = super()._usage(body, step, calls)
        if not _is_compaction(body):
            with self.record.lock:
                seen = self.record.chat[-1]
                seen.prompt, seen.read, seen.write = fresh + read + write, read, write
        return fresh, output, read, write


def _is_compaction(body: dict[str, Any]) -> bool:
    """A compaction's flush or summary call (its instructions carry a marker)."""
    messages = request_messages(body)
    head = _text(messages[0].get("content")) if messages else ""
    head += json.dumps(body.get("system") or "")  # Anthropic: the instructions are the system
    return FLUSH_MARKER in head or SUMMARY_MARKER in head


def responder(plans: list[Plan], anthropic: bool) -> Any:
    by_text = {p.text: n for n, p in enumerate(plans)}

    def respond(body: dict[str, Any]) -> Any:
        turn, done = _where(body, {k: v + 1 for k, v in by_text.items()})
        plan = plans[turn - 1]
        if done < len(plan.rounds):
            if anthropic:
                return AReply(
                    tool_calls=[AToolCall(TOOL, {"key": k}) for k in plan.rounds[done]], chunk_size=CHUNK
                )
            return Reply(
                tool_calls=[ToolCallSpec(TOOL, {"key": k}) for k in plan.rounds[done]], chunk_size=CHUNK
            )
        return (
            AReply(text=plan.reply, chunk_size=CHUNK)
            if anthropic
            else Reply(text=plan.reply, chunk_size=CHUNK)
        )

    return respond


# --------------------------------------------------------------------------- one run


@dataclass
class Run:
    name: str
    record: Record
    breaks: list[float] = field(default_factory=list)  # times of trims and compactions
    answered: int = 0
    wall_s: float = 0.0


def install_skills(root: Path, count: int) -> Path:
    """``count`` skills with typical one-line descriptions (those of bench/skills.py)."""
    from netclaw.skills import render_skill

    folder = root / "skills"
    for i in range(count):
        name, description = TYPICAL[i % len(TYPICAL)]
        name = name if i < len(TYPICAL) else f"{name}-{i}"
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "SKILL.md").write_text(render_skill(name, description, "1. Do it."))
    return folder


def play(
    name: str, plans: list[Plan], tmp: Path, *, provider: str, cache: str = "auto", skills: Path | None = None
) -> Run:
    record = Record()
    anthropic = provider == "anthropic"
    server: ScriptedOpenAI | ScriptedAnthropic
    if anthropic:
        server = WatchedAnthropic(plans, record, default=responder(plans, True))
    else:
        server = WatchedOpenAI(
            plans, record, default=responder(plans, False), max_body_bytes=64 * 1024 * 1024
        )
    fake = ScriptedServerThread(server, f"scripted-{name}")
    fake.route(FLUSH_MARKER, lambda body: (AReply if anthropic else Reply)(text="[]"))
    fake.route(SUMMARY_MARKER, lambda body: (AReply if anthropic else Reply)(text=SUMMARY))
    run = Run(name, record)
    data_dir = tmp / name
    fake.start()
    daemon: Daemon | None = None
    try:
        settings = daemon_settings(
            data_dir,
            fake.base_url,
            model="claude-scripted" if anthropic else "scripted",
            window=WINDOW,
            max_output=MAX_OUTPUT,
            providers={
                "local": {
                    "type": provider,
                    "base_url": fake.base_url,
                    "timeout_s": 60,
                    "max_retries": 2,
                    "prompt_cache": cache,
                }
            },
            journal={"synchronous": "normal"},
            skills={"dirs": [str(skills)] if skills is not None else []},
        )
        daemon = Daemon(settings)
        daemon.start()
        assert daemon.tools is not None and daemon.memory is not None and daemon.io is not None
        daemon.tools.register(LOOKUP)
        memory = daemon.memory
        daemon.io.run(
            memory.add([NewMemory(t, k) for t, k in MEMORIES], session_id="cli:seed", audience="personal")
        )
        t0 = time.perf_counter()
        daemon.io.run(_drive(daemon, plans, run), 3600)
        run.wall_s = time.perf_counter() - t0
    finally:
        if daemon is not None:
            daemon.stop()
        fake.stop()
    with sqlite3.connect(f"file:{data_dir / 'netclaw.db'}?mode=ro", uri=True) as conn:
        run.breaks = [
            float(ts)
            for (ts,) in conn.execute(
                "SELECT ts FROM events WHERE persistence_id = ? AND type IN ('HistoryTrimmed', 'SessionCompacted')"
                " ORDER BY seq",
                (SESSION,),
            )
        ]
    return run


async def _drive(daemon: Daemon, plans: list[Plan], run: Run) -> None:
    gateway = daemon.gateway
    assert gateway is not None
    for n, plan in enumerate(plans):
        _, outcome = await gateway.intake.submit(Inbound(SESSION, plan.text), wait=True)
        if outcome is not None and outcome.status == "completed":
            run.answered += 1
        if (n + 1) % 50 == 0:
            log(f"  {run.name}: {n + 1} turns")


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix (bisection over slices: C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Share:
    turn: int
    share: float
    after_break: bool


def shares(run: Run) -> list[Share]:
    found: list[Share] = []
    chat = run.record.chat
    for before, now in pairwise(chat):
        broke = any(before.at <= t <= now.at for t in run.breaks)
        found.append(Share(now.turn, common_prefix(before.wire, now.wire) / max(1, len(now.wire)), broke))
    return found


def billed(seen: list[Seen], turn: int, *, cached: bool) -> float:
    mine = [s for s in seen if s.turn == turn]
    if not cached:
        return float(sum(s.prompt for s in mine))
    return sum((s.prompt - s.read - s.write) + 0.1 * s.read + 1.25 * s.write for s in mine)


# --------------------------------------------------------------------------- fallback


def fallback_requests(tmp: Path) -> tuple[int, int, bool]:
    """(requests the overloaded main model saw, requests the fallback saw, answered)."""
    main = ScriptedAnthropic(default=lambda body: overloaded())
    spare = ScriptedOpenAI()
    main_thread = ScriptedServerThread(main, "scripted-main")
    spare_thread = ScriptedServerThread(spare, "scripted-spare")
    main_thread.start()
    spare_thread.start()
    daemon: Daemon | None = None
    try:
        settings = daemon_settings(
            tmp / "fallback",
            spare_thread.base_url,
            providers={
                "claude": {
                    "type": "anthropic",
                    "base_url": main_thread.base_url,
                    "max_retries": 1,
                    "timeout_s": 30,
                },
                "local": {
                    "type": "openai",
                    "base_url": spare_thread.base_url,
                    "max_retries": 1,
                    "timeout_s": 30,
                },
            },
            models={
                "main": {"provider": "claude", "model": "claude-scripted", "fallbacks": ["spare"]},
                "spare": {"provider": "local", "model": "scripted"},
            },
        )
        daemon = Daemon(settings)
        daemon.start()
        assert daemon.gateway is not None and daemon.io is not None
        _, outcome = daemon.io.run(
            daemon.gateway.intake.submit(Inbound("cli:fallback", "hello"), wait=True), 120
        )
        answered = outcome is not None and outcome.status == "completed"
    finally:
        if daemon is not None:
            daemon.stop()
        main_thread.stop()
        spare_thread.stop()
    return len(main.requests), len(spare.requests), answered


# --------------------------------------------------------------------------- report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--quick", action="store_true", help="30 turns: seconds, for CI")
    parser.add_argument("--dir", default=None, help="where the temporary data_dirs go")
    parser.add_argument("--skills", type=int, default=20, help="skills installed (their index in the prompt)")
    args = parser.parse_args()
    turns = 30 if args.quick else args.turns
    plans = make_plans(turns, args.seed)
    load_before = machine_load()
    started = time.perf_counter()
    with c.temp_dir("netclaw-bench-cache-", args.dir) as tmp:
        skills = install_skills(tmp, args.skills) if args.skills else None
        log("run openai ...")
        openai = play("openai", plans, tmp, provider="openai", skills=skills)
        log(f"  {openai.wall_s:.1f} s")
        log("run anthropic (cached) ...")
        cached = play("anthropic", plans, tmp, provider="anthropic", skills=skills)
        log("run anthropic (uncached) ...")
        uncached = play("uncached", plans, tmp, provider="anthropic", cache="off", skills=skills)
        log("fallback ...")
        main_seen, spare_seen, fell_back = fallback_requests(tmp)

    found = shares(openai)
    steady = [s for s in found if s.turn >= STEADY_FROM_TURN]
    clean = [s for s in steady if not s.after_break]
    mean = sum(s.share for s in steady) / max(1, len(steady))
    lowest = min((s.share for s in clean), default=float("nan"))
    breaks = len(openai.breaks)
    per_25 = breaks / max(1, turns) * 25
    info(
        "conversation",
        f"{turns} turns, {sum(1 for p in plans if p.rounds)} with tool rounds, {len(MEMORIES)} memories seeded, "
        f"{args.skills} skills installed; "
        f"window {WINDOW}, max output {MAX_OUTPUT}",
        note=f"seed {args.seed}",
    )
    first = openai.record.chat[0].wire if openai.record.chat else ""
    indexed = sum(1 for n, _ in TYPICAL if f"- {n}:" in first)
    info("skills_in_the_system_prompt", str(indexed), "skills", "index lines in the first chat request")
    info(
        "chat_requests",
        str(len(openai.record.chat)),
        "requests",
        f"openai run; {openai.record.compaction_calls} compaction calls besides; {openai.answered}/{turns} answered",
    )
    info(
        "prefix_share_steady_mean_clean",
        sum(s.share for s in clean) / max(1, len(clean)),
        "",
        f"the {len(clean)} steady-state requests not right after a break",
    )
    after = [round(s.share, 3) for s in steady if s.after_break]
    info("prefix_share_after_breaks", str(after), note="requests right after a trim or compaction")
    info(
        "cache_breaks",
        str(breaks),
        "count",
        f"trims and compactions in {turns} turns (openai run); anthropic run {len(cached.breaks)}",
    )
    anth = [Share(s.turn, s.share, s.after_break) for s in shares(cached)]
    info(
        "prefix_share_steady_mean_anthropic",
        sum(s.share for s in anth if s.turn >= STEADY_FROM_TURN)
        / max(1, sum(1 for s in anth if s.turn >= STEADY_FROM_TURN)),
        "",
        "tools + system + messages without cache markers",
    )
    last = turns
    with_cache, without = (
        billed(cached.record.chat, last, cached=True),
        billed(uncached.record.chat, last, cached=False),
    )
    window = range(max(1, last - 24), last + 1)
    mean_with = sum(billed(cached.record.chat, t, cached=True) for t in window)
    mean_without = sum(billed(uncached.record.chat, t, cached=False) for t in window)
    reads = sum(s.read for s in cached.record.chat)
    writes = sum(s.write for s in cached.record.chat)
    prompts = sum(s.prompt for s in cached.record.chat)
    info(
        f"billed_input_turn_{last}",
        f"{with_cache:,.0f} cached vs {without:,.0f} uncached",
        "token-equivalents",
        "uncached input 1x, cache reads 0.1x, writes 1.25x",
    )
    info(
        "billed_input_ratio_last_25_turns",
        mean_with / max(1.0, mean_without),
        "",
        f"turns {window.start}-{window.stop - 1}",
    )
    info(
        "anthropic_cache_totals",
        f"{reads:,} read, {writes:,} written of {prompts:,} prompt tokens",
        note=f"{reads / max(1, prompts):.1%} read from cache over the run; "
        f"{cached.answered}/{turns} and {uncached.answered}/{turns} answered",
    )
    info(
        "fallback_requests",
        f"main {main_seen} (1 + 1 retry), fallback {spare_seen}",
        note="answered" if fell_back else "NOT ANSWERED",
    )
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    log(f"wall time {time.perf_counter() - started:.0f} s")

    figure("prefix_share_steady_mean", mean, "", ">= 0.95", mean >= 0.95)
    figure("prefix_share_min", lowest, "", ">= 0.80 (requests not right after a break)", lowest >= 0.80)
    figure("cache_breaks_per_25_turns", per_25, "count", "<= 1", per_25 <= 1)
    ratio = with_cache / max(1.0, without)
    figure(f"billed_input_ratio_turn_{last}", ratio, "cached/uncached", "<= 0.25", ratio <= 0.25)
    extra = spare_seen
    figure("fallback_extra_requests", extra, "requests", "<= 1", extra <= 1 and fell_back)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
