"""netclaw as an MCP client: every configured server supervised (:mod:`._server`), its
tools offered to the model (:mod:`._content`), reached over stdio, streamable HTTP or
HTTP+SSE (:mod:`._transport`); :class:`McpHub` is the daemon's view of all of them."""

from netclaw.mcp._hub import McpHub
from netclaw.mcp._status import McpServerStatus, McpState

__all__ = ["McpHub", "McpServerStatus", "McpState"]
