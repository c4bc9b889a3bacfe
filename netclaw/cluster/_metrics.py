"""The cluster's figures on ``/metrics``: what forwarding, holding, leases, drains and moves
did on this node (counted as they happen, turned into families when scraped)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from netclaw.cluster import protocol
from netclaw.cluster._forwarder import ForwardCounts
from netclaw.cluster._routing import HoldCounts
from netclaw.persistence import Peer


class LeaseCountsView(Protocol):
    """What the lease store counts (:class:`netclaw.persistence.postgres.LeaseCounts`)."""

    renewals: int
    renewal_failures: int
    lost: int
    taken_after_expiry: int
    taken_after_release: int
    handed_on: int


@dataclass(slots=True)
class NodeCounts:
    drains: int = 0
    moves: Counter[str] = field(default_factory=Counter)  # by reason: api, drain, rebalance
    moves_failed: int = 0


def _counter(name: str, doc: str, values: dict[tuple[str, ...], float], labels: list[str]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in values.items():
        family.add_metric(list(key), value)
    return family


def cluster_families(
    *,
    leases: LeaseCountsView,
    forwards: ForwardCounts,
    holds: HoldCounts,
    node: NodeCounts,
    peers: list[Peer],
    held: int,
    version: str | None,
    draining: bool,
) -> Iterator[Metric]:
    """The families, every one on every scrape (a counter at 0 included)."""
    counter = _counter
    yield counter(
        "netclaw_cluster_forwards",
        "Requests sent to the node owning their session",
        {("api",): forwards.proxied, ("input",): forwards.submitted},
        ["kind"],
    )
    yield counter(
        "netclaw_cluster_forward_failures",
        "Forwarded requests the other node did not take",
        {("unreachable",): forwards.unreachable, ("moved",): forwards.moved},
        ["why"],
    )
    yield counter(
        "netclaw_cluster_held_requests",
        "Requests held for a session's next node, by how they ended",
        {("served",): holds.held, ("gave_up",): holds.gave_up},
        ["outcome"],
    )
    yield counter("netclaw_cluster_held_seconds", "Time requests spent held", {(): holds.held_seconds}, [])
    yield counter(
        "netclaw_cluster_takeovers",
        "Session leases this node took from another node",
        {("expired",): leases.taken_after_expiry, ("released",): leases.taken_after_release},
        ["after"],
    )
    yield counter(
        "netclaw_cluster_lease_renewals",
        "Lease renewal rounds, by outcome",
        {("ok",): leases.renewals, ("failed",): leases.renewal_failures},
        ["outcome"],
    )
    yield counter(
        "netclaw_cluster_leases_lost", "Leases found taken over at a renewal", {(): leases.lost}, []
    )
    yield counter("netclaw_cluster_drains", "Drains of this node", {(): node.drains}, [])
    moves: dict[tuple[str, ...], float] = {(reason,): float(n) for reason, n in node.moves.items()}
    moves[("failed",)] = node.moves_failed
    yield counter("netclaw_cluster_moves", "Sessions this node handed off, by reason", moves, ["reason"])
    live = GaugeMetricFamily("netclaw_cluster_nodes", "Live nodes in the registry", labels=["state"])
    live.add_metric(["active"], sum(1 for p in peers if not p.draining))
    live.add_metric(["draining"], sum(1 for p in peers if p.draining))
    yield live
    leases_held = GaugeMetricFamily("netclaw_cluster_leases_held", "Session leases this node holds")
    leases_held.add_metric([], held)
    yield leases_held
    info = GaugeMetricFamily("netclaw_node_info", "This node", labels=["version", "protocol", "state"])
    info.add_metric(
        [version or "", str(protocol.CURRENT), "draining" if draining else "active"],
        1,
    )
    yield info
