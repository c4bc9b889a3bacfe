"""The MCP client's value types that the rest of netclaw handles without loading the SDK:
what health shows of a server, and what a ``/prompt`` command became."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from netclaw.attachments import IncomingFile

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


@dataclass(frozen=True, slots=True)
class PromptExpansion:
    """The message a ``/prompt`` sends (``text`` + ``files``), or ``notice`` for the person
    instead (a listing, a missing argument, a failure)."""

    text: str | None = None
    files: tuple[IncomingFile, ...] = ()
    notice: str | None = None
