"""Token economy of history management: one scripted 200-turn, tool-heavy conversation, run
three ways against a small context window.

The real :class:`~netclaw.daemon.Daemon` runs in this process (port 0, a temporary
data_dir); the provider is :mod:`tests.fakes.scripted_openai` on its own thread, driven by
a responder that plays the same conversation in every run:

- each user message (100-300 characters, plus the paths it names) belongs to a fixed turn plan: no tool, one
  ``read_file`` call, two parallel calls, or two rounds of one call each;
- ``read_file`` is a benchmark tool registered on the daemon's registry that returns
  1,500-3,000 characters of deterministic file text for its ``path``;
- once a turn's tool rounds are done, the model answers with 200-500 characters.

The responder decides from the request itself (the last user message and how many tool
rounds follow it), so a retried request (after a trim or a compaction) gets the same
answer. Everything is seeded.

Runs
    ``unmanaged``  the fake enforces no window and the daemon is told the window is
                   10,000,000 tokens: no trim, no compaction, the prompt keeps growing.
    ``trim``       the fake refuses prompts over the window (400 context_length_exceeded
                   when chars//4 of the messages exceeds it); the daemon has the same window.
                   There is no setting that turns compaction off, so: threshold 1.0 (it
                   can only fire on an overflow), ``keep_recent_tool_results`` = 10**6
                   (tier 1 clears nothing), the memory flush answers ``[]`` and the summary
                   answers a text without the required sections (the quality guard
                   cancels it). Only whole-turn trimming shrinks the prompt; whatever the
                   overflow ladder's rung 1 still spends on LLM calls is counted.
    ``tiered``     window enforced, ``compaction_threshold`` 0.75,
                   ``keep_recent_tool_results`` 3; the summary route answers a complete
                   structured summary (every required section, ~700-900 chars), the flush
                   route a small JSON array of facts.

Counted at the provider (every request it received, compaction calls included)
    prompt tokens = the fake's own estimate, chars//4 of the message contents and tool-call
    arguments (what it reports as ``usage.prompt_tokens`` for the requests it answers, and
    what it compares with the window); requests it refused are counted too, they were sent.
    Tool schemas are not in that number (an info line adds them). LLM calls split into chat
    / memory flush / summary; overflow errors = requests answered 400 context_length_exceeded.
Counted in the daemon's journal (sqlite3, read-only, after the run)
    ``HistoryTrimmed`` (by reason), ``SessionCompacted`` (by tiers), ``TurnRecorded`` by
    status; turns answered = ``IntakeService.submit(wait=True)`` outcomes ``completed`` with a reply.

Figures: tiered prompt tokens <= 10% of the unmanaged run's (counted as missed if the
unmanaged reference did not answer every turn), zero overflow errors and every turn
answered in the tiered run. The counts are deterministic (same seed, same numbers); only
the wall times vary. ~15 s in all.

Run from the repo root: ``python bench/economy.py [--turns 200] [--window 8192]
[--max-output 1024] [--tool-chars 1500,3000] [--provider-count content|body] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import threading
import time
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
from _common import daemon_settings, figure, info, log, machine_load

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.history.compaction import FLUSH_MARKER, REQUIRED_SECTIONS, SUMMARY_MARKER
from netclaw.tools import Tool, ToolContext
from tests.fakes._scripted_server import ScriptedServerThread, request_messages, said
from tests.fakes.scripted_openai import Reply, ScriptedOpenAI, ToolCallSpec, estimate_prompt_tokens

MODEL = "scripted"
SESSION = "cli:economy"  # a CLI session: audience "personal", memory recall on
UNMANAGED_WINDOW = 10_000_000
TOOL_NAME = "read_file"
CHUNK = 256  # characters per SSE delta from the fake (speed only; no effect on counts)
MAX_BODY = 256 * 1024 * 1024  # the fake's request size limit (aiohttp's default is 1 MiB)
TOOL_CHARS = [1500, 3000]  # size range of a read_file result (--tool-chars)

WORDS = (
    "please check the deploy config for the api service and tell me whether the last "
    "migration finished cleanly before we roll out the new build to staging tonight also "
    "look at the worker queue settings the retry policy the cache timeouts and the logging "
    "level we changed last week then compare them with production and note any drift"
).split()
CODE_WORDS = (
    "config retry timeout worker queue cache handler request response session token "
    "client server build deploy status result error value limit buffer stream batch"
).split()
DIRS = ("services/api", "services/worker", "deploy", "config", "scripts", "lib/netio", "docs/ops")
EXTS = (".py", ".yaml", ".log", ".md", ".toml")


# --------------------------------------------------------------------------- the conversation


@dataclass(frozen=True)
class TurnPlan:
    text: str  # the user message
    rounds: tuple[tuple[str, ...], ...]  # per tool round, the paths read (one call per path)
    reply: str  # the final answer


def words(rng: random.Random, size: int, pool: tuple[str, ...] | list[str] = WORDS) -> str:
    out = ""
    while len(out) < size:
        out += rng.choice(pool) + " "
    return out[:size].rstrip()


def make_plans(turns: int, seed: int = 2024) -> list[TurnPlan]:
    rng = random.Random(seed)
    paths = [f"{rng.choice(DIRS)}/{rng.choice(CODE_WORDS)}_{i:02d}{rng.choice(EXTS)}" for i in range(60)]
    plans: list[TurnPlan] = []
    for n in range(turns):
        shape = rng.random()
        if shape < 0.15:
            rounds: tuple[tuple[str, ...], ...] = ()
        elif shape < 0.65:
            rounds = ((rng.choice(paths),),)
        elif shape < 0.85:
            rounds = (tuple(rng.sample(paths, 2)),)
        else:
            rounds = ((rng.choice(paths),), (rng.choice(paths),))
        named = [p for r in rounds for p in r]
        ask = words(rng, rng.randint(100, 300))
        if named:
            ask = f"{ask} (see {', '.join(named)})"
        text = f"Step {n + 1}: {ask}"
        reply = f"Done with step {n + 1}. " + words(rng, rng.randint(200, 500))
        plans.append(TurnPlan(text, rounds, reply))
    assert len({p.text for p in plans}) == len(plans)
    return plans


def file_text(path: str) -> str:
    """1,500-3,000 characters (``TOOL_CHARS``) of deterministic text for ``path``."""
    rng = random.Random(zlib.crc32(path.encode()))
    size = rng.randint(*TOOL_CHARS)
    lines: list[str] = [f"# {path}"]
    total = len(lines[0])
    while total < size:
        comment = words(rng, rng.randint(10, 40), CODE_WORDS)
        a, b, c_ = rng.choice(CODE_WORDS), rng.choice(CODE_WORDS), rng.choice(CODE_WORDS)
        if path.endswith(".log"):
            stamp = f"2025-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}Z"
            level = rng.choice(("INFO", "WARN", "DEBUG"))
            line = f"{stamp} {level} {a}[{rng.randint(100, 9999)}] {comment}"
        elif path.endswith((".yaml", ".toml")):
            line = f"{a}_{b}: {rng.randint(1, 5000)}  # {comment}"
        else:
            line = f"    {a} = {b}({c_}, {rng.randint(0, 99)})  # {comment}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


async def read_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
    return file_text(str(args.get("path", "")))


READ_FILE = Tool(
    name=TOOL_NAME,
    description="Read a file of the project and return its text.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Path relative to the project root."}},
        "required": ["path"],
        "additionalProperties": False,
    },
    handler=read_file,
)


def good_summary(body: dict[str, Any]) -> str:
    """A complete structured summary (~700-900 chars), naming paths seen in the transcript."""
    text = " ".join(str(m.get("content") or "") for m in request_messages(body)[1:])
    seen = list(dict.fromkeys(re.findall(r"[a-z]+/[a-z/_]+\d\d\.[a-z]+", text)))[-4:] or ["none"]
    steps = re.findall(r"Step (\d+):", text)
    last = steps[-1] if steps else "?"
    parts = {
        "Primary request and intent": "- Review the api and worker services before the staging rollout.\n"
        "- Compare deploy, queue, retry, cache and logging settings with production.",
        "Key decisions": "- Read the files one by one and note drift.\n- Roll out only after migrations finish.",
        "Exact identifiers": "\n".join(f"- {p}" for p in seen),
        "Work completed": f"- Steps up to {last} answered; files read and compared.",
        "Pending tasks and open questions": "- Confirm the last migration finished cleanly.\n"
        "- Check retry policy and cache timeouts against production.",
        "Current work and next step": f"- Working on step {last}; next: continue with the next step's files.",
    }
    assert set(parts) == set(REQUIRED_SECTIONS)
    return "\n\n".join(f"## {name}\n{parts[name]}" for name in REQUIRED_SECTIONS)


def good_flush(body: dict[str, Any]) -> str:
    text = " ".join(str(m.get("content") or "") for m in request_messages(body)[1:])
    seen = list(dict.fromkeys(re.findall(r"[a-z]+/[a-z/_]+\d\d\.[a-z]+", text)))[:3]
    facts = [
        {"text": f"The project file {p} was reviewed for the staging rollout.", "kind": "fact"} for p in seen
    ]
    facts.append(
        {
            "text": "The user wants deploy settings compared with production before rollouts.",
            "kind": "preference",
        }
    )
    return json.dumps(facts)


# --------------------------------------------------------------------------- the provider


@dataclass(frozen=True, slots=True)
class Sent:
    kind: str  # "chat" | "flush" | "summary"
    tokens: int  # the fake's estimate (chars // 4), as reported in usage
    overflow: bool  # answered 400 context_length_exceeded
    tool_tokens: int  # chars // 4 of the tool schemas sent with it
    body_bytes: int  # the HTTP request body


class CountingOpenAI(ScriptedOpenAI):
    """The scripted server, keeping a small record per request instead of its body
    (the unmanaged run sends ~250 MB of prompts), and accepting bodies over aiohttp's
    default 1 MiB limit (the unmanaged prompt reaches ~0.7 MB; a 413 there would fail
    the reference's turns, not measure anything)."""

    def __init__(self, *, count: str = "content", **kwargs: Any) -> None:
        super().__init__(max_body_bytes=MAX_BODY, **kwargs)
        self.count = count  # "content": the fake's chars//4; "body": chars//4 of messages + tools JSON
        self.sent: list[Sent] = []
        self.sent_lock = threading.Lock()

    def _estimate_prompt_tokens(self, body: dict[str, Any]) -> int:
        if self.count == "body":
            return len(json.dumps([body.get("messages"), body.get("tools")])) // 4
        return estimate_prompt_tokens(body)

    def _usage(self, body: dict[str, Any], step: Reply, args: list[str]) -> dict[str, int]:
        usage = super()._usage(body, step, args)
        if step.usage is None:  # report what the window is checked against
            usage["prompt_tokens"] = self._estimate_prompt_tokens(body)
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return usage

    def _record(self, request: Any, body: dict[str, Any]) -> None:
        messages = request_messages(body)
        head = str(messages[0].get("content") or "") if messages else ""
        kind = "flush" if FLUSH_MARKER in head else "summary" if SUMMARY_MARKER in head else "chat"
        tokens = self._estimate_prompt_tokens(body)
        overflow = self.context_window is not None and tokens > self.context_window
        tools = body.get("tools") or []
        tool_tokens = len(json.dumps(tools)) // 4 if tools else 0
        with self.sent_lock:
            self.sent.append(Sent(kind, tokens, overflow, tool_tokens, request.content_length or 0))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def chat_responder(plans: list[TurnPlan]) -> Any:
    by_text = {p.text: p for p in plans}

    def respond(body: dict[str, Any]) -> Reply:
        messages = request_messages(body)
        last_user = max(
            i
            for i, m in enumerate(messages)
            if m.get("role") == "user" and said(_text(m.get("content")))  # not a turn's tail alone
        )
        plan = by_text[said(_text(messages[last_user].get("content")))]
        done = sum(
            1 for m in messages[last_user + 1 :] if m.get("role") == "assistant" and m.get("tool_calls")
        )
        if done < len(plan.rounds):
            calls = [ToolCallSpec(TOOL_NAME, {"path": p}) for p in plan.rounds[done]]
            return Reply(tool_calls=calls, chunk_size=CHUNK)
        return Reply(text=plan.reply, chunk_size=CHUNK)

    return respond


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    name: str
    sent: list[Sent]
    outcomes: Counter[str] = field(default_factory=Counter)
    answered: int = 0
    trims: Counter[str] = field(default_factory=Counter)  # by reason
    trimmed_turns: int = 0  # turns dropped by trims: never summarised nor flushed
    compactions: Counter[str] = field(default_factory=Counter)  # by tier set
    compaction_notes: Counter[str] = field(default_factory=Counter)
    cleared: int = 0
    memories: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # failed turns by error code
    wall_s: float = 0.0
    responder_errors: int = 0

    def tokens(self, kind: str | None = None) -> int:
        return sum(s.tokens for s in self.sent if kind is None or s.kind == kind)

    def calls(self, kind: str | None = None) -> int:
        return sum(1 for s in self.sent if kind is None or s.kind == kind)

    @property
    def overflows(self) -> int:
        return sum(1 for s in self.sent if s.overflow)

    @property
    def compaction_runs(self) -> int:
        return sum(self.compactions.values())

    @property
    def trim_count(self) -> int:
        return sum(self.trims.values())


def settings_for(
    data_dir: Path, base_url: str, window: int, max_output: int, session: dict[str, Any]
) -> Settings:
    config: Settings = daemon_settings(
        data_dir,
        base_url,
        model=MODEL,
        window=window,
        max_output=max_output,
        timeout_s=60,
        session=session,
        journal={"synchronous": "normal"},
        # The benchmark's own read_file stands in for the built-in file tools of that name.
        tools={"workspace_dir": str(data_dir / "workspace"), "files": {"enabled": False}},
    )
    return config


async def drive(daemon: Daemon, plans: list[TurnPlan], result: RunResult, name: str) -> None:
    gateway = daemon.gateway
    assert gateway is not None
    for n, plan in enumerate(plans):
        _, outcome = await gateway.intake.submit(Inbound(SESSION, plan.text), wait=True)
        assert outcome is not None
        result.outcomes[outcome.status] += 1
        if outcome.status == "completed" and outcome.reply:
            result.answered += 1
        if (n + 1) % 50 == 0:
            log(f"  {name}: {n + 1} turns")


def read_journal(db: Path, result: RunResult) -> None:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT type, payload FROM events WHERE persistence_id = ? ORDER BY seq", (SESSION,)
        ).fetchall()
        result.memories = int(conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
    for type_, payload in rows:
        data = json.loads(payload)
        if type_ == "HistoryTrimmed":
            result.trims[data["reason"]] += 1
            result.trimmed_turns += data["dropped_turns"]
        elif type_ == "SessionCompacted":
            result.compactions["+".join(data["tiers"]) or "nothing"] += 1
            result.cleared += len(data["cleared"])
            if data.get("note"):
                result.compaction_notes[re.sub(r"\d+", "N", data["note"])[:100]] += 1
        elif type_ == "TurnRecorded" and data["status"] != "completed":
            result.errors[(data.get("error") or {}).get("code", "?")] += 1


def run_once(
    name: str,
    plans: list[TurnPlan],
    tmp: Path,
    *,
    window: int,
    max_output: int,
    enforce: bool,
    count: str = "content",
) -> RunResult:
    server = CountingOpenAI(
        count=count, default=chat_responder(plans), context_window=window if enforce else None
    )
    fake = ScriptedServerThread(server, f"scripted-{name}")
    if name == "trim":
        session = {"compaction_threshold": 1.0, "keep_recent_tool_results": 1_000_000}
        fake.route(FLUSH_MARKER, lambda body: Reply(text="[]"))
        fake.route(SUMMARY_MARKER, lambda body: Reply(text="I would rather not summarise this."))
    else:
        session = {"compaction_threshold": 0.75, "keep_recent_tool_results": 3}
        fake.route(FLUSH_MARKER, lambda body: Reply(text=good_flush(body), chunk_size=CHUNK))
        fake.route(SUMMARY_MARKER, lambda body: Reply(text=good_summary(body), chunk_size=CHUNK))
    result = RunResult(name, server.sent)
    data_dir = tmp / name
    daemon: Daemon | None = None
    fake.start()
    try:
        daemon_window = window if enforce else UNMANAGED_WINDOW
        daemon = Daemon(settings_for(data_dir, fake.base_url, daemon_window, max_output, session))
        daemon.start()
        assert daemon.manager is not None and daemon.io is not None
        assert daemon.tools is not None
        daemon.tools.register(READ_FILE)
        t0 = time.perf_counter()
        daemon.io.run(drive(daemon, plans, result, name), 1800)
        result.wall_s = time.perf_counter() - t0
    finally:
        if daemon is not None:
            daemon.stop()
        fake.stop()
    result.responder_errors = len(server.errors)
    read_journal(data_dir / "netclaw.db", result)
    return result


# --------------------------------------------------------------------------- report


def count_figure(name: str, value: int, unit: str, target: str, met: bool) -> None:
    """:func:`_common.figure` for a whole number (printed without decimals)."""
    print(f"figure: {name} = {value} {unit} (target {target}: {'met' if met else 'missed'})", flush=True)


def describe(r: RunResult, turns: int) -> str:
    return (
        f"{r.calls()} LLM calls ({r.calls('chat')} chat, {r.calls('flush')} flush, {r.calls('summary')} summary); "
        f"{r.compaction_runs} compactions{f' {dict(r.compactions)}' if r.compactions else ''}; "
        f"{r.trim_count} trims{f' {dict(r.trims)}' if r.trims else ''}; {r.overflows} overflow errors; "
        f"{r.answered}/{turns} turns answered {dict(r.outcomes)}"
    )


def table(results: list[RunResult]) -> None:
    head = (
        "run",
        "prompt tok",
        "chat tok",
        "compact tok",
        "max prompt",
        "calls",
        "chat",
        "compact",
        "compactions",
        "summaries",
        "trims",
        "overflows",
        "answered",
    )
    rows = []
    for r in results:
        maxp = max((s.tokens for s in r.sent if s.kind == "chat"), default=0)
        summaries = sum(n for tiers, n in r.compactions.items() if "summary" in tiers.split("+"))
        rows.append(
            (
                r.name,
                f"{r.tokens():,}",
                f"{r.tokens('chat'):,}",
                f"{r.tokens() - r.tokens('chat'):,}",
                f"{maxp:,}",
                str(r.calls()),
                str(r.calls("chat")),
                str(r.calls() - r.calls("chat")),
                str(r.compaction_runs),
                str(summaries),
                str(r.trim_count),
                str(r.overflows),
                str(r.answered),
            )
        )
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    for line in (head, *rows):
        print("# " + "  ".join(x.rjust(w) for x, w in zip(line, widths, strict=True)), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="user turns per run")
    parser.add_argument("--window", type=int, default=8192, help="models.main.context_window (tokens)")
    parser.add_argument("--max-output", type=int, default=1024, help="models.main.max_output_tokens")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the scripted conversation")
    parser.add_argument("--tool-chars", default="1500,3000", help="MIN,MAX characters of a read_file result")
    parser.add_argument(
        "--provider-count",
        choices=("content", "body"),
        default="content",
        help="what the fake counts as prompt tokens (and checks against the window): chars//4 of the "
        "message contents and tool-call arguments (its default), or of the messages and tool schemas as JSON",
    )
    parser.add_argument("--dir", default=None, help="where the temporary data_dirs go")
    c.add_quick(parser, turns=30)
    args = c.apply_quick(parser.parse_args())

    TOOL_CHARS[:] = sorted(int(x) for x in args.tool_chars.split(","))
    plans = make_plans(args.turns, args.seed)
    tool_calls = sum(len(r) for p in plans for r in p.rounds)
    started = time.perf_counter()
    load_before = machine_load()
    results: list[RunResult] = []
    with c.temp_dir("netclaw-bench-economy-", args.dir) as tmp:
        for name, enforce in (("unmanaged", False), ("trim", True), ("tiered", True)):
            log(f"run {name} ...")
            r = run_once(
                name,
                plans,
                tmp,
                window=args.window,
                max_output=args.max_output,
                enforce=enforce,
                count=args.provider_count,
            )
            log(f"run {name}: {r.wall_s:.1f} s; {describe(r, args.turns)}")
            results.append(r)
    unmanaged, trim, tiered = results

    info(
        "conversation",
        f"{args.turns} turns, {sum(1 for p in plans if p.rounds)} with tools, {tool_calls} read_file calls "
        f"({TOOL_CHARS[0]:,}-{TOOL_CHARS[1]:,} chars each), window {args.window} tokens, max_output {args.max_output}",
        note=f"seed {args.seed}; provider counts {args.provider_count}",
    )
    table(results)
    for r in results:
        info(
            f"{r.name}_prompt_tokens",
            f"{r.tokens():,}",
            "tokens",
            f"{'chars//4 of contents' if args.provider_count == 'content' else 'JSON chars//4'} "
            f"of every request incl. refused ones; chat {r.tokens('chat'):,} "
            f"(mean {r.tokens('chat') / max(1, r.calls('chat')):,.0f} per call), "
            f"flush {r.tokens('flush'):,}, summary {r.tokens('summary'):,}"
            + (
                f"; tool schemas would add {sum(s.tool_tokens for s in r.sent):,}"
                if args.provider_count == "content"
                else ""
            ),
        )
        info(
            f"{r.name}_llm_calls",
            str(r.calls()),
            "calls",
            f"chat {r.calls('chat')}, flush {r.calls('flush')}, summary {r.calls('summary')}",
        )
        info(
            f"{r.name}_compactions",
            str(r.compaction_runs),
            "count",
            f"by tiers {dict(r.compactions)}; {r.cleared} tool results cleared; {r.memories} memories stored"
            + (f"; notes {dict(r.compaction_notes)}" if r.compaction_notes else ""),
        )
        info(
            f"{r.name}_trims",
            str(r.trim_count),
            "count",
            f"by reason {dict(r.trims)}; {r.trimmed_turns} turns dropped from the model's view by trims "
            "(never summarised or flushed: compaction only sees what is still visible)",
        )
        info(
            f"{r.name}_overflow_errors",
            str(r.overflows),
            "count",
            f"by kind {dict(Counter(s.kind for s in r.sent if s.overflow))}",
        )
        info(
            f"{r.name}_turns_answered",
            str(r.answered),
            "turns",
            f"outcomes {dict(r.outcomes)}"
            + (f"; failed by code {dict(r.errors)}" if r.errors else "")
            + (f"; responder errors {r.responder_errors}" if r.responder_errors else ""),
        )
        info(f"{r.name}_wall_time", r.wall_s, "s")
    base = max(1, unmanaged.tokens())
    info("trim_prompt_tokens_ratio", trim.tokens() / base, "", "trim-only / unmanaged")
    info(
        "tiered_vs_trim_prompt_tokens_ratio",
        tiered.tokens() / max(1, trim.tokens()),
        "",
        "tiered / trim-only",
    )
    complete = unmanaged.answered == args.turns
    info(
        "unmanaged_complete",
        f"{unmanaged.answered}/{args.turns}",
        note="the reference answered every turn"
        if complete
        else "REFERENCE INCOMPLETE: the ratio below compares with a shorter run and counts as missed",
    )
    info(
        "unmanaged_largest_request",
        max((s.body_bytes for s in unmanaged.sent), default=0) / 1e6,
        "MB",
        "largest HTTP body sent in the unmanaged run (the fake accepts up to 256 MiB)",
    )
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    log(f"wall time {time.perf_counter() - started:.0f} s")

    ratio = tiered.tokens() / base
    figure("tiered_prompt_tokens_ratio", ratio, "of unmanaged", "<= 0.10", ratio <= 0.10 and complete)
    count_figure("tiered_overflow_errors", tiered.overflows, "count", "== 0", tiered.overflows == 0)
    count_figure(
        "tiered_turns_answered", tiered.answered, "turns", f"== {args.turns}", tiered.answered == args.turns
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
