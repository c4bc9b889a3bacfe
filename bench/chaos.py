"""Chaos, long: concurrent senders with idempotency keys for ``--minutes``, while the daemon
is SIGKILLed again and again — in rotation during a turn's model call, a tool round and a
compaction call — and started again. Then every acknowledged message is checked through the
API and the database (the harness is ``tests/e2e/chaos.py``; ``tests/e2e/test_chaos.py`` is
its CI-sized run).

    python bench/chaos.py --minutes 10
"""

from __future__ import annotations

import argparse
import time

from _common import add_quick, apply_quick, figure, info, log, machine_load, temp_dir

from tests.e2e.chaos import Chaos, ChaosConfig
from tests.fakes.scripted_openai import ScriptedOpenAIThread


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    add_quick(parser, minutes=0.2, sessions=2)
    args = apply_quick(parser.parse_args())
    log(f"load before: {machine_load()}")
    started = time.monotonic()
    with temp_dir("netclaw-bench-chaos-") as root, ScriptedOpenAIThread() as scripted:
        chaos = Chaos(
            root,
            scripted,
            ChaosConfig(sessions=args.sessions, duration_s=args.minutes * 60, seed=args.seed),
        )
        try:
            result = chaos.run()
        finally:
            chaos.close()
    elapsed = time.monotonic() - started
    for problem in result.problems[:20]:
        log(f"problem: {problem}")
    info("run_minutes", round(elapsed / 60, 1), "min", f"{args.sessions} sessions sending concurrently")
    info("acked", result.acked, "messages")
    for kind, count in result.kills.items():
        info(f"kills_during_{kind}", count, "SIGKILLs")
    info("resumed_sessions", result.resumed, "sessions", "unfinished work picked up by a restart")
    info("restart_median_s", round(result.restart_median_s, 2), "s", "SIGKILL to READY, next start")
    figure("lost", result.lost, "messages", "== 0", result.lost == 0)
    figure("duplicated", result.duplicated, "messages", "== 0", result.duplicated == 0)
    figure("reordered", result.reordered, "sessions", "== 0", result.reordered == 0)
    figure("answered_twice", result.answered_twice, "messages", "== 0", result.answered_twice == 0)
    figure("unanswered", result.unanswered, "messages", "== 0", result.unanswered == 0)
    figure("restart_max_s", round(result.restart_max_s, 2), "s", "<= 2 s", result.restart_max_s <= 2)
    log(f"load after: {machine_load()}")


if __name__ == "__main__":
    main()
