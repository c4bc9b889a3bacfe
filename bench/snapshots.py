"""What a session writes per turn as it grows: journal events plus snapshots.

The session of ``recovery.py`` (a user message, a tool round every 5th turn, a reply;
200-800-character texts) folded event by event the way the actor folds it, with the actor's
snapshot policy (``session.snapshot_interval`` = 20 events) and its writer
(``Recorder.snapshot``: ``netclaw.sessions._core.journal.snapshot.encode`` — the transcript rows new since the last
snapshot plus the small rest of the state). Counted, not timed: the characters each turn
hands the journal (event payloads, snapshot documents, new transcript rows), averaged over
``--window`` turns ending at turn 100 and at turn ``--turns`` (10,000). Next to it, in the
same run, the reference: the same snapshots written whole (``to_json``, snapshot version 1,
what the first wave wrote). Also timed: one snapshot's encoding on the actor's thread at
the long end, both ways.

Run from the repo root: ``python bench/snapshots.py [--turns 10000] [--window 100]``.
"""

from __future__ import annotations

import argparse
import time

from _common import add_quick, apply_quick, figure, info, log, machine_load, median
from recovery import turn_batches

from netclaw.sessions._core.journal import snapshot as snapshot
from netclaw.sessions._core.journal.codec import encode
from netclaw.sessions._core.journal.events import SessionTitleSet, TurnRecorded
from netclaw.sessions._core.journal.state import SessionState

INTERVAL = 20  # session.snapshot_interval's default


def measure(turns: int, window: int) -> tuple[dict[int, tuple[float, float]], SessionState, int]:
    """{turn at the end of a window: (rows-snapshot chars per turn, whole-snapshot chars per
    turn)} for the windows ending at turn 100, 1,000 and ``turns``; the final state and the
    rows saved by its last snapshot."""
    ends = sorted({min(100, turns), min(1000, turns), turns})
    state = SessionState("bench-snapshots")
    saved_rows = 0
    since_snapshot = 0
    written_rows = written_whole = 0
    marks: dict[int, tuple[int, int]] = {}
    results: dict[int, tuple[float, float]] = {}
    turn = 0
    for events in turn_batches(turns):  # the actor's appends: 3 or 4 per turn
        for event in events:
            state = state.apply(event, state.seq + 1, 0.0)
            payload = len(encode(event)[1])
            written_rows += payload
            written_whole += payload
        since_snapshot += len(events)
        if since_snapshot >= INTERVAL:
            since_snapshot = 0
            counting = any(end - window < state.turns <= end for end in ends)
            if counting:  # encoding 10,000 turns' worth whole every 7 turns would take minutes
                document, rows = snapshot.encode(state, saved_rows)
                written_rows += len(document) + sum(map(len, rows))
                written_whole += len(snapshot.to_json(state))
            saved_rows = len(state.transcript)
        if state.turns == turn or not isinstance(events[-1], TurnRecorded | SessionTitleSet):
            continue
        turn = state.turns  # a turn just ended
        for end in ends:
            if turn == end - window:
                marks[end] = (written_rows, written_whole)
            if turn == end:
                start_rows, start_whole = marks.get(end, (0, 0))
                results[end] = ((written_rows - start_rows) / window, (written_whole - start_whole) / window)
    return results, state, saved_rows


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
    results, state, _ = measure(args.turns, args.window)
    log(f"folded {args.turns} turns ({state.seq} events) in {time.perf_counter() - t0:.1f} s")
    rows_s, whole_s, rows_size, whole_size = encode_cost(state)

    short, long = results[min(100, args.turns)], results[args.turns]
    for end, (rows, whole) in sorted(results.items()):
        info(
            f"written_per_turn_at_{end}",
            rows / 1000,
            "kB/turn",
            f"events + row snapshots; whole snapshots (reference, same run): {whole / 1000:.1f} kB/turn "
            f"({whole / rows:.1f}x)",
        )
    info(
        f"snapshot_encode_at_{args.turns}_ms",
        rows_s * 1000,
        "ms",
        f"on the actor thread, {rows_size / 1000:.0f} kB; whole (reference): {whole_s * 1000:.1f} ms, "
        f"{whole_size / 1e6:.2f} MB ({whole_s / rows_s:.0f}x)",
    )
    info("machine_load", f"{load_before} at start, {machine_load()} at end", note="1-min loadavg / cores")
    ratio = long[0] / short[0]
    figure(
        f"written_per_turn_{args.turns}_vs_100",
        ratio,
        "x",
        "<= 1.5 x",
        ratio <= 1.5,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
