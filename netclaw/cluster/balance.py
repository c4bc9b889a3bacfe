"""How resident sessions are spread over the nodes (pure functions, no I/O).

The rebalancer of every node runs :func:`plan_moves` on the same view of the registry
(live sessions per live node). Nothing moves while every node is within a slack of the
even share (10% of it, at least one session), so nothing moves back and forth over
rounding. Otherwise every node computes the same target — the share rounded down for
each node, one more for as many as the remainder asks, given to those that hold the
most already (ties by name), so the fewest sessions move — and the same pairing of
the nodes above their target with those below it, largest first; each node carries out
only its own rows, at most ``limit`` sessions a round. Because all nodes plan alike, no
two pile onto one target, and each round brings the loads closer until none is off.

Invariants (tested): a node moves only when some node is off the share by more than
the slack; never more than ``limit``; never so many that it falls below the share
rounded down; only to nodes below the share; and never to itself. Every node applying
its plan at once converges within the slack, and then nothing moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TOLERANCE = 0.1  # of the even share: loads this close to it are left alone


def plan_moves(loads: Mapping[str, int], me: str, limit: int, tolerance: float = TOLERANCE) -> dict[str, int]:
    """How many of ``me``'s sessions to move to which node so that ``loads`` (sessions
    per live node that takes sessions, ``me`` included) even out."""
    if me not in loads or len(loads) < 2 or limit <= 0:
        return {}
    total = sum(loads.values())
    share = total / len(loads)
    if max(abs(load - share) for load in loads.values()) <= max(1.0, tolerance * share):
        return {}
    base, extra = divmod(total, len(loads))
    fullest = sorted(loads, key=lambda node: (-loads[node], node))
    target = {node: base + (1 if i < extra else 0) for i, node in enumerate(fullest)}
    need = {node: target[node] - loads[node] for node in reversed(fullest) if loads[node] < target[node]}
    takers = list(need)  # the least loaded first
    plan: dict[str, int] = {}
    for giver in fullest:
        surplus = loads[giver] - target[giver]
        while surplus > 0 and takers:
            taker = takers[0]
            count = min(surplus, need[taker])
            if giver == me:
                plan[taker] = plan.get(taker, 0) + count
            surplus -= count
            need[taker] -= count
            if need[taker] == 0:
                takers.pop(0)
    return _bounded(plan, limit)


def spread(sessions: Sequence[str], loads: Mapping[str, int]) -> dict[str, str]:
    """Where each of ``sessions`` goes when this node drains: every one to the node that
    is the least loaded at that moment (``loads``: the live nodes that take sessions)."""
    if not loads:
        return {}
    counts = dict(loads)
    placed: dict[str, str] = {}
    for session_id in sessions:
        node = min(counts, key=lambda n: (counts[n], n))
        placed[session_id] = node
        counts[node] += 1
    return placed


def within(loads: Mapping[str, int], node: str, fraction: float) -> bool:
    """Is ``node``'s load within ``fraction`` of the even share (a figure for benchmarks)?"""
    if node not in loads or not loads:
        return False
    share = sum(loads.values()) / len(loads)
    return abs(loads[node] - share) <= fraction * share


def _bounded(plan: Mapping[str, int], limit: int) -> dict[str, int]:
    """At most ``limit`` moves in all, the plan's first rows first."""
    kept: dict[str, int] = {}
    for node, count in plan.items():
        take = min(count, limit - sum(kept.values()))
        if take <= 0:
            break
        kept[node] = take
    return kept
