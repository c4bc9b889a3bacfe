"""The control API's MCP routes (behind the same bearer token as ``/api/…``), for
``netclaw mcp …`` and operators:

- ``GET /api/mcp`` — every server: state, transport, tools, restarts, detail, protocol,
  capabilities.
- ``GET /api/mcp/{name}/tools`` — what the server lists, and what the model sees of each
  (its name there, or why it is left out); ``…/resources``; ``…/prompts``.
- ``POST /api/mcp/{name}/reconnect`` — connect again now (``netclaw mcp login`` calls it).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from netclaw.errors import ApiError, ToolError
from netclaw.mcp import McpHub


def mcp_routes(hub: McpHub | None) -> list[web.RouteDef]:
    async def servers(request: web.Request) -> web.Response:
        found = {} if hub is None else {s.name: await hub.view(s.name, "server") for s in hub.servers}
        return web.json_response({"servers": found})

    async def view(request: web.Request) -> web.Response:
        return web.json_response(await _view(hub, request.match_info["name"], request.match_info["what"]))

    async def reconnect(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        server = hub.server(name) if hub is not None else None
        if server is None:
            raise _unknown(name)
        server.reconnect_now()
        return web.json_response({"server": name, "reconnecting": True})

    return [
        web.get("/api/mcp", servers),
        web.get("/api/mcp/{name}/{what:tools|resources|prompts}", view),
        web.post("/api/mcp/{name}/reconnect", reconnect),
    ]


async def _view(hub: McpHub | None, name: str, what: str) -> Any:
    if hub is None:
        raise _unknown(name)
    try:
        return await hub.view(name, what)
    except KeyError as exc:
        raise _unknown(name) from exc
    except ToolError as exc:
        raise ApiError(503, "mcp_server_unavailable", str(exc)) from exc


def _unknown(name: str) -> ApiError:
    return ApiError(404, "unknown_mcp_server", f"no MCP server named {name!r} is configured (and enabled)")
