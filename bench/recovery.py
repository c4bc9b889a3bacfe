"""Recovery time of a 1,000-turn session, with and without a snapshot.

The journal is built the way the actor builds it: events (``netclaw.sessions._core.journal.events``)
applied to a ``SessionState`` and appended through ``SqliteJournal.append`` in the actor's
groupings (InputAdmitted + TurnStarted; StepRecorded; TurnRecorded [+ SessionTitleSet]).
Each turn: a user message, a tool call + tool result on every 5th turn, an assistant
reply; texts of 200-800 characters. 3,201 events in all.

Three sessions with the same events:

* ``none`` — no snapshot: full replay;
* ``end``  — a snapshot at the last event;
* ``behind`` — a snapshot at the last append boundary at least as many events before the
  end as the actor's policy spaces a session this long (``snapshot.due``: 150 events at
  2,400 messages; 20 in a short session): about the worst case the actor leaves behind.

Timed: ``load_state(journal, pid)`` — what the actor's recovery runs — cold: a fresh
journal (fresh SQLite connections) per run, median of ``--runs``, in a process whose heap is
settled as ``netclaw run`` settles its own once it is up (``settle_heap``: start-up's objects
out of the collector's sight, young collections every 10,000 allocations). Without that,
CPython's default collector ran a full collection inside some of the runs, and each
walked every module's objects: 24-36 ms of a ~40 ms replay, in a run out of two or three.
Next to it, the raw floor in the same run: a fresh sqlite3 connection reading the same rows
plus ``json.loads`` of the snapshot and payloads (no objects built). Info: where the time
of load_state goes (fetch, decode, apply / from_snapshot), and once the whole actor path in
a real Daemon: from routing a message to the session until its phase is ``ready``, until
the admission ack (recovery plus one durable append), and until the turn is recorded
(against the scripted provider in its own process; this includes building the prompt over
the whole 1,000-turn history).

Run from the repo root: ``python bench/recovery.py [--turns 1000] [--runs 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as c
from _common import daemon_settings, figure, info, log, machine_load, median

from netclaw.messages import ChatMessage, ToolCall, new_id
from netclaw.persistence import NewEvent, SessionRow, SqliteJournal, prepare_database
from netclaw.process.heap import settle_heap
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.codec import decode_all, encode
from netclaw.sessions._core.journal.events import (
    InputAdmitted,
    SessionEvent,
    SessionTitleSet,
    StepRecorded,
    TurnRecorded,
    TurnStarted,
)
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._shell.recovery import load_state

WORDS = (
    "the deploy finished but the api latency went up after the migration so we rolled back "
    "and checked the logs for slow queries on the sessions table before trying again tonight"
).split()
VARIANTS = ("none", "end", "behind")


def text(rng: random.Random, lo: int = 200, hi: int = 800) -> str:
    size = rng.randint(lo, hi)
    out = ""
    while len(out) < size:
        out += rng.choice(WORDS) + " "
    return out[:size].strip()


def turn_batches(turns: int, seed: int = 5) -> list[list[SessionEvent]]:
    """The appends of ``turns`` turns, in the actor's groupings."""
    rng = random.Random(seed)
    ts = 1.76e9
    out: list[list[SessionEvent]] = []
    for t in range(1, turns + 1):
        ts += 30.0
        user = ChatMessage(
            id=new_id("u"), role="user", content=text(rng), ts=ts, identity=f"msg:{ts:.6f}", user="bench"
        )
        out.append([InputAdmitted(user), TurnStarted(t, user.id)])
        if t % 5 == 0:
            call = ToolCall(id=new_id("call"), name="current_time", arguments='{"timezone":"Europe/Berlin"}')
            calling = ChatMessage(
                id=new_id("a"), role="assistant", content=text(rng, 20, 120), ts=ts + 1, tool_calls=(call,)
            )
            result = ChatMessage(
                id=new_id("t"),
                role="tool",
                content=text(rng),
                ts=ts + 2,
                tool_call_id=call.id,
                name=call.name,
            )
            out.append([StepRecorded(t, (calling, result))])
        reply = ChatMessage(id=new_id("a"), role="assistant", content=text(rng), ts=ts + 3)
        last: list[SessionEvent] = [
            TurnRecorded(
                t,
                user.id,
                "completed",
                (reply,),
                usage={"input_tokens": 1000 + t * 300, "output_tokens": 150},
            )
        ]
        if t == 1:
            last.append(SessionTitleSet(user.content[:60]))
        out.append(last)
    return out


def snapshot_spacing(batches: list[list[SessionEvent]]) -> int:
    """The events the actor's policy lets pass between snapshots at the end of this session
    (``snapshot.due`` with snapshot_interval's default, 20)."""
    state = SessionState("spacing")
    for events in batches:
        for event in events:
            state = state.apply(event, state.seq + 1, 0.0)
    return next(n for n in range(state.seq + 1) if snapshots.due(n, 20, len(state.transcript)))


async def build(path: Path, pid: str, turns: int) -> tuple[SessionState, SessionState]:
    """Append the session through the journal; returns (final state, the state the actor's
    latest snapshot may be of: its snapshot spacing before the end)."""
    batches = turn_batches(turns)
    total = sum(len(b) for b in batches)
    behind = snapshot_spacing(batches)
    journal = await SqliteJournal(path, synchronous="normal").open()  # building is not what we time
    try:
        state = SessionState(pid)
        before_end = state
        for events in batches:
            now = time.time()
            new = state
            for event in events:
                new = new.apply(event, new.seq + 1, now)
            row = SessionRow(
                id=pid,
                channel=new.channel,
                title=new.title,
                turns=new.turns,
                last_activity=now,
                pending=new.pending_inputs,
            )
            await journal.append(pid, state.seq, [NewEvent(*encode(e)) for e in events], row)
            state = new
            if state.seq <= total - behind:
                before_end = state
        return state, before_end
    finally:
        await journal.close()


def copy_session(path: Path, src: str, dst: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO events (persistence_id, seq, type, payload, ts)"
            " SELECT ?, seq, type, payload, ts FROM events WHERE persistence_id = ?",
            (dst, src),
        )
        conn.execute(
            "INSERT INTO sessions (id, channel, title, turns, last_activity, pending, last_seq)"
            " SELECT ?, channel, title, turns, last_activity, pending, last_seq FROM sessions WHERE id = ?",
            (dst, src),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def save_snapshot(path: Path, pid: str, state: SessionState) -> int:
    """The snapshot as the actor writes it (the document and the transcript rows)."""
    journal = await SqliteJournal(path, synchronous="full").open()
    try:
        document, rows = snapshots.encode(replace(state, session_id=pid), 0)
        await journal.save_snapshot(pid, state.seq, document, rows, 0)
        return len(document) + sum(map(len, rows))
    finally:
        await journal.close()


# --------------------------------------------------------------------------- timing


class Collections:
    """The collector's runs inside the timed calls, by generation, and the time they took."""

    def __init__(self) -> None:
        self.runs = [0, 0, 0]
        self.seconds = 0.0
        self._timing = False
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self._timing:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.runs[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._started

    async def timed(self, path: Path, pid: str) -> tuple[float, SessionState]:
        journal = await SqliteJournal(path, synchronous="full").open()
        try:
            self._timing = True
            t0 = time.perf_counter()
            state = await load_state(journal, pid)
            return time.perf_counter() - t0, state
        finally:
            self._timing = False
            await journal.close()


async def cold_parts(path: Path, pid: str) -> dict[str, float]:
    """load_state's steps timed one by one (same calls, fresh journal)."""
    journal = await SqliteJournal(path, synchronous="full").open()
    try:
        parts: dict[str, float] = {}
        t0 = time.perf_counter()
        snapshot = await journal.load_snapshot(pid)
        t1 = time.perf_counter()
        state = (
            snapshots.decode(snapshot.state, snapshot.messages) if snapshot is not None else SessionState(pid)
        )
        t2 = time.perf_counter()
        stored = await journal.replay(pid, state.seq)
        t3 = time.perf_counter()
        events = decode_all([(e.type, e.payload) for e in stored])  # as rebuild_state does
        decoded = [(event, e.seq, e.ts) for event, e in zip(events, stored, strict=True)]
        t4 = time.perf_counter()
        state.apply_all(decoded)
        t5 = time.perf_counter()
        parts.update(
            snapshot_fetch=t1 - t0,
            from_json=t2 - t1,
            replay_fetch=t3 - t2,
            decode=t4 - t3,
            apply=t5 - t4,
            events=float(len(stored)),
        )
        return parts
    finally:
        await journal.close()


def raw_floor(path: Path, pid: str) -> float:
    """A fresh sqlite3 connection: the snapshot and the events after it, json.loads of each."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT seq, state FROM snapshots WHERE persistence_id = ?", (pid,)).fetchone()
        after = 0
        if row is not None:
            json.loads(row[1])
            after = row[0]
            for (message,) in conn.execute(
                "SELECT message FROM snapshot_messages WHERE persistence_id = ? ORDER BY idx", (pid,)
            ):
                json.loads(message)
        for _, _, payload, _ in conn.execute(
            "SELECT seq, type, payload, ts FROM events WHERE persistence_id = ? AND seq > ? ORDER BY seq",
            (pid, after),
        ):
            json.loads(payload)
    finally:
        conn.close()
    return time.perf_counter() - t0


async def snapshot_write_cost(
    path: Path, state: SessionState, new_rows: int, runs: int = 3
) -> tuple[float, float, int]:
    """What the actor pays per snapshot of this session, ``new_rows`` transcript rows after
    the last one: to_snapshot (on its thread, holding the GIL: the new transcript rows and
    the rest of the state) and the durable save_snapshot through the group-commit writer."""
    encode_s: list[float] = []
    save_s: list[float] = []
    pid = "rec-snapcost"
    journal = await SqliteJournal(path, synchronous="full").open()
    try:
        copy = replace(state, session_id=pid)
        saved = max(0, len(copy.transcript) - new_rows)
        document, rows = snapshots.encode(copy, 0)
        await journal.save_snapshot(pid, copy.seq, document, rows[:saved], 0)  # the earlier rows
        for _ in range(runs):
            t0 = time.perf_counter()
            document, rows = snapshots.encode(copy, saved)
            t1 = time.perf_counter()
            await journal.save_snapshot(pid, copy.seq, document, rows, saved)
            t2 = time.perf_counter()
            encode_s.append(t1 - t0)
            save_s.append(t2 - t1)
    finally:
        await journal.close()
    return median(encode_s), median(save_s), len(document) + sum(map(len, rows))


# --------------------------------------------------------------------------- the actor path


def actor_path(data_dir: Path, pids: list[str], tmp: Path) -> dict[str, dict[str, float]]:
    """A real Daemon on ``data_dir``: per pid, route -> ready / ack / reply (ms)."""
    from _provider import ProviderProcess

    from netclaw.daemon import Daemon
    from netclaw.gateway import Inbound
    from netclaw.sessions._core.phases import Phase

    provider = ProviderProcess(tmp / "provider.log")
    daemon: Daemon | None = None
    out: dict[str, dict[str, float]] = {}
    try:
        provider.start()
        settings = daemon_settings(data_dir, provider.base_url, journal={"synchronous": "full"})
        daemon = Daemon(settings)
        daemon.start()
        io_loop, gateway, manager = daemon.io, daemon.gateway, daemon.manager
        assert io_loop is not None and gateway is not None and manager is not None
        ready_at: dict[str, list[float]] = {}
        turn_done: dict[str, asyncio.Event] = {}
        original = manager.phase_changed

        def phase_changed(session_id: str, ref: Any, phase: Phase) -> None:  # runs on the loop
            if phase is Phase.READY:
                seen = ready_at.setdefault(session_id, [])
                seen.append(time.perf_counter())
                if len(seen) == 2 and session_id in turn_done:  # recovered, then the turn ended
                    turn_done[session_id].set()
            original(session_id, ref, phase)

        manager.phase_changed = phase_changed  # type: ignore[method-assign]

        async def one(pid: str) -> dict[str, float]:
            turn_done[pid] = asyncio.Event()
            t0 = time.perf_counter()
            await gateway.intake.submit(
                Inbound(pid, "one more question after the restart, please"), wait=False
            )
            t1 = time.perf_counter()
            await asyncio.wait_for(turn_done[pid].wait(), 120)
            ready, done = ready_at[pid]
            return {"ready": ready - t0, "ack": t1 - t0, "reply": done - t0}

        io_loop.run(one("warm-up"), 120)  # first actor, first provider call, lazy imports
        for pid in pids:
            out[pid] = io_loop.run(one(pid), 300)
    finally:
        if daemon is not None:
            daemon.stop()
        provider.stop()
    return out


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7, help="cold load_state runs per variant (median)")
    parser.add_argument("--no-actor", action="store_true", help="skip the Daemon/actor path (info)")
    parser.add_argument("--dir", default=None, help="where the temporary data_dir goes")
    c.add_quick(parser, turns=100, runs=2)
    args = c.apply_quick(parser.parse_args())
    load_before = machine_load()
    settle_heap()  # as `netclaw run` does once it is up, before any session is recovered

    with c.temp_dir("netclaw-bench-recovery-", args.dir) as tmp:
        data_dir = tmp / "data"
        path = data_dir / "netclaw.db"  # Settings.database_path
        prepare_database(path, synchronous="full")
        pids = {v: f"rec-{v}" for v in VARIANTS}
        t0 = time.perf_counter()
        final, before_end = asyncio.run(build(path, pids["none"], args.turns))
        for v in ("end", "behind"):
            copy_session(path, pids["none"], pids[v])
        snap_end = asyncio.run(save_snapshot(path, pids["end"], final))
        asyncio.run(save_snapshot(path, pids["behind"], before_end))
        log(
            f"built {final.seq} events ({len(final.transcript)} messages) in {time.perf_counter() - t0:.1f} s; "
            f"snapshots {snap_end / 1e6:.2f} MB at seq {final.seq} and seq {before_end.seq}"
        )

        collections = Collections()
        gc.callbacks.append(collections)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        floors: dict[str, list[float]] = {v: [] for v in VARIANTS}
        part_runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for r in range(args.runs):
            for v in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
                elapsed, state = asyncio.run(collections.timed(path, pids[v]))
                if state.seq != final.seq or len(state.transcript) != len(final.transcript):
                    raise SystemExit(f"{v}: recovered seq {state.seq}, expected {final.seq}")
                times[v].append(elapsed)
                floors[v].append(raw_floor(path, pids[v]))
                part_runs[v].append(asyncio.run(cold_parts(path, pids[v])))
        parts = {v: {k: median([p[k] for p in runs]) for k in runs[0]} for v, runs in part_runs.items()}
        copy_session(path, pids["none"], "rec-snapcost")  # a snapshot needs its events there
        new_rows = len(final.transcript) - len(before_end.transcript)
        snapshot_cost = asyncio.run(snapshot_write_cost(path, final, new_rows))
        actor = {} if args.no_actor else actor_path(data_dir, [pids["none"], pids["behind"]], tmp)

    ms = 1000.0
    info(
        "session_size",
        f"{final.seq} events, {len(final.transcript)} messages, {args.turns} turns",
        note=f"snapshot JSON {snap_end / 1e6:.2f} MB",
    )
    for v, label in (
        ("none", "full replay"),
        ("end", "snapshot at the end"),
        ("behind", f"snapshot {final.seq - before_end.seq} events before the end"),
    ):
        p = parts[v]
        steps = (
            f"fetch snapshot {p['snapshot_fetch'] * ms:.1f} + from_snapshot {p['from_json'] * ms:.1f} + "
            f"fetch {int(p['events'])} events {p['replay_fetch'] * ms:.1f} + decode {p['decode'] * ms:.1f} + "
            f"apply {p['apply'] * ms:.1f} ms"
        )
        floor = median(floors[v])
        info(
            f"recovery_{v}_raw_floor_ms",
            floor * ms,
            "ms",
            f"sqlite3 read + json.loads only; load_state is {median(times[v]) / floor:.1f}x this",
        )
        info(f"recovery_{v}_breakdown", steps, note=f"{label}, medians of {args.runs} cold runs")
    enc, save, size = snapshot_cost
    info(
        "snapshot_write_cost_ms",
        (enc + save) * ms,
        "ms",
        f"to_snapshot {enc * ms:.2f} ms on the actor thread + save_snapshot {save * ms:.1f} ms for "
        f"{size / 1e3:.0f} kB (the {new_rows} rows since the last snapshot and the rest of the state); "
        f"paid every {final.seq - before_end.seq} events in a session this long (snapshot.due), about every "
        f"{(final.seq - before_end.seq) * args.turns / final.seq:.0f} turns",
    )
    full_ms = median(times["none"]) * ms
    for pid, res in actor.items():
        info(
            f"actor_path_{pid}",
            f"route->ready {res['ready'] * ms:.0f} ms, route->ack {res['ack'] * ms:.0f} ms, "
            f"route->turn recorded {res['reply'] * ms:.0f} ms",
            note="real Daemon; reply includes the prompt build over the 1,000-turn history, the provider call "
            "and two journal commits",
        )
    young, middle, full = collections.runs
    info(
        "collector_in_timed_runs",
        f"{young} young, {middle} middle, {full} full collections, {collections.seconds * ms:.1f} ms in all",
        note=f"over the {len(VARIANTS) * args.runs} timed load_state calls, the heap settled as the daemon's",
    )
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    end_ms, behind_ms = median(times["end"]) * ms, median(times["behind"]) * ms
    figure("recovery_snapshot_at_end_ms", end_ms, "ms", "<= 20 ms", end_ms <= 20)
    figure(
        f"recovery_snapshot_{final.seq - before_end.seq}_before_end_ms",
        behind_ms,
        "ms",
        "<= 20 ms",
        behind_ms <= 20,
    )
    figure("recovery_full_replay_ms", full_ms, "ms", "<= 50 ms", full_ms <= 50)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
