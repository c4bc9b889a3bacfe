"""What a session writes, and what its snapshots cost the actor, per turn as it grows.

The session of ``recovery.py`` (a user message, a tool round every 5th turn, a reply;
200-800-character texts) folded event by event the way the actor folds it. At each turn's
end it is snapshotted when the actor's policy says so (``snapshot.due``: every
``session.snapshot_interval`` = 20 events, and in a long session every len(transcript) / 16)
with the actor's writer (``Recorder.snapshot``: ``netclaw.sessions._core.journal.snapshot.encode``
— the transcript rows new since the last snapshot plus the small rest of the state). Next to
it, in the same fold, the reference policy: a snapshot every 20 events at any length (the
policy up to the fourth wave's cost round), and the first wave's writer (``to_json``: the
whole state) on that policy's snapshots.

Per turn, averaged over the last half of the session up to turn 100, 1,000 and
``--turns`` (10,000; at least ``--window`` turns: a long session's snapshots are hundreds
of turns apart): the characters handed to the journal (event payloads, snapshot documents,
new transcript rows; counted) and the actor-thread time of the snapshot encodes (timed).
The whole writer's characters are counted over the last ``--window`` turns only. Also
timed: one snapshot's encoding at the long end, both writers.

Run from the repo root: ``python bench/snapshots.py [--turns 10000] [--window 100]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from _common import add_quick, apply_quick, figure, info, log, machine_load, median
from recovery import turn_batches

from netclaw.sessions._core.journal import snapshot as snapshot
from netclaw.sessions._core.journal.codec import encode
from netclaw.sessions._core.journal.events import SessionTitleSet, TurnRecorded
from netclaw.sessions._core.journal.state import SessionState

INTERVAL = 20  # session.snapshot_interval's default


@dataclass
class Policy:
    """When a turn's end writes a snapshot, and what that policy wrote and spent so far."""

    due: Callable[[int, int], bool]  # (events since the last snapshot, transcript length)
    since: int = 0
    saved_rows: int = 0
    written: int = 0  # characters handed to the journal: events and row snapshots
    encode_s: float = 0.0  # snapshot encoding, on the actor thread
    snapshots: int = 0
    marks: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # at a span's start


@dataclass(frozen=True)
class Span:
    turns: int
    written: float  # characters per turn
    encode_us: float  # per turn
    snapshots: int


def spans(turns: int, window: int) -> dict[int, int]:
    """{turn a span ends at: the turn it starts after}: 100, 1,000 and ``turns``, each over
    the last half of the session up to it (at least ``window`` turns). A long session's
    snapshots are hundreds of turns apart; a span this long holds about ten of them."""
    ends = sorted({min(100, turns), min(1000, turns), turns})
    return {end: max(0, end - max(window, end // 2)) for end in ends}


def measure(turns: int, window: int) -> tuple[dict[int, dict[str, Span]], dict[int, float], SessionState]:
    """{span end: {policy: what it wrote and spent per turn over the span}}, {span end: the
    characters per turn the first wave's whole snapshots (every 20 events) wrote over the
    last ``window`` turns before it}, and the final state. Snapshots are encoded only inside
    the spans (outside, a policy's snapshots are only noted): encoding 10,000 turns' worth
    whole every 7 turns would take minutes."""
    starts = spans(turns, window)
    policies = {
        "actor": Policy(lambda since, rows: snapshot.due(since, INTERVAL, rows)),
        "every_20": Policy(lambda since, rows: since >= INTERVAL),
    }
    state = SessionState("bench-snapshots")
    results: dict[int, dict[str, Span]] = {end: {} for end in starts}
    whole: dict[int, float] = {}
    whole_written = 0
    whole_marks: dict[int, int] = {}
    turn = 0
    for events in turn_batches(turns):  # the actor's appends: 3 or 4 per turn
        payload = 0
        for event in events:
            state = state.apply(event, state.seq + 1, 0.0)
            payload += len(encode(event)[1])
        whole_written += payload
        for p in policies.values():
            p.since += len(events)
            p.written += payload
        if state.turns == turn or not isinstance(events[-1], TurnRecorded | SessionTitleSet):
            continue
        turn = state.turns  # a turn just ended: the actor's turn_ended decides on a snapshot
        in_span = any(start < turn <= end for end, start in starts.items())
        rows = len(state.transcript)
        for name, p in policies.items():
            if not p.due(p.since, rows):
                continue
            p.since = 0
            if in_span:
                t0 = time.perf_counter()
                document, new_rows = snapshot.encode(state, p.saved_rows)
                p.encode_s += time.perf_counter() - t0
                p.written += len(document) + sum(map(len, new_rows))
                p.snapshots += 1
                if name == "every_20" and any(end - window < turn <= end for end in starts):
                    whole_written += len(snapshot.to_json(state))
            p.saved_rows = rows
        for end, start in starts.items():
            if turn == end - window:
                whole_marks[end] = whole_written
            if turn == end:
                whole[end] = (whole_written - whole_marks.get(end, 0)) / window
            for name, p in policies.items():
                if turn == start:
                    p.marks[end] = (p.written, p.encode_s, p.snapshots)
                if turn == end:
                    w0, e0, n0 = p.marks.get(end, (0, 0.0, 0))
                    n = end - start
                    results[end][name] = Span(
                        n, (p.written - w0) / n, (p.encode_s - e0) / n * 1e6, p.snapshots - n0
                    )
    return results, whole, state


def encode_cost(state: SessionState, runs: int = 5) -> tuple[float, float, int, int]:
    """One snapshot at the end of the session: (rows way seconds, whole way seconds, chars
    each), with the transcript rows of the last ~7 turns new."""
    saved = max(0, len(state.transcript) - 16)
    rows_s, whole_s = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        document, rows = snapshot.encode(state, saved)
        t1 = time.perf_counter()
        whole = snapshot.to_json(state)
        t2 = time.perf_counter()
        rows_s.append(t1 - t0)
        whole_s.append(t2 - t1)
    return median(rows_s), median(whole_s), len(document) + sum(map(len, rows)), len(whole)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=100)
    add_quick(parser, turns=300)
    args = apply_quick(parser.parse_args())
    load_before = machine_load()
    t0 = time.perf_counter()
    results, whole, state = measure(args.turns, args.window)
    log(f"folded {args.turns} turns ({state.seq} events) in {time.perf_counter() - t0:.1f} s")
    rows_s, whole_s, rows_size, whole_size = encode_cost(state)

    for end, by in sorted(results.items()):
        actor, ref = by["actor"], by["every_20"]
        span = f"turns {end - actor.turns + 1}-{end}"
        info(
            f"written_per_turn_at_{end}",
            actor.written / 1000,
            "kB/turn",
            f"events + row snapshots, {span}, {actor.snapshots} snapshots; every 20 events (reference, same "
            f"run): {ref.written / 1000:.2f} kB/turn, {ref.snapshots} snapshots; whole snapshots every 20 events "
            f"(the first wave's, last {args.window} turns): {whole[end] / 1000:.1f} kB/turn",
        )
        info(
            f"snapshot_encode_per_turn_at_{end}",
            actor.encode_us,
            "us/turn",
            f"on the actor thread, {span}; every 20 events (reference, same run): {ref.encode_us:.0f} us/turn "
            f"({actor.encode_us / ref.encode_us:.2f}x)",
        )
    info(
        f"snapshot_encode_at_{args.turns}_ms",
        rows_s * 1000,
        "ms",
        f"one snapshot, on the actor thread, {rows_size / 1000:.0f} kB; whole (reference): {whole_s * 1000:.1f} ms, "
        f"{whole_size / 1e6:.2f} MB ({whole_s / rows_s:.0f}x)",
    )
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    short, long = results[min(100, args.turns)]["actor"], results[args.turns]["actor"]
    ratio = long.written / short.written
    figure(f"written_per_turn_{args.turns}_vs_100", ratio, "x", "<= 1.5 x", ratio <= 1.5)
    # Flat: a turn at the long end pays no more for snapshots than one at turn 100 (the
    # timings are tens of microseconds a turn; the bound leaves room for the machine's noise).
    cost = long.encode_us / short.encode_us
    figure(f"snapshot_cost_per_turn_{args.turns}_vs_100", cost, "x", "<= 1.5 x", cost <= 1.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
