"""``netclaw channels``: the channels installed (netclaw's own and other packages'), whether
the config enables each, and — when the daemon answers — what each is doing there.

A channel that cannot be loaded is listed with why (and the command exits 1); the daemon
would report it the same way and run the others."""

from __future__ import annotations

import argparse
import json
from typing import Any

from adapters import Installed, installed_channels
from netclaw.client import DaemonClient
from netclaw.config import Settings, channel_section, load_settings
from netclaw.errors import NetclawError


def cmd_channels(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    running, why_not = _daemon_view(settings)
    rows = [_row(installed, settings, running) for installed in installed_channels()]
    if args.json:
        print(json.dumps({"channels": rows, "daemon": why_not or "running"}, indent=2))
    else:
        _print(rows, why_not)
    broken = any(
        r["error"] or r["state"] in ("failed", "disabled") for r in rows if r["enabled"] or r["error"]
    )
    return 1 if broken else 0


def _daemon_view(settings: Settings) -> tuple[dict[str, dict[str, str]] | None, str]:
    """Each channel's state in the running daemon (``/healthz``), or why there is none."""
    try:
        with DaemonClient(settings, timeout=5.0) as client:
            adapters: dict[str, dict[str, str]] = client.health().get("adapters", {})
    except NetclawError as exc:
        return None, str(exc)
    return adapters, ""


def _row(
    installed: Installed, settings: Settings, running: dict[str, dict[str, str]] | None
) -> dict[str, Any]:
    section = channel_section(settings, installed.name)
    enabled = section is not None and section.active()
    channel = installed.channel
    row: dict[str, Any] = {
        "name": installed.name,
        "source": installed.source,
        "enabled": enabled,
        "state": None,
        "detail": "",
        "error": installed.error,
        "summary": channel.summary if channel is not None else "",
        "capabilities": channel.capabilities.summary() if channel is not None else "",
    }
    if running is not None:
        status = running.get(installed.name)
        if status is not None:
            row["state"], row["detail"] = status.get("state"), status.get("detail", "")
        elif enabled:
            row["state"], row["detail"] = "absent", "enabled in this config but not running in the daemon"
    return row


def _print(rows: list[dict[str, Any]], why_not: str) -> None:
    print(f"{len(rows)} channel(s) installed:")
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        if r["error"]:
            line = f"FAILED TO LOAD: {r['error']}"
        else:
            line = "enabled" if r["enabled"] else "not enabled"
            if r["state"] is not None:
                line += f", {r['state']}" + (f": {r['detail']}" if r["detail"] else "")
        print(f"  {r['name']:<{width}}  {line}  [{r['source']}]")
        if r["summary"]:
            print(f"  {'':<{width}}  {r['summary']} ({r['capabilities']})")
    if why_not:
        print(f"daemon: {why_not}")
