"""``netclaw mcp …``: the MCP servers as the running daemon sees them, and OAuth logins.

- ``list``: every server — state, transport, tools, restarts, why it is down.
- ``tools NAME`` / ``resources NAME`` / ``prompts NAME``: what the server offers now, and
  for tools what the model sees of each (its name there, or why it is left out).
- ``login NAME``: the OAuth flow for an HTTP server with ``oauth`` (prints the address to
  open, waits for the browser to come back, stores the token privately), then tells the
  running daemon to connect again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from netclaw.cli._connect import client_for
from netclaw.cli._output import JSON_HELP
from netclaw.cli._status import mcp_line
from netclaw.config import load_settings
from netclaw.errors import ClientError, DaemonNotRunning


def add_parser(sub: Any, with_config: Any) -> None:
    mcp = with_config(sub.add_parser("mcp", help="MCP servers: list, tools, resources, prompts, login"))
    mcp.add_argument(
        "action", choices=["list", "tools", "resources", "prompts", "login"], help="what to show or do"
    )
    mcp.add_argument("name", nargs="?", help="the server (as named under mcp.servers)")
    mcp.add_argument("--json", action="store_true", help=JSON_HELP)
    mcp.set_defaults(func=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        print(f"netclaw: mcp {args.action} needs a server name", file=sys.stderr)
        return 2
    if args.action == "login":
        return _login(args)
    with client_for(args) as client:
        found = client.mcp_servers() if args.action == "list" else client.mcp_view(args.name, args.action)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return 0
    printers: dict[str, Callable[[Any], None]] = {
        "list": _print_servers,
        "tools": _print_tools,
        "resources": _print_resources,
        "prompts": _print_prompts,
    }
    printers[args.action](found)
    return 0


def _print_servers(servers: dict[str, Any]) -> None:
    if not servers:
        print("no MCP servers are configured")
    for name, status in sorted(servers.items()):
        caps = ", ".join(status.get("capabilities") or []) or "-"
        protocol = status.get("protocol") or "-"
        print(f"{name}: {mcp_line(status)} [protocol {protocol}; {caps}]")


def _print_tools(tools: list[dict[str, Any]]) -> None:
    if not tools:
        print("it lists no tools")
    for tool in tools:
        hints = [h for h in ("read_only", "destructive") if tool.get(h)]
        shown = tool["exposed_as"] or f"left out: {tool.get('skipped', '')}"
        print(
            f"{tool['name']} → {shown}"
            + (f" [{', '.join(h.replace('_', '-') for h in hints)}]" if hints else "")
        )
        if tool.get("description"):
            print(f"    {' '.join(tool['description'].split())[:200]}")


def _print_resources(found: dict[str, Any]) -> None:
    if not found["resources"] and not found["templates"]:
        print("it lists no resources")
    for r in found["resources"]:
        print(f"{r['uri']}  {r['name']}" + (f" ({r['mime_type']})" if r.get("mime_type") else ""))
    for t in found["templates"]:
        print(f"{t['uri_template']}  {t['name']} (template)")


def _print_prompts(prompts: list[dict[str, Any]]) -> None:
    if not prompts:
        print("it offers no prompts")
    for p in prompts:
        args = ", ".join(a["name"] + ("" if a["required"] else "?") for a in p["arguments"])
        print(f"{p['name']}({args})" + (f" — {p['description']}" if p.get("description") else ""))


def _login(args: argparse.Namespace) -> int:
    from netclaw.mcp import login

    settings = load_settings(args.config)
    config = settings.mcp.servers.get(args.name)
    if config is None:
        print(f"netclaw: no MCP server named {args.name!r} in the config", file=sys.stderr)
        return 1
    if config.url is None or config.oauth is None:
        print(
            f"netclaw: mcp.servers.{args.name} has no `oauth` section (OAuth is for HTTP servers)",
            file=sys.stderr,
        )
        return 1

    def show(url: str) -> None:
        print(
            f"Open this address in a browser and allow netclaw to use {args.name}:\n\n  {url}\n", flush=True
        )
        print("Waiting for the browser to come back…", flush=True)

    path, tools = asyncio.run(login(args.name, config, settings.data_dir, show=show))
    print(f"Logged in to {args.name} ({tools} tool(s)); the token is kept in {path}")
    try:
        with client_for(args) as client:
            client.mcp_reconnect(args.name)
        print("The running daemon is connecting with it now.")
    except DaemonNotRunning:
        print("The daemon is not running; it will use the token when it starts.")
    except ClientError as exc:
        print(f"The daemon could not be told to reconnect ({exc}); it will on its next attempt.")
    return 0
