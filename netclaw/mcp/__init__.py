"""netclaw as an MCP client: every configured server supervised (:mod:`._server`), its
tools offered to the model (:mod:`._content`), its resources as tools
(:mod:`._resources`), its prompts as ``/prompt`` (:mod:`._prompts`), reached over stdio,
streamable HTTP or HTTP+SSE (:mod:`._transport`); :class:`McpHub` is the daemon's view
of all of them. Importing this package loads no part of the SDK (about a second): only a
daemon with servers configured pays for it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from netclaw.commands import PromptCommand
from netclaw.config import McpServerConfig
from netclaw.mcp._hub import McpHub
from netclaw.mcp._types import McpServerStatus, McpState, PromptExpansion

__all__ = ["McpHub", "McpServerStatus", "McpState", "PromptExpansion", "expand_prompt", "login"]


async def expand_prompt(hub: McpHub, command: PromptCommand) -> PromptExpansion:
    """``/prompt``: see :mod:`._prompts` (imported here, on first use)."""
    from netclaw.mcp._prompts import expand

    return await expand(hub, command)


async def login(
    name: str,
    config: McpServerConfig,
    data_dir: Path,
    *,
    show: Callable[[str], None],
    environ: Mapping[str, str] = os.environ,
) -> tuple[Path, int]:
    """``netclaw mcp login NAME``: the OAuth flow once (``show`` gets the URL to open),
    then one connection with the new token. Where the token is kept, and how many tools
    the server lists."""
    from mcp import Client

    from netclaw.mcp._oauth import login as oauth_login
    from netclaw.mcp._transport import open_transport

    tools = 0

    async def connect(auth: object) -> int:
        nonlocal tools
        client = Client(open_transport(name, config, environ, auth), cache=None, mode=config.protocol)  # type: ignore[arg-type]
        async with client:
            tools = len((await client.list_tools()).tools)
        return tools

    path = await oauth_login(name, config, data_dir, environ, show=show, connect=connect)
    return path, tools
