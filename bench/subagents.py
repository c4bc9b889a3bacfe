"""The overhead of a sub-agent round trip beyond the provider's time.

A real daemon in-process (temporary data_dir, durable journal) and the scripted model in a
thread of this process (``tests.fakes.subagent_script.FamilyScript``, no delays). Each
round trip is a new parent session told ``SPAWN 1 …``: its model calls ``spawn_agent``,
the child answers at once (one model call, no tools), and the answer comes back to the
parent as input. Timed on the daemon's loop from the parent's ``tool_call`` output for
``spawn_agent`` to its ``subagent_finished`` output (published once the parent has
admitted the answer); the time inside the provider for the child's model call (measured
around ``Provider.complete``) is taken off. What is left is netclaw's: recording the
spawn, sending the child its task, the child's admission, recovery of its new session,
the report's way back and its admission.

References measured in the same run: the journal's own group commits (a round trip has four
durable writes in a row), a plain turn of a new session beyond its model call, and the same
round trips again with ``journal.synchronous=normal`` (no fsync) — what of it is netclaw's
own work and what is the disk's.

Run from the repo root: ``python bench/subagents.py [--trips 200] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import daemon_settings, figure, info, log, machine_load, median, percentile, temp_dir

from netclaw import outputs as out
from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.llm import Completion, OnDelta, Provider, ProviderRequest
from netclaw.providers import make_provider
from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.subagent_script import FamilyScript

TARGET_P50_MS = 5.0
WARMUP = 10


@dataclass
class TimedProvider:
    """The daemon's provider, timing every call by the text of its first user message."""

    inner: Provider
    calls: dict[str, tuple[float, float]] = field(default_factory=dict)
    name: str = "timed"

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        first = next((m.content for m in request.messages if m.role == "user"), "")
        started = time.perf_counter()
        try:
            return await self.inner.complete(request, on_delta)
        finally:
            self.calls[first] = (started, time.perf_counter())

    async def check(self, model: str | None = None) -> str:
        return await self.inner.check(model)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Trip:
    total_ms: float
    provider_ms: float
    spawn_ms: float  # the spawn_agent call to the child's model call
    back_ms: float  # the child's answer to its admission by the parent
    plain_ms: float  # the reference: a plain turn's time beyond its model call, in a new session

    @property
    def overhead_ms(self) -> float:
        return self.total_ms - self.provider_ms


@dataclass
class Run:
    trips: list[Trip]
    commits_ms: list[float]  # the journal's group commits during the run


async def one_trip(daemon: Daemon, timed: TimedProvider, n: int) -> Trip:
    assert daemon.gateway is not None
    parent = f"cli:bench-{n}"
    task = f"TASK trip{n}-1 rounds=0"
    subscription = daemon.gateway.reads.subscribe(parent, out.OutputFilter.TOOL_CALLS)
    try:
        await daemon.gateway.intake.submit(Inbound(parent, f"SPAWN 1 trip{n} rounds=0"))
        spawned = finished = 0.0
        turns_done = 0
        while turns_done < 2:  # the spawning turn, then the one on the child's answer
            output = await subscription.get(30)
            now = time.perf_counter()
            match output:
                case out.ToolCall(name="spawn_agent"):
                    spawned = now
                case out.SubagentFinished():
                    finished = now
                case out.TurnCompleted():
                    turns_done += 1
                case None:
                    raise RuntimeError(f"{parent}: the stream ended")
    finally:
        subscription.close()
    call_start, call_end = timed.calls[task]
    started = time.perf_counter()
    await daemon.gateway.intake.submit(Inbound(f"cli:plain-{n}", f"plain {n}"), wait=True)
    plain = time.perf_counter() - started
    plain_start, plain_end = timed.calls[f"plain {n}"]
    return Trip(
        total_ms=(finished - spawned) * 1000,
        provider_ms=(call_end - call_start) * 1000,
        spawn_ms=(call_start - spawned) * 1000,
        back_ms=(finished - call_end) * 1000,
        plain_ms=(plain - (plain_end - plain_start)) * 1000,
    )


def run(trips: int, directory: str | None, synchronous: str = "full") -> Run:
    scripted = ScriptedOpenAIThread()
    scripted.start()
    scripted.set_responder(FamilyScript())
    timed: list[TimedProvider] = []

    def providers(settings: Settings) -> dict[str, Provider]:
        """The daemon's providers by name: the main model's one, timed."""
        main = settings.models.main
        timed.append(TimedProvider(make_provider(main.provider, settings.providers[main.provider])))
        return {main.provider: timed[-1]}

    try:
        with temp_dir("netclaw-bench-subagents-", directory) as root:
            settings = daemon_settings(root / "data", scripted.base_url, journal={"synchronous": synchronous})
            daemon = Daemon(settings, provider_factory=providers)
            commits: list[float] = []
            observe = daemon.metrics.commit_seconds.observe  # the journal reports each commit here

            def observed(seconds: float) -> None:
                commits.append(seconds * 1000)
                observe(seconds)

            daemon.metrics.commit_seconds.observe = observed  # type: ignore[method-assign,assignment]
            daemon.start()
            try:
                assert daemon.io is not None
                results: list[Trip] = []
                for n in range(WARMUP + trips):
                    trip = daemon.io.run(one_trip(daemon, timed[0], n), 60)
                    if n >= WARMUP:
                        results.append(trip)
                    else:
                        commits.clear()  # the warm-up's commits are not the run's
                    if n % 50 == 0:
                        log(f"trip {n}: {trip.overhead_ms:.2f} ms beyond the provider")
                return Run(results, commits)
            finally:
                daemon.stop()
    finally:
        scripted.stop()


def report(run_durable: Run, run_volatile: Run | None) -> None:
    durable = run_durable.trips
    overhead = [t.overhead_ms for t in durable]
    p50, p99 = median(overhead), percentile(overhead, 99)
    figure("subagent_round_trip_overhead_p50", p50, "ms", f"<= {TARGET_P50_MS:g}", p50 <= TARGET_P50_MS)
    info("subagent_round_trip_overhead_p99", p99, "ms", f"{len(durable)} round trips, journal durable")
    info("subagent_round_trip_total_p50", median([t.total_ms for t in durable]), "ms")
    info("subagent_child_provider_p50", median([t.provider_ms for t in durable]), "ms")
    info("subagent_spawn_to_child_call_p50", median([t.spawn_ms for t in durable]), "ms")
    info("subagent_answer_to_parent_admitted_p50", median([t.back_ms for t in durable]), "ms")
    commit = median(run_durable.commits_ms)
    info("journal_commit_p50", commit, "ms", "the journal's fsync'd group commits during the run")
    info(
        "subagent_round_trip_overhead_beyond_commits_p50",
        p50 - 4 * commit,
        "ms",
        "four commits are on the way: the spawn, the child's admission, its answer, the parent's admission",
    )
    info(
        "plain_turn_overhead_p50",
        median([t.plain_ms for t in durable]),
        "ms",
        "a new session's turn, beyond its model call",
    )
    if run_volatile is not None:
        rest = [t.overhead_ms for t in run_volatile.trips]
        note = "journal.synchronous=normal: what is netclaw's beyond the disk"
        info("subagent_round_trip_overhead_no_fsync_p50", median(rest), "ms", note)
        info("subagent_round_trip_overhead_no_fsync_p99", percentile(rest, 99), "ms")
    info("machine_load", machine_load(), "", "1-minute load average / cores")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trips", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 round trips (seconds)")
    parser.add_argument("--dir", default=None, help="where the temporary data_dir goes")
    parser.add_argument("--no-reference", action="store_true", help="skip the pass without fsync")
    args = parser.parse_args(argv)
    trips = 20 if args.quick else args.trips
    durable = run(trips, args.dir)
    report(durable, None if args.no_reference else run(trips, args.dir, "normal"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
