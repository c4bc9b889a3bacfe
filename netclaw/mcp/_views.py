"""What operators see of one server (``netclaw mcp …``, ``GET /api/mcp/…``): plain JSON,
built from what the server answers now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netclaw.mcp._content import exposed_tools, hints_of

if TYPE_CHECKING:
    from netclaw.mcp._server import McpServer

CAPABILITIES = ("tools", "resources", "prompts", "completions", "logging")


def server_view(server: McpServer) -> dict[str, Any]:
    view = server.status().to_json()
    view["protocol"] = server.protocol_version
    view["capabilities"] = [c for c in CAPABILITIES if server.has(c)]
    return view


async def tools_view(server: McpServer) -> list[dict[str, Any]]:
    """Every tool the server lists, and what the model sees of it (or why nothing)."""
    listed = await server.list_tools_now()
    kept, skipped = exposed_tools(
        server.name, listed, server.config.tools, trust_annotations=server.config.trust_annotations
    )
    exposed = {t.remote_name: t.name for t in kept}
    rows = []
    for tool in listed:
        hints = hints_of(tool.annotations)
        row: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description or tool.title or "",
            "exposed_as": exposed.get(tool.name),
            "read_only": hints.read_only,
            "destructive": hints.destructive,
        }
        if tool.name in skipped:
            row["skipped"] = skipped[tool.name]
        elif tool.name not in exposed:
            row["skipped"] = "not in this server's `tools` allowlist"
        rows.append(row)
    return rows


async def resources_view(server: McpServer) -> dict[str, Any]:
    resources, templates = await server.list_resources() if server.has("resources") else ([], [])
    return {
        "resources": [
            {"uri": r.uri, "name": r.name, "mime_type": r.mime_type, "description": r.description}
            for r in resources
        ],
        "templates": [
            {
                "uri_template": t.uri_template,
                "name": t.name,
                "mime_type": t.mime_type,
                "description": t.description,
            }
            for t in templates
        ],
    }


async def prompts_view(server: McpServer) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "description": p.description,
            "arguments": [
                {"name": a.name, "required": bool(a.required), "description": a.description}
                for a in p.arguments or ()
            ],
        }
        for p in await server.list_prompts()
    ]
