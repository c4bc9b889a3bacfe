"""What the daemon says about itself: ``/healthz`` beyond the sessions, the ``/metrics``
gauges read when scraped, and systemd's ``STATUS=`` line. Read on the loop, where the
parts they look at live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.channels import Channels
from netclaw.cluster.membership import ClusterNode
from netclaw.mcp import McpHub
from netclaw.persistence import Journal, MemoryStore
from netclaw.process.metrics import GaugeMetricFamily, gauge
from netclaw.sessions import SessionManager
from netclaw.skills import LiveSkills
from netclaw.workers.provider_health import ProviderHealth


@dataclass(frozen=True)
class Looked:
    """The parts a report looks at, as the daemon holds them now (``None``: not started)."""

    channels: Channels
    provider_health: ProviderHealth
    skills: LiveSkills
    journal: Journal | None
    manager: SessionManager | None
    cluster: ClusterNode | None
    mcp: McpHub | None
    memory: MemoryStore | None = None


def health(parts: Looked) -> dict[str, Any]:
    """``/healthz`` beyond the sessions: channels and MCP servers, and what is down."""
    adapters = parts.channels.statuses()
    problems = [
        f"adapter {name} is {status['state']}" + (f": {status['detail']}" if status.get("detail") else "")
        for name, status in adapters.items()
        if status["state"] not in ("running", "standby")  # standby: another node runs it
    ]
    journal = parts.journal.problem() if parts.journal is not None else "the journal is not open"
    if journal is not None:
        problems.insert(0, journal)
    if (provider := parts.provider_health.problem()) is not None:
        problems.append(provider)
    body: dict[str, Any] = {"adapters": adapters, "provider": parts.provider_health.to_json()}
    if parts.manager is not None and parts.manager.compaction_failing:
        # Not a problem of the daemon (those sessions trim instead), but worth a look.
        body["compaction_failing"] = dict(sorted(parts.manager.compaction_failing.items()))
    if parts.cluster is not None:
        body["cluster"] = parts.cluster.health()
    if parts.mcp is not None and parts.mcp.servers:
        body["mcp"] = {name: status.to_json() for name, status in parts.mcp.statuses().items()}
        problems += parts.mcp.problems()
    if parts.memory is not None:
        # Recall by meaning: "ready", "re-embedding (N to go)" (those found by keywords
        # meanwhile) or "off" (keywords only).
        embedding = parts.memory.embedding_status()
        body["memory"] = {"embeddings": embedding.model or "none", "recall": embedding.state}
    skills = parts.skills.current
    body["skills"] = {
        "loaded": skills.names,
        "skipped": [problem.to_json(full_path=False) for problem in skills.problems],
    }
    if problems:
        body["problems"] = problems
    return body


def scraped_gauges(parts: Looked) -> list[GaugeMetricFamily]:
    """``/metrics`` gauges read when scraped."""
    manager = parts.manager
    adapters: dict[tuple[str, ...], float] = {
        (name,): float(s["state"] == "running") for name, s in parts.channels.statuses().items()
    }
    servers = parts.mcp.statuses() if parts.mcp is not None else {}
    return [
        gauge(
            "netclaw_sessions_resident",
            "Sessions with a live actor",
            {(): len(manager.resident()) if manager is not None else 0},
        ),
        gauge(
            "netclaw_sessions_compaction_failing",
            "Sessions whose last summaries failed (they trim instead)",
            {(): len(manager.compaction_failing) if manager is not None else 0},
        ),
        gauge("netclaw_adapter_up", "1 when the channel is running", adapters, ("adapter",)),
        gauge(
            "netclaw_mcp_server_up",
            "1 when the MCP server answers",
            {(name,): float(status.state == "up") for name, status in servers.items()},
            ("server",),
        ),
    ]


def status_line(parts: Looked) -> str:
    """systemd's STATUS=: resident sessions and each channel's state."""
    resident = len(parts.manager.resident()) if parts.manager is not None else 0
    statuses = sorted(parts.channels.statuses().items())
    channels = ", ".join(f"{name} {s['state']}" for name, s in statuses)
    return f"{resident} session(s) resident" + (f"; {channels}" if channels else "")
