"""How resident sessions are spread over the nodes (pure functions, no I/O).

The rebalancer of every node runs :func:`plan_moves` on the same view of the registry
(live sessions per live node). Nothing moves while every node is within a slack of the
even share (10% of it, at least one session), so nothing moves back and forth over
rounding. Otherwise only the nodes above the share move sessions, and only their own,
down to the share rounded up; each sends the nodes below the share parts proportional
to their deficits. The excesses add up to (at most) the deficits, so the loads meet the
share without two nodes piling onto one target.

Invariants (tested): a node moves only when some node is off the share by more than
the slack; never more than ``limit``; never so many that it falls below the share
rounded down; only to nodes below the share; and never to itself. Every node applying
its plan at once converges, and then nothing moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

TOLERANCE = 0.1  # of the even share: loads this close to it are left alone


def plan_moves(loads: Mapping[str, int], me: str, limit: int, tolerance: float = TOLERANCE) -> dict[str, int]:
    """How many of ``me``'s sessions to move to which node so that ``loads`` (sessions
    per live node that takes sessions, ``me`` included) even out."""
    if me not in loads or len(loads) < 2 or limit <= 0:
        return {}
    share = sum(loads.values()) / len(loads)
    if max(abs(load - share) for load in loads.values()) <= max(1.0, tolerance * share):
        return {}
    give = min(limit, loads[me] - math.ceil(share))
    deficits = {node: share - load for node, load in loads.items() if node != me and load < share}
    if give <= 0 or not deficits:
        return {}
    return _apportion(give, deficits)


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


def _apportion(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` (largest remainder; ties by name)."""
    whole = sum(weights.values())
    exact = {node: total * w / whole for node, w in weights.items()}
    parts = {node: math.floor(x) for node, x in exact.items()}
    left = total - sum(parts.values())
    for node in sorted(exact, key=lambda n: (parts[n] - exact[n], n))[:left]:
        parts[node] += 1
    return {node: n for node, n in parts.items() if n > 0}
