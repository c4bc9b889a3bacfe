"""Several nodes on one database: where each session's requests are served, and how
sessions move between nodes.

- :mod:`.protocol` — what nodes say to each other, versioned for rolling upgrades.
- :mod:`._forwarder` — this node's HTTP client to the others (proxy, submit), with
  bounded timeouts; it says whether a request it could not deliver may go elsewhere.
- :mod:`._routing` — here, the owner, or (draining) a peer; requests for a session
  whose node does not answer are held until its lease moves, not answered 503 at once.
- :mod:`.balance` — the pure arithmetic of evening sessions out.

This node as a member (the registry view, drain, move, rebalance, health and metrics) is
:mod:`netclaw.cluster.membership`, above the session manager it steers; the cluster's HTTP routes
and the middleware that forwards requests are :mod:`netclaw.http.cluster`.
- :mod:`._metrics` — the cluster's counters on ``/metrics``.
- :mod:`._rescue` — sessions a dead node left owing replies, recovered by the others.

Leases are the truth (:mod:`netclaw.persistence.postgres._leases`): everything here
only decides where to send a request and when a session should leave.
"""

from aiohttp import web

from netclaw.cluster import protocol
from netclaw.cluster._forwarder import Forwarder, Unreachable, keep_body, kept_body
from netclaw.cluster._metrics import LeaseCountsView, NodeCounts, cluster_families
from netclaw.cluster._rescue import rescue_orphans
from netclaw.cluster._routing import LocalSessions, Routing, unavailable
from netclaw.cluster.protocol import FORWARDED_BY, SUBMIT_PATH

__all__ = [
    "FORWARDED_BY",
    "SUBMIT_PATH",
    "Forwarder",
    "LeaseCountsView",
    "LocalSessions",
    "NodeCounts",
    "Routing",
    "Unreachable",
    "cluster_families",
    "forwarded",
    "keep_body",
    "kept_body",
    "protocol",
    "rescue_orphans",
    "unavailable",
]


def forwarded(request: web.Request) -> bool:
    """Whether another node forwarded this request here (it is then served here)."""
    return FORWARDED_BY in request.headers
