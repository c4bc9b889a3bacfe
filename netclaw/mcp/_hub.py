"""All configured MCP servers: the tool registry's source (a ``ToolSource``), and their
health for ``/healthz``, ``/metrics`` and ``doctor``. The SDK-bound sessions are in
:mod:`._server`, imported only when a server is configured (the SDK costs ~1 s of imports)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netclaw.config import McpConfig
from netclaw.errors import ToolError
from netclaw.mcp._types import McpServerStatus
from netclaw.tools import Tool

if TYPE_CHECKING:
    from netclaw.mcp._server import McpServer


class McpHub:
    """All configured servers: the registry's tool source, and their health."""

    def __init__(
        self,
        config: McpConfig,
        *,
        environ: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        roots: Sequence[Path] = (),
    ) -> None:
        """``data_dir``: where images from results and OAuth tokens are kept; ``roots``: the
        folders servers may work in (the workspace), offered to those whose ``roots`` is on."""
        enabled = {name: server for name, server in config.servers.items() if server.enabled}
        self.servers: list[McpServer] = []
        self._roots = list(roots)
        if enabled:
            from netclaw.mcp._server import McpServer, restart_policy

            policy = restart_policy(config.max_reconnect_delay_s)
            options: dict[str, Any] = {"policy": policy, "data_dir": data_dir}
            if environ is not None:
                options["environ"] = environ
            self.servers = [
                McpServer(
                    name,
                    server,
                    on_tools_changed=self._changed,
                    roots=_roots_of(server.roots, self.roots),
                    **options,
                )
                for name, server in sorted(enabled.items())
            ]
        self.version = 0  # bumped whenever any server's tools appear, change or vanish

    def roots(self) -> list[Path]:
        return list(self._roots)

    async def set_roots(self, roots: Sequence[Path]) -> None:
        """New roots; each connected server that takes roots is told they changed."""
        if list(roots) == self._roots:
            return
        self._roots = list(roots)
        await asyncio.gather(*(s.roots_changed() for s in self.servers), return_exceptions=True)

    def _changed(self) -> None:
        self.version += 1

    def server(self, name: str) -> McpServer | None:
        return next((s for s in self.servers if s.name == name), None)

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

    async def view(self, name: str, what: str) -> Any:
        """What operators see of server ``name``: ``server``, ``tools``, ``resources`` or
        ``prompts`` (:mod:`._views`). KeyError: no such server; ToolError: it is not up, or
        did not answer."""
        from netclaw.mcp import _views

        server = self.server(name)
        if server is None:
            raise KeyError(name)
        if what == "server":
            return _views.server_view(server)
        status = server.status()
        if status.state != "up":
            raise ToolError(
                f"MCP server {name} is {status.state}" + (f": {status.error}" if status.error else "")
            )
        views = {
            "tools": _views.tools_view,
            "resources": _views.resources_view,
            "prompts": _views.prompts_view,
        }
        return await views[what](server)


def _roots_of(
    configured: bool | Sequence[Path], workspace: Callable[[], list[Path]]
) -> Callable[[], Sequence[Path]] | None:
    """What a server is offered as its roots (``mcp.servers.<name>.roots``): the workspace,
    the folders it lists, or nothing (no roots capability at all)."""
    if configured is True:
        return workspace
    if configured is False:
        return None
    folders = list(configured)  # made absolute as the config was read
    return lambda: folders
