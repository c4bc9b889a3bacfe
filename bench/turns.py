"""Daemon-added turn latency and turn throughput against a zero-latency scripted provider.

The real :class:`~netclaw.daemon.Daemon` runs in this process (port 0, a temporary
data_dir, journal synchronous=FULL). The provider is ``tests.fakes.scripted_openai``
(echo replies, streamed in 8-character deltas) in a *separate process*, so its CPU does
not share our GIL.

Latency, 1 session, sequential turns (the figure)
    Each turn is ``IntakeService.submit(Inbound(...), wait=True)`` awaited by a driver coroutine
    on the daemon's own loop (no bench-side thread hops). Right after each turn the
    driver sends the very bytes the daemon's provider sent in it to the same server again,
    through the same client stack as the daemon's (httpx over ``PooledTransport``), and
    reads the stream to the end: the provider's own time. added = end-to-end - reference,
    paired turn by turn. A breakdown wraps the daemon's journal.append and
    provider.complete (timing only).
Growth with history (the figure: turn 1,000 vs turn 10)
    One session of 1,000 turns on a daemon of its own, against a provider that thinks 20 ms
    before each answer; its last fifty turns alternate with turns 10-59 of a fresh probe
    session, and the figure is the ratio of their added latencies' p50s (see
    :func:`long_session` for why each of these).
HTTP path (info)
    ``POST /api/sessions/{id}/messages?wait=1`` from a synchronous httpx client in this
    process's main thread, next to a direct synchronous call.
Throughput (the figure: 100 sessions)
    Turns/s with 1 session (sequential) and with N concurrent sessions (each sends its
    next message when its previous turn completes), next to the provider's own rate at
    the same concurrency, measured with a light aiohttp client (the provider's capacity)
    and, once, with httpx (netclaw's client library) both on its own pool with keep-alive
    and the way netclaw's providers use it (aiohttp's pool under httpx through
    ``netclaw.providers._transport.PooledTransport``, netclaw's pool limits, each stream
    read to its end).

Also printed: journal commits (= fsyncs) per turn, CPU per turn by thread group of this
process (loop / actors / sqlite threads) and of the provider process, from /proc.
``--profile`` adds a cProfile of the loop thread during one extra N-session round.

Run from the repo root: ``python bench/turns.py [--turns 300] [--seconds 4] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import _procstat as ps
import aiohttp
import httpx
from _common import daemon_settings, figure, info, log, machine_load, median, percentile
from _provider import ProviderProcess

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.messages import ChatMessage, system
from netclaw.process.heap import settle_heap
from netclaw.providers import ProviderRequest
from netclaw.providers._openai import request_body
from netclaw.providers._transport import PooledTransport
from netclaw.tools import default_registry

WORDS = (
    "please check the deploy logs for the api service and tell me whether the last "
    "migration finished cleanly before we roll out the new build to staging tonight"
).split()
MODEL = "scripted"
MAX_OUTPUT = 1024


def make_texts(count: int, seed: int = 11) -> list[str]:
    """User messages of 60-160 characters (the echo reply streams in 8-char deltas)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        size = rng.randint(60, 160)
        text = ""
        while len(text) < size:
            text += rng.choice(WORDS) + " "
        out.append(text[:size].strip())
    return out


def echo(text: str) -> str:
    return f"echo: {text}"


def ms(seconds: float) -> float:
    return seconds * 1000.0


# --------------------------------------------------------------------------- reference calls


class Reference:
    """Direct streaming calls to the scripted server, shaped like the daemon's requests."""

    def __init__(self, base_url: str, system_prompt: str) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.system = system(system_prompt)
        self.tools = default_registry().schemas()
        self.headers = {"Accept": "text/event-stream, application/json", "Content-Type": "application/json"}

    def body(self, history: list[tuple[str, str]], text: str) -> bytes:
        messages: list[ChatMessage] = [self.system]
        for i, (user, reply) in enumerate(history):
            messages.append(ChatMessage(id=f"u{i}", role="user", content=user, ts=0.0))
            messages.append(ChatMessage(id=f"a{i}", role="assistant", content=reply, ts=0.0))
        messages.append(ChatMessage(id="u", role="user", content=text, ts=0.0))
        req = ProviderRequest(model=MODEL, messages=messages, tools=self.tools, max_output_tokens=MAX_OUTPUT)
        return json.dumps(request_body(req)).encode()

    async def call(self, client: httpx.AsyncClient, body: bytes) -> None:
        """Read the whole stream, so the connection is reused."""
        async with client.stream("POST", self.url, content=body, headers=self.headers) as response:
            response.raise_for_status()
            async for _line in response.aiter_lines():
                pass

    async def call_aiohttp(self, session: aiohttp.ClientSession, body: bytes) -> None:
        async with session.post(self.url, data=body, headers=self.headers) as response:
            response.raise_for_status()
            async for _line in response.content:
                pass

    def call_sync(self, client: httpx.Client, body: bytes) -> None:
        with client.stream("POST", self.url, content=body, headers=self.headers) as response:
            response.raise_for_status()
            for _line in response.iter_lines():
                pass


# --------------------------------------------------------------------------- latency (on the daemon loop)


@dataclass
class LatencyRun:
    e2e: list[float] = field(default_factory=list)
    ref: list[float] = field(default_factory=list)
    provider: list[float] = field(default_factory=list)  # daemon's provider.complete, per turn
    journal: list[float] = field(default_factory=list)  # sum of the turn's journal.append waits
    appends: int = 0
    commits: int = 0
    snapshot_turn: list[bool] = field(default_factory=list)  # the turn saved a snapshot
    snapshot_bytes: int = 0


def http_provider(daemon: Daemon) -> Any:
    """The daemon's HTTP provider, under what wraps it (the health watch)."""
    provider: Any = daemon.provider
    while not hasattr(type(provider), "_scrubbed_content"):
        provider = provider.inner
    return provider


class _Timed:
    """Wraps the daemon's journal appends / provider.complete (instance attributes) to time
    them, and keeps the bodies its provider sends (for the reference calls)."""

    def __init__(self, daemon: Daemon) -> None:
        self.journal, self.provider = daemon.journal, daemon.provider
        self.http = http_provider(daemon)
        self.journal_s = 0.0
        self.provider_s = 0.0
        self.appends = 0
        self.snapshots = 0
        self.snapshot_bytes = 0
        self.sent: list[bytes] = []

    def __enter__(self) -> _Timed:
        orig_append, orig_complete = self.journal.append, self.provider.complete  # type: ignore[union-attr]
        orig_threadsafe = self.journal.append_threadsafe  # type: ignore[union-attr]
        orig_content = self.http._scrubbed_content  # noqa: SLF001  (the bytes it sends, as sent)

        async def append(*args: Any, **kwargs: Any) -> int:
            t0 = time.perf_counter()
            try:
                return await orig_append(*args, **kwargs)
            finally:
                self.journal_s += time.perf_counter() - t0
                self.appends += 1

        def append_threadsafe(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            future = orig_threadsafe(*args, **kwargs)

            def done(_: object) -> None:  # on the writer thread, as it settles the actor's wait
                self.journal_s += time.perf_counter() - t0
                self.appends += 1

            future.add_done_callback(done)
            return future

        async def complete(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await orig_complete(*args, **kwargs)
            finally:
                self.provider_s += time.perf_counter() - t0

        def content(request: ProviderRequest) -> bytes:
            body: bytes = orig_content(request)
            self.sent.append(body)
            return body

        orig_snapshot = self.journal.save_snapshot  # type: ignore[union-attr]

        async def save_snapshot(
            pid: str, seq: int, state: str, messages: Sequence[str] = (), first: int = 0
        ) -> None:
            self.snapshots += 1
            self.snapshot_bytes += len(state) + sum(map(len, messages))
            await orig_snapshot(pid, seq, state, messages, first)

        self.journal.append = append  # type: ignore[method-assign,union-attr]
        self.journal.append_threadsafe = append_threadsafe  # type: ignore[method-assign,union-attr]
        self.journal.save_snapshot = save_snapshot  # type: ignore[method-assign,union-attr]
        self.provider.complete = complete  # type: ignore[method-assign,union-attr]
        self.http._scrubbed_content = content  # noqa: SLF001
        return self

    def __exit__(self, *exc: object) -> None:
        for obj, name in (
            (self.journal, "append"),
            (self.journal, "append_threadsafe"),
            (self.journal, "save_snapshot"),
            (self.provider, "complete"),
            (self.http, "_scrubbed_content"),
        ):
            obj.__dict__.pop(name, None)

    def take(self) -> tuple[float, float, list[bytes]]:
        out = (self.journal_s, self.provider_s, self.sent)
        self.journal_s = self.provider_s = 0.0
        self.sent = []
        return out


async def latency_run(
    daemon: Daemon, ref: Reference, plan: Sequence[tuple[str, str]], warm: int
) -> dict[str, LatencyRun]:
    """Each (session, text) of ``plan`` in turn, then the reference: the very bytes the
    daemon's provider sent in that turn, sent again by a direct call (its own time is the
    provider's). Per session, its first ``warm`` turns are not kept."""
    journal = daemon.journal
    assert daemon.gateway is not None and journal is not None
    intake = daemon.gateway.intake
    runs: dict[str, LatencyRun] = {}
    done: dict[str, int] = {}
    # The reference goes out the way the daemon's provider calls do (aiohttp's pool under
    # httpx's types): with httpx's own transport instead, the client library's cost, which
    # grows with the body differently, was counted as the daemon's (turn 1,000: 1.3 ms).
    async with httpx.AsyncClient(timeout=30, transport=PooledTransport()) as client:
        with _Timed(daemon) as timed:
            for sid, text in plan:
                out = runs.setdefault(sid, LatencyRun())
                timed.take()
                snaps0, bytes0 = timed.snapshots, timed.snapshot_bytes
                commits0, appends0 = journal.commits, timed.appends
                t0 = time.perf_counter()
                _, outcome = await intake.submit(Inbound(sid, text), wait=True)
                t1 = time.perf_counter()
                journal_s, provider_s, sent = timed.take()
                commits, appends = journal.commits - commits0, timed.appends - appends0
                assert outcome is not None and outcome.status == "completed", outcome
                for body in sent:
                    await ref.call(client, body)
                t2 = time.perf_counter()
                done[sid] = done.get(sid, 0) + 1
                if done[sid] > warm:
                    out.e2e.append(t1 - t0)
                    out.ref.append(t2 - t1)
                    out.journal.append(journal_s)
                    out.provider.append(provider_s)
                    out.snapshot_turn.append(timed.snapshots > snaps0)
                    out.snapshot_bytes += timed.snapshot_bytes - bytes0
                    out.commits += commits
                    out.appends += appends
    return runs


def http_latency(
    daemon: Daemon, ref: Reference, sid: str, texts: list[str], warm: int
) -> tuple[list[float], list[float]]:
    token = (daemon.settings.data_dir / "control.token").read_text().strip()
    e2e: list[float] = []
    refs: list[float] = []
    history: list[tuple[str, str]] = []
    with (
        httpx.Client(
            base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api,
        httpx.Client(timeout=30) as direct,
    ):
        for k, text in enumerate(texts):
            body = ref.body(history, text)
            t0 = time.perf_counter()
            ref.call_sync(direct, body)
            t1 = time.perf_counter()
            response = api.post(f"/api/sessions/{sid}/messages", params={"wait": "1"}, json={"text": text})
            t2 = time.perf_counter()
            response.raise_for_status()
            history.append((text, response.json()["reply"]))
            if k >= warm:
                refs.append(t1 - t0)
                e2e.append(t2 - t1)
    return e2e, refs


# --------------------------------------------------------------------------- throughput (on the daemon loop)


@dataclass
class Throughput:
    turns: int
    elapsed: float
    commits: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    provider_cpu: float = 0.0
    closed: int = 0  # client connections to the provider closed (TIME_WAIT) during the run

    @property
    def rate(self) -> float:
        return self.turns / self.elapsed


async def daemon_throughput(
    daemon: Daemon, prefix: str, sessions: int, texts: list[str], *, seconds: float = 0.0, count: int = 0
) -> Throughput:
    """``sessions`` concurrent sessions, each sequential; for ``seconds`` or ``count`` turns each."""
    gateway, journal = daemon.gateway, daemon.journal
    assert gateway is not None and journal is not None

    async def turn(sid: str, text: str) -> None:
        _, outcome = await gateway.intake.submit(Inbound(sid, text), wait=True)
        assert outcome is not None and outcome.status == "completed", outcome

    ids = [f"{prefix}-{i}" for i in range(sessions)]
    await asyncio.gather(*(turn(sid, texts[i % len(texts)]) for i, sid in enumerate(ids)))  # start the actors
    commits0 = journal.commits
    deadline = time.perf_counter() + seconds

    async def one(i: int) -> int:
        n = 0
        while (n < count) if count else (time.perf_counter() < deadline):
            await turn(ids[i], texts[(i * 7 + n + 1) % len(texts)])
            n += 1
        return n

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(sessions)))
    return Throughput(sum(counts), time.perf_counter() - t0, journal.commits - commits0)


async def provider_throughput(
    ref: Reference,
    sessions: int,
    body: bytes,
    *,
    seconds: float = 0.0,
    count: int = 0,
    client: str = "aiohttp",
) -> Throughput:
    """The provider alone: ``sessions`` concurrent callers of direct streaming requests.

    ``client``: ``aiohttp`` (a light client: the provider's capacity), ``httpx`` (httpx on
    its own pool, keep-alive), ``netclaw`` (httpx as netclaw's providers set it up)."""
    if client == "aiohttp":
        holder: Any = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=sessions))

        def call() -> Any:
            return ref.call_aiohttp(holder, body)
    else:
        if client == "netclaw":
            # As HttpStreamingProvider.__init__ (netclaw/providers/_http.py) builds its client.
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=128)
            holder = httpx.AsyncClient(timeout=30, transport=PooledTransport(limits=limits), limits=limits)
        else:
            limits = httpx.Limits(max_connections=max(100, sessions), max_keepalive_connections=None)
            holder = httpx.AsyncClient(timeout=30, limits=limits)

        def call() -> Any:
            return ref.call(holder, body)

    async with holder:
        await asyncio.gather(*(call() for _ in range(sessions)))  # open the connections
        deadline = time.perf_counter() + seconds

        async def one() -> int:
            n = 0
            while (n < count) if count else (time.perf_counter() < deadline):
                await call()
                n += 1
            return n

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one() for _ in range(sessions)))
        return Throughput(sum(counts), time.perf_counter() - t0)


def measured(provider: ProviderProcess, run: Callable[[], Throughput]) -> Throughput:
    """Run ``run()`` (blocking) with CPU by thread group, provider CPU and closed connections."""
    tw0 = ps.tcp_time_wait_to_port(provider.port)
    before, pcpu0 = ps.thread_cpu(), ps.process_cpu(provider.pid)
    result = run()
    after, pcpu1 = ps.thread_cpu(), ps.process_cpu(provider.pid)
    result.cpu = ps.delta_by_group(before, after)
    result.provider_cpu = pcpu1 - pcpu0
    result.closed = max(0, ps.tcp_time_wait_to_port(provider.port) - tw0)
    return result


def profile_round(daemon: Daemon, sessions: int, seconds: float, texts: list[str]) -> str:
    """cProfile of the loop thread during one more N-session round (the profiler slows it)."""
    io_loop = daemon.io
    assert io_loop is not None
    prof = cProfile.Profile()

    async def toggle(on: bool) -> None:
        prof.enable() if on else prof.disable()

    io_loop.run(toggle(True))
    try:
        result = io_loop.run(daemon_throughput(daemon, "prof", sessions, texts, seconds=seconds), 300)
    finally:
        io_loop.run(toggle(False))
    buf = io.StringIO()
    buf.write(
        f"cProfile of the loop thread: {result.turns} turns ({result.rate:.0f} turns/s under the profiler)\n"
    )
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    return "\n".join("# " + line for line in buf.getvalue().splitlines() if line.strip())


# --------------------------------------------------------------------------- main


def settings_for(data_dir: Path, base_url: str, window: int = 32768) -> Settings:
    config: Settings = daemon_settings(
        data_dir,
        base_url,
        model=MODEL,
        window=window,
        max_output=MAX_OUTPUT,
        timeout_s=10,
        journal={"synchronous": "full"},
    )
    return config


def long_session(tmp: Path, texts: list[str], think_s: float, window: int) -> tuple[LatencyRun, LatencyRun]:
    """One session of ``len(texts)`` turns, on a daemon of its own whose window holds them
    all (262,144 tokens): every turn sends the whole history, as the direct call beside it
    does, so the growth measured is the daemon's per-turn work over a growing history — not
    compaction, which a window-sized history would start (and the echoing fake provider
    answers with a summary that fails the quality check). Its last ``window`` turns
    alternate with the turns of a short probe session (from its tenth turn on), which
    returns too: the same daemon at the same moment, with a history of ten turns.

    The provider here thinks ``think_s`` before each answer, as every model does. Without
    it, the daemon idled before each turn for as long as the fake took to parse and hash
    the request (0.2 ms at turn 10, 12 ms at turn 1,000), and a daemon that has idled
    for more than a few milliseconds runs its next ones about half as fast on this kind of
    machine (2 virtual cores: wake-ups, cold caches). The same 8 ms asleep before a fresh
    session's turns slowed them as much as turn 1,000's, which the old figure counted as
    the daemon's growth (1.6-2.0x). With a think time both ends idle alike."""
    head, tail = texts[: len(texts) - window], texts[len(texts) - window :]
    probe = make_texts(9 + window, seed=29)
    plan = [("long-1", t) for t in head] + [("probe-1", t) for t in probe[:9]]
    for a, b in zip(tail, probe[9:], strict=True):
        plan += [("long-1", a), ("probe-1", b)]
    provider = ProviderProcess(
        tmp / "provider-long.log",
        args=("--port", "0", "--think", f"{think_s:g}"),
        # The fake's large buffers (a request body is 0.6 MB by turn 1,000) from a heap that
        # keeps what it freed: glibc's allocator otherwise maps fresh pages for each body a
        # little larger than the last, so whichever call came first with the new size paid
        # a few hundred page faults, and the daemon's call always came first.
        env={
            "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824"
        },
    )
    provider.start()
    try:
        settings = settings_for(tmp / "data-long", provider.base_url, window=262_144)
        daemon = Daemon(settings)
        daemon.start()
        try:
            assert daemon.io is not None
            ref = Reference(provider.base_url, settings.agent.system_prompt)
            runs: dict[str, LatencyRun] = daemon.io.run(latency_run(daemon, ref, plan, 0), 3600)
        finally:
            daemon.stop()
    finally:
        provider.stop()
    probe_run = runs["probe-1"]
    return runs["long-1"], LatencyRun(e2e=probe_run.e2e[9:], ref=probe_run.ref[9:])


def cpu_note(t: Throughput) -> str:
    turns = max(1, t.turns)
    parts = ", ".join(
        f"{g} {v / turns * 1e6:.0f}" for g, v in sorted(t.cpu.items(), key=lambda kv: -kv[1]) if v > 0
    )
    total = sum(t.cpu.values())
    return (
        f"{total / turns * 1e6:.0f} us/turn in this process ({total / t.elapsed:.2f} cores): {parts}; "
        f"provider process {t.provider_cpu / turns * 1e6:.0f} us/turn ({t.provider_cpu / t.elapsed:.2f} cores)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="measured sequential turns (after warm-up)")
    parser.add_argument(
        "--long-turns",
        type=int,
        default=1000,
        help="one session this long: added latency at its end vs turn 10",
    )
    parser.add_argument(
        "--long-think-ms",
        type=float,
        default=20.0,
        help="the long session's provider thinks this long before each answer (0: the old run)",
    )
    parser.add_argument("--warm", type=int, default=20, help="warm-up turns (same session, not measured)")
    parser.add_argument("--http-turns", type=int, default=100, help="HTTP-path turns (info)")
    parser.add_argument("--sessions", type=int, default=100, help="concurrent sessions for throughput")
    parser.add_argument("--seconds", type=float, default=4.0, help="per N-session throughput round")
    parser.add_argument("--single-turns", type=int, default=150, help="turns per 1-session throughput round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="throughput repetitions; the median is reported"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the loop thread in one extra round")
    parser.add_argument("--dir", default=None, help="where the temporary data_dir goes")
    c.add_quick(
        parser,
        turns=30,
        long_turns=40,
        warm=5,
        http_turns=10,
        sessions=10,
        seconds=1.0,
        single_turns=20,
        rounds=1,
    )
    args = c.apply_quick(parser.parse_args())

    texts = make_texts(max(args.warm + args.turns, 400, args.long_turns))
    started = time.perf_counter()
    load_before = machine_load()
    with c.temp_dir("netclaw-bench-turns-", args.dir) as tmp:
        provider = ProviderProcess(tmp / "provider.log")
        daemon: Daemon | None = None
        try:
            provider.start()
            settings = settings_for(tmp / "data", provider.base_url)
            daemon = Daemon(settings)
            daemon.start()
            settle_heap()  # as `netclaw run` does once it is up
            io_loop = daemon.io
            assert io_loop is not None
            ref = Reference(provider.base_url, settings.agent.system_prompt)
            log(f"provider {provider.base_url} (pid {provider.pid}); daemon {daemon.base_url}")

            def on_loop(coro: Any, timeout: float = 300) -> Any:
                return io_loop.run(coro, timeout)

            # -- latency at one session, then the HTTP path
            plan = [("lat-1", t) for t in texts[: args.warm + args.turns]]
            lat = on_loop(latency_run(daemon, ref, plan, args.warm), 600)["lat-1"]
            log(f"latency: {len(lat.e2e)} turns done")
            h_e2e, h_ref = http_latency(daemon, ref, "http-1", texts[: args.http_turns + 10], 10)

            # -- throughput rounds
            short_body = ref.body([(t, echo(t)) for t in texts[:10]], texts[10])  # ~ mid-run context size
            single: list[Throughput] = []
            single_ref: list[Throughput] = []
            many: list[Throughput] = []
            many_ref: list[Throughput] = []
            n = args.sessions
            for r in range(args.rounds):
                single.append(
                    measured(
                        provider,
                        lambda r=r: on_loop(
                            daemon_throughput(daemon, f"one{r}", 1, texts, count=args.single_turns)
                        ),
                    )
                )
                single_ref.append(
                    measured(
                        provider,
                        lambda: on_loop(
                            provider_throughput(ref, 1, short_body, count=args.single_turns, client="httpx")
                        ),
                    )
                )
                many.append(
                    measured(
                        provider,
                        lambda r=r: on_loop(
                            daemon_throughput(daemon, f"many{r}", n, texts, seconds=args.seconds)
                        ),
                    )
                )
                many_ref.append(
                    measured(
                        provider,
                        lambda: on_loop(provider_throughput(ref, n, short_body, seconds=args.seconds / 2)),
                    )
                )
                log(
                    f"round {r + 1}: 1 session {single[-1].rate:.0f} turns/s (provider alone {single_ref[-1].rate:.0f}/s); "
                    f"{n} sessions {many[-1].rate:.0f} turns/s (provider alone {many_ref[-1].rate:.0f}/s)"
                )
            httpx_keep = measured(
                provider,
                lambda: on_loop(
                    provider_throughput(ref, n, short_body, seconds=args.seconds / 2, client="httpx")
                ),
            )
            httpx_like = measured(
                provider,
                lambda: on_loop(
                    provider_throughput(ref, n, short_body, seconds=args.seconds / 2, client="netclaw")
                ),
            )
            profile_text = profile_round(daemon, n, args.seconds, texts) if args.profile else ""
        finally:
            if daemon is not None:
                daemon.stop()
            provider.stop()
        # Last, on a daemon of its own, once the other is down: nothing it leaves in this
        # process (heap, threads) reaches the figures above, and its shutdown finds no other
        # daemon's actor alive. Fifty turns from turn 10 (the first nine warm the daemon's
        # caches) and the last fifty: p50s of twenty turns moved by a third between runs.
        window = min(50, max(1, args.long_turns // 4))
        long, probe = long_session(tmp, texts[: args.long_turns], args.long_think_ms / 1000, window)

    def med(runs: list[Throughput]) -> Throughput:
        return sorted(runs, key=lambda t: t.rate)[len(runs) // 2]

    p = percentile
    added = [e - r for e, r in zip(lat.e2e, lat.ref, strict=True)]
    turns_n = len(lat.e2e)
    info(
        "provider_ref_latency_p50",
        ms(p(lat.ref, 50)),
        "ms",
        "direct call through the daemon's client stack (httpx over PooledTransport) read to the end, same request, same server",
    )
    info("provider_ref_latency_p99", ms(p(lat.ref, 99)), "ms")
    info(
        "e2e_turn_latency_p50",
        ms(p(lat.e2e, 50)),
        "ms",
        f"IntakeService.submit(wait=True) on the daemon loop, 1 session, {turns_n} turns",
    )
    info("e2e_turn_latency_p99", ms(p(lat.e2e, 99)), "ms")
    info("added_latency_p50", ms(p(added, 50)), "ms", "paired per turn: e2e - reference")
    info(
        "added_latency_p99_of_quantiles",
        ms(p(lat.e2e, 99) - p(lat.ref, 99)),
        "ms",
        "p99(e2e) - p99(ref), for comparison",
    )
    other = [e - j - pr for e, j, pr in zip(lat.e2e, lat.journal, lat.provider, strict=True)]
    info(
        "turn_breakdown_p50",
        f"provider.complete {ms(median(lat.provider)):.2f} ms (ref {ms(median(lat.ref)):.2f}) + "
        f"journal appends {ms(median(lat.journal)):.2f} ms ({lat.appends / turns_n:.2f} appends, "
        f"{lat.commits / turns_n:.2f} commits/fsyncs per turn) + actors/hops/gateway {ms(median(other)):.2f} ms",
        note="medians of per-turn parts, 1 session",
    )
    info(
        "turn_breakdown_p99",
        f"provider.complete {ms(p(lat.provider, 99)):.2f} ms, journal appends {ms(p(lat.journal, 99)):.2f} ms, "
        f"actors/hops/gateway {ms(p(other, 99)):.2f} ms",
    )
    with_snap = [a for a, snap in zip(added, lat.snapshot_turn, strict=True) if snap]
    without = [a for a, snap in zip(added, lat.snapshot_turn, strict=True) if not snap]
    if with_snap:
        info(
            "added_latency_snapshot_turns_p50",
            ms(median(with_snap)),
            "ms",
            f"{len(with_snap)} of {turns_n} turns saved a snapshot (avg {lat.snapshot_bytes / len(with_snap) / 1e3:.0f} kB, "
            f"growing with the transcript); other turns p50 {ms(median(without)):.2f} ms, "
            f"p99 {ms(p(without, 99)):.2f} ms",
        )
    h_added = [e - r for e, r in zip(h_e2e, h_ref, strict=True)]
    info(
        "http_e2e_turn_latency_p50",
        ms(p(h_e2e, 50)),
        "ms",
        f"POST ?wait=1, sync httpx client in-process, {len(h_e2e)} turns",
    )
    info("http_e2e_turn_latency_p99", ms(p(h_e2e, 99)), "ms")
    info("http_added_latency_p50", ms(p(h_added, 50)), "ms", "paired: HTTP e2e - direct sync provider call")
    info("http_added_latency_p99", ms(p(h_added, 99)), "ms")

    s, sr, m, mr = med(single), med(single_ref), med(many), med(many_ref)
    info(
        "provider_alone_turns_per_s_1", sr.rate, "turns/s", "sequential direct httpx calls, ~10-turn context"
    )
    info(
        "turns_per_s_1_session",
        s.rate,
        "turns/s",
        f"{args.single_turns} sequential turns, median of {args.rounds}; {s.rate / sr.rate * 100:.0f}% of provider alone; "
        f"{s.closed} provider connections closed in {s.turns} turns",
    )
    info("one_session_cpu", cpu_note(s))
    info(
        f"provider_alone_turns_per_s_{n}",
        mr.rate,
        "turns/s",
        f"{n} concurrent aiohttp callers: the provider's capacity",
    )
    info(
        f"provider_alone_turns_per_s_{n}_httpx",
        httpx_keep.rate,
        "turns/s",
        f"{n} concurrent httpx callers, keep-alive; {cpu_note(httpx_keep)}",
    )
    info(
        f"provider_alone_turns_per_s_{n}_httpx_like_netclaw",
        httpx_like.rate,
        "turns/s",
        f"aiohttp's pool under httpx (PooledTransport, 256/128 keep-alive), stream read to its end: "
        f"{httpx_like.closed} connections closed in {httpx_like.turns} calls "
        f"(keep-alive run: {httpx_keep.closed} in {httpx_keep.turns}); {cpu_note(httpx_like)}",
    )
    info(
        f"turns_per_s_{n}_sessions_vs_provider_alone",
        m.rate / mr.rate * 100,
        "%",
        f"{m.commits / max(1, m.turns):.2f} commits/turn; {m.closed} provider connections closed in {m.turns} turns",
    )
    info(f"sessions_{n}_cpu", cpu_note(m))
    if profile_text:
        print(profile_text)
    info(
        "machine_load",
        f"{load_before} at start, {machine_load()} at end",
        note="1-min loadavg / cores; other load skews p99",
    )
    log(f"wall time {time.perf_counter() - started:.0f} s")

    long_added = [e - r for e, r in zip(long.e2e, long.ref, strict=True)]
    probe_added = [e - r for e, r in zip(probe.e2e, probe.ref, strict=True)]
    start = min(9, len(long_added) - 2 * window)
    early, late = long_added[start : start + window], long_added[-window:]
    first, last = slice(start, start + window), slice(-window, None)

    def span(series: list[float]) -> str:
        return f"{ms(p(series[first], 50)):.2f} -> {ms(p(series[last], 50)):.2f} ms"

    over_ref = [c - r for c, r in zip(long.provider, long.ref, strict=True)]
    n_long = len(long_added)
    info(
        "long_session_added_latency",
        f"turns {start + 1}-{start + window} p50 {ms(p(early, 50)):.2f} ms, turns "
        f"{n_long - window + 1}-{n_long} p50 {ms(p(late, 50)):.2f} ms, beside them a session at "
        f"turns 10-{9 + window} p50 {ms(p(probe_added, 50)):.2f} ms (direct call {span(long.ref)}; "
        f"of the added: journal {span(long.journal)}, provider.complete over the direct call "
        f"{span(over_ref)})",
        note=f"one session, paired per turn against the direct call with its very bytes; the "
        f"provider thinks {args.long_think_ms:g} ms before each answer",
    )
    info(
        f"added_latency_turn_{n_long}_vs_its_turn_10",
        round(p(late, 50) / p(early, 50), 2),
        "x",
        "the same session earlier in the run: the machine's drift between the two windows is in it",
    )
    lat50, lat99, rate = ms(p(added, 50)), ms(p(added, 99)), m.rate
    cpu_us = sum(m.cpu.values()) / max(1, m.turns) * 1e6
    growth = p(late, 50) / p(probe_added, 50)
    figure("added_latency_p50", lat50, "ms", "<= 1.0 ms", lat50 <= 1.0)
    figure("added_latency_p99", lat99, "ms", "<= 5 ms", lat99 <= 5.0)
    figure(
        f"added_latency_turn_{n_long}_vs_10",
        growth,
        "x",
        "<= 1.2 x",
        growth <= 1.2,
    )
    figure(f"turns_per_s_{n}_sessions", rate, "turns/s", ">= 500 turns/s", rate >= 500)
    figure(f"cpu_per_turn_{n}_sessions", cpu_us, "us", "<= 1000 us", cpu_us <= 1000)
    vs = m.rate / mr.rate
    figure(f"turns_per_s_{n}_sessions_vs_provider_alone", vs, "x", ">= 0.8 x", vs >= 0.8)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
