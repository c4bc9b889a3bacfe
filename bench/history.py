"""Prompt build cost: projection → orphan sweep → token count → whole-turn trim.

A 10,000-message history (user / assistant-with-tool-call / tool result / reply
turns, realistic text sizes) with a budget far smaller than the history, so every
build must trim. Measured three ways in one run:

- cached:    the session's TokenCounter already knows every message (the daemon's case)
- re-encode: a fresh counter per build, so every message is encoded again (the reference)
- steady:    the trim already recorded in the state (kept_from set), as after the first call

Run from the repository root: ``python bench/history.py``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netclaw.history import TokenCounter, sweep_orphans
from netclaw.messages import ChatMessage, ToolCall
from netclaw.providers import ToolSchema
from netclaw.sessions import PromptBuilder, SessionState

MESSAGES = 10_000
BUDGET = 28_672  # the default 32k window minus 4k of output
TARGET_MS = 5.0
WORDS = "the session journal keeps every turn durable while the model sees a trimmed projection".split()


def text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def history(n: int) -> tuple[ChatMessage, ...]:
    rng = random.Random(7)
    out: list[ChatMessage] = []
    i = 0
    while len(out) < n:
        i += 1
        out.append(ChatMessage(id=f"u{i}", role="user", content=text(rng, 10, 60), ts=float(i)))
        if i % 3 == 0:
            call = ToolCall(id=f"c{i}", name="current_time", arguments='{"timezone": "UTC"}')
            out.append(ChatMessage(id=f"a{i}", role="assistant", content="", ts=float(i), tool_calls=(call,)))
            out.append(
                ChatMessage(
                    id=f"t{i}",
                    role="tool",
                    content=text(rng, 20, 120),
                    ts=float(i),
                    tool_call_id=call.id,
                    name=call.name,
                )
            )
        out.append(ChatMessage(id=f"r{i}", role="assistant", content=text(rng, 30, 150), ts=float(i)))
    return tuple(out[:n])


def timed(fn: object, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--quick", action="store_true", help="1,000 messages: seconds, for CI")
    args = parser.parse_args()
    count = 1000 if args.quick else args.messages
    messages = history(count)
    state = SessionState("bench:history", seq=1, transcript=messages, turns=count)
    tools = [ToolSchema("current_time", "The current time.", {"type": "object", "properties": {}})]
    counter = TokenCounter()
    builder = PromptBuilder("You are a helpful assistant.", BUDGET, counter)
    assert sweep_orphans(messages).changed is False

    first = builder.build(state, tools)  # warms the counter's cache
    assert first.trim is not None, "the budget must force a trim"
    cached = timed(lambda: builder.build(state, tools), 30)

    def reencode() -> None:
        PromptBuilder(
            "You are a helpful assistant.", BUDGET, TokenCounter(encoding=counter.encoding_name)
        ).build(state, tools)

    fresh = timed(reencode, 5)
    kept_from = next(i for i, m in enumerate(messages) if m.id == first.trim.first_kept_id)
    steady_state = replace(state, kept_from=kept_from)
    steady = timed(lambda: builder.build(steady_state, tools), 100)

    cached_ms = statistics.median(cached)
    fresh_ms = statistics.median(fresh)
    steady_ms = statistics.median(steady)
    print(
        f"history: {count} messages, {first.trim.tokens_before} tokens, budget {BUDGET}, encoding {counter.encoding_name}"
    )
    print(
        f"trim keeps {first.trim.kept_turns} turns ({first.trim.tokens_after} tokens), drops {first.trim.dropped_turns}"
    )
    print(
        f"build+trim, cached counts:   median {cached_ms:.2f} ms  p90 {statistics.quantiles(cached, n=10)[-1]:.2f} ms"
    )
    print(f"build+trim, re-encoding all: median {fresh_ms:.2f} ms")
    print(f"build, trim already recorded (steady state): median {steady_ms:.3f} ms")
    print(f"speed-up of the cache: {fresh_ms / cached_ms:.1f}x")
    verdict = "met" if cached_ms <= TARGET_MS else "missed"
    print(f"figure: prompt_build_cached_ms = {cached_ms:.2f} ms (target <= {TARGET_MS:g}: {verdict})")
    print(
        f"figure: prompt_build_reencode_ms = {fresh_ms:.2f} ms (reference; ratio cached/re-encode = {cached_ms / fresh_ms:.3f})"
    )
    steady_verdict = "met" if steady_ms <= TARGET_MS else "missed"
    print(f"figure: prompt_build_steady_ms = {steady_ms:.3f} ms (target <= {TARGET_MS:g}: {steady_verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
