"""The registry's view of the configured MCP servers (a ``ToolSource``) and their status
for ``/healthz``, ``/metrics`` and ``doctor``. The SDK-bound sessions are in
:mod:`._mcp`, imported only when a server is configured."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from netclaw.config import McpServerConfig
from netclaw.tools._registry import Tool

if TYPE_CHECKING:
    from netclaw.tools._mcp import McpServer

McpState = Literal["starting", "up", "down", "stopped"]


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    name: str
    transport: Literal["stdio", "http"]
    state: McpState
    tools: int
    restarts: int  # connections lost or failed since start-up
    error: str | None  # the last failure, while not up

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "state": self.state,
            "transport": self.transport,
            "tools": self.tools,
            "restarts": self.restarts,
        }
        if self.error:
            body["detail"] = self.error
        return body


class McpHub:
    """All configured servers: the registry's tool source, and their health."""

    def __init__(self, servers: Mapping[str, McpServerConfig], **options: Any) -> None:
        enabled = {name: config for name, config in servers.items() if config.enabled}
        if enabled:  # the SDK costs ~1 s of imports: only a daemon with servers pays it
            from netclaw.tools._mcp import McpServer
        self.servers: list[McpServer] = [
            McpServer(name, config, on_tools_changed=self._changed, **options)
            for name, config in sorted(enabled.items())
        ]
        self.version = 0  # bumped whenever any server's tools appear, change or vanish

    def _changed(self) -> None:
        self.version += 1

    def tools(self) -> Iterable[Tool]:
        for server in self.servers:
            yield from server.tools()

    async def start(self, wait_s: float = 15.0) -> None:
        """Start every server and wait (up to ``wait_s``) for each first attempt, so the
        first turns see the tools of servers that start promptly."""
        for server in self.servers:
            server.start()
        if self.servers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await asyncio.gather(*(s.first_attempt() for s in self.servers))

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers), return_exceptions=True)

    def statuses(self) -> dict[str, McpServerStatus]:
        return {s.name: s.status() for s in self.servers}

    def problems(self) -> list[str]:
        return [
            f"MCP server {s.name} is {s.state}" + (f": {s.error}" if s.error else "")
            for s in (server.status() for server in self.servers)
            if s.state != "up"
        ]
