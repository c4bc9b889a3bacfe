"""``netclaw doctor``: is the install, the config, the database, the provider and each
channel fit to run?"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import time
from typing import Any

from netclaw import __version__
from netclaw.config import Settings, find_config_path, load_settings
from netclaw.errors import NetclawError


def cmd_doctor(args: argparse.Namespace) -> int:
    checks: list[dict[str, Any]] = []
    as_json = bool(getattr(args, "json", False))

    def report(good: bool, what: str, detail: str) -> None:
        checks.append({"check": what, "ok": good, "detail": detail})
        if not as_json:
            print(f"[{'ok' if good else 'FAIL'}] {what}: {detail}")

    path = find_config_path(args.config)
    try:
        settings = load_settings(args.config)
    except NetclawError as exc:
        report(False, "config", str(exc))
        return _finish(checks, None, as_json)
    report(True, "config", str(path) if path else "no file; built-in defaults")
    _doctor_install(report)
    _doctor_database(settings, report)
    _doctor_provider(settings, report)
    _doctor_adapters(settings, report)
    from netclaw.client import DaemonClient
    from netclaw.errors import ClientError

    daemon: dict[str, Any]
    health: dict[str, Any] | None = None
    with DaemonClient(settings, timeout=3) as client:
        try:
            health = client.health()
            daemon = {"running": True, "url": client.base_url, "health": health}
            if not as_json:
                print(
                    f"[info] daemon: running at {client.base_url}, {health['sessions']['resident']} resident"
                )
        except ClientError:
            daemon = {"running": False, "url": client.base_url}
            if not as_json:
                print(f"[info] daemon: not running at {client.base_url}")
    _doctor_mcp(settings, report, health)
    return _finish(checks, daemon, as_json)


def _doctor_mcp(settings: Settings, report: Any, health: dict[str, Any] | None) -> None:
    """Each MCP server: as the running daemon sees it, or else by connecting once now."""
    servers = {name: c for name, c in settings.mcp.servers.items() if c.enabled}
    if not servers:
        return
    if health is not None:
        for name in servers:
            status = health.get("mcp", {}).get(name, {"state": "unknown"})
            up = status["state"] == "up"
            detail = f"{status.get('tools', 0)} tool(s)" if up else status.get("detail", status["state"])
            report(up, f"mcp {name}", f"{detail} (as the running daemon sees it)")
        return
    from netclaw.tools import McpHub

    async def probe() -> dict[str, Any]:
        hub = McpHub(servers)
        try:
            await hub.start(wait_s=20.0)
            return hub.statuses()
        finally:
            await hub.stop()

    for name, status in asyncio.run(probe()).items():
        up = status.state == "up"
        report(up, f"mcp {name}", f"{status.tools} tool(s)" if up else (status.error or status.state))


def _finish(checks: list[dict[str, Any]], daemon: dict[str, Any] | None, as_json: bool) -> int:
    ok = all(c["ok"] for c in checks)
    if as_json:
        print(json.dumps({"ok": ok, "checks": checks, "daemon": daemon}, indent=2))
    return 0 if ok else 1


def _doctor_install(report: Any) -> bool:
    from netclaw.persistence import load_migrations

    try:
        migrations = load_migrations()
    except NetclawError as exc:
        report(False, "install", str(exc))
        return False
    report(True, "install", f"netclaw {__version__}, {len(migrations)} migration(s)")
    return True


def _doctor_database(settings: Settings, report: Any) -> bool:
    db = settings.database_path
    if not db.exists():
        parent = settings.data_dir
        while not parent.exists():
            parent = parent.parent
        writable = os.access(parent, os.W_OK)
        report(
            writable,
            "database",
            f"{db} does not exist yet ({'will be created' if writable else 'cannot be created: not writable'})",
        )
        return writable
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        report(False, "database", f"{db}: {exc}")
        return False
    report(True, "database", f"{db} (schema {version}, {mode}, {sessions} session(s))")
    return True


def _doctor_adapters(settings: Settings, report: Any) -> bool:
    from adapters import build_adapters

    good = True
    # check() validates the environment only; no gateway or connection is needed for it.
    for adapter in build_adapters(settings, None):  # type: ignore[arg-type]
        try:
            adapter.check()
        except NetclawError as exc:
            report(False, f"adapter {adapter.name}", str(exc))
            good = False
        else:
            report(True, f"adapter {adapter.name}", "configured")
    return good


def _doctor_provider(settings: Settings, report: Any) -> bool:
    from netclaw.providers import make_provider

    main = settings.models.main
    name = main.provider
    try:
        provider = make_provider(name, settings.providers[name])
    except NetclawError as exc:
        report(False, f"provider {name}", str(exc))
        return False

    async def probe() -> str:
        try:
            return await provider.check()
        finally:
            await provider.aclose()

    started = time.perf_counter()
    try:
        detail = asyncio.run(probe())
    except NetclawError as exc:
        report(False, f"provider {name}", str(exc))
        return False
    elapsed = (time.perf_counter() - started) * 1000
    report(
        True,
        f"provider {name}",
        f"{settings.providers[name].base_url} {detail} ({elapsed:.0f} ms); model {main.model}",
    )
    return True
