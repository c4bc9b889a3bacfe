"""netclaw as an MCP client: every configured server supervised (:mod:`._server`), its
tools offered to the model (:mod:`._content`), its resources as tools
(:mod:`._resources`), its prompts as ``/prompt`` (:mod:`._prompts`), reached over stdio,
streamable HTTP or HTTP+SSE (:mod:`._transport`); :class:`McpHub` is the daemon's view
of all of them. Importing this package loads no part of the SDK (about a second): only a
daemon with servers configured pays for it."""

from __future__ import annotations

from netclaw.commands import PromptCommand
from netclaw.mcp._hub import McpHub
from netclaw.mcp._types import McpServerStatus, McpState, PromptExpansion

__all__ = ["McpHub", "McpServerStatus", "McpState", "PromptExpansion", "expand_prompt"]


async def expand_prompt(hub: McpHub, command: PromptCommand) -> PromptExpansion:
    """``/prompt``: see :mod:`._prompts` (imported here, on first use)."""
    from netclaw.mcp._prompts import expand

    return await expand(hub, command)
