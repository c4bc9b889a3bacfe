"""The arithmetic of evening sessions out across nodes (netclaw/cluster/balance.py), and the
forwarding protocol's version rule (netclaw/cluster/protocol.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netclaw.cluster import protocol
from netclaw.cluster.balance import plan_moves, spread, within

loads_strategy = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(min_value=0, max_value=200), min_size=1
)


@given(loads=loads_strategy, limit=st.integers(min_value=0, max_value=50))
def test_a_plan_moves_only_a_nodes_own_excess_to_nodes_below_the_share(
    loads: dict[str, int], limit: int
) -> None:
    share = sum(loads.values()) / len(loads)
    for me in loads:
        plan = plan_moves(loads, me, limit)
        moved = sum(plan.values())
        assert moved <= limit
        assert me not in plan
        assert all(n > 0 for n in plan.values())
        assert all(loads[to] < share for to in plan), (loads, me, plan)
        if plan:
            assert max(abs(n - share) for n in loads.values()) > max(1.0, 0.1 * share)  # beyond the slack
            assert loads[me] - moved >= share - 1  # never below the share (rounded down)


@settings(max_examples=200)
@given(loads=loads_strategy)
def test_every_node_applying_its_plan_at_once_converges_without_moving_back_and_forth(
    loads: dict[str, int],
) -> None:
    """Each round every node plans on the same view and moves at most 8; after enough rounds
    every node is within the slack of the share, and from then on nothing moves."""
    current = dict(loads)
    total = sum(current.values())
    for _ in range(60):
        plans = {me: plan_moves(current, me, 8) for me in current}
        if not any(plans.values()):
            break
        for me, plan in plans.items():
            for to, n in plan.items():
                current[me] -= n
                current[to] += n
        assert sum(current.values()) == total and min(current.values()) >= 0
    else:
        pytest.fail(f"still moving after 60 rounds: {loads} -> {current}")
    share = total / len(current)
    assert all(abs(n - share) <= max(1.0, 0.1 * share) for n in current.values()), (loads, current)


def test_a_restarted_node_gets_its_share_from_the_others() -> None:
    loads = {"a": 0, "b": 45, "c": 45}
    assert plan_moves(loads, "b", 100) == {"a": 15}
    assert plan_moves(loads, "c", 100) == {"a": 15}
    assert plan_moves(loads, "a", 100) == {}
    assert plan_moves(loads, "b", 4) == {"a": 4}  # at a bounded rate
    assert plan_moves({"a": 20, "b": 35, "c": 35}, "b", 100, tolerance=0.4) == {}  # a wide slack
    assert plan_moves({"a": 30, "b": 31, "c": 29}, "b", 100) == {}  # within the slack
    assert plan_moves({"a": 5}, "a", 10) == {}  # alone
    assert plan_moves({"a": 3, "b": 0}, "x", 10) == {}  # not a node that takes sessions


def test_every_node_plans_the_same_pairing_and_carries_out_its_own_rows() -> None:
    assert plan_moves({"a": 40, "b": 0, "c": 20}, "a", 100) == {"b": 20}
    loads = {"a": 60, "b": 0, "c": 10, "d": 30}  # share 25: a gives 35, d gives 5
    plans = {me: plan_moves(loads, me, 100) for me in loads}
    assert plans == {"a": {"b": 25, "c": 10}, "b": {}, "c": {}, "d": {"c": 5}}
    few = {"a": 0, "b": 0, "c": 0, "d": 2, "e": 4}  # share 1.2: e keeps 2, d 1, the others get 1
    assert (plan_moves(few, "e", 10), plan_moves(few, "d", 10)) == ({"c": 1, "b": 1}, {"a": 1})


def test_a_draining_node_spreads_its_sessions_over_the_least_loaded_nodes() -> None:
    placed = spread(["s1", "s2", "s3", "s4", "s5"], {"a": 3, "b": 0})
    assert sorted(placed.values()).count("b") == 4 and sorted(placed.values()).count("a") == 1
    assert spread(["s1"], {}) == {}
    assert within({"a": 9, "b": 11}, "a", 0.2) and not within({"a": 5, "b": 15}, "a", 0.2)


def test_forwarding_versions_one_release_apart_understand_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    assert protocol.to_speak(1) == 1 and protocol.problem("1") is None and protocol.problem(None) is None
    assert "not 7" in str(protocol.problem("7")) and "a number" in str(protocol.problem("x"))
    # The next release speaks 2 and still reads 1: it writes 1 to an old node, 2 to a new one.
    monkeypatch.setattr(protocol, "CURRENT", 2)
    assert protocol.to_speak(1) == 1 and protocol.to_speak(2) == 2 and protocol.to_speak(3) == 2
    assert protocol.problem("1") is None and protocol.problem("2") is None
    # Two releases later version 1 is gone: a node that old is told to upgrade step by step.
    monkeypatch.setattr(protocol, "OLDEST", 2)
    assert "one release at a time" in str(protocol.problem("1"))
