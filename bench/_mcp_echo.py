"""A minimal MCP server for bench/tools.py: one ``echo`` tool over stdio (the real SDK)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-echo")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    server.run("stdio")
