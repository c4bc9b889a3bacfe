"""What ``/healthz``, ``/metrics``, ``netclaw status`` and ``doctor`` see of one MCP server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

McpState = Literal["starting", "up", "down", "stopped"]


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    name: str
    transport: str  # stdio, http (streamable HTTP) or sse (legacy HTTP+SSE)
    state: McpState
    tools: int
    restarts: int  # connections lost since start-up
    error: str | None  # why it is not up (the last failure), while not up
    since: float = 0.0  # when it entered this state (unix time)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "state": self.state,
            "transport": self.transport,
            "tools": self.tools,
            "restarts": self.restarts,
            "since": round(self.since, 3),
        }
        if self.error:
            body["detail"] = self.error
        return body
