"""``netclaw doctor``: is the install, the config, the database, the provider and each
channel fit to run?

Beside the system service (``sudo netclaw doctor`` reading /etc/netclaw/netclaw.json), the
daemon is the service's user, not the one running doctor: the files and the shell sandbox
are checked for that user (:func:`netclaw.process.system.service_user`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from netclaw import __version__
from netclaw.config import Settings, find_config_path, load_settings
from netclaw.errors import NetclawError
from netclaw.process.system import SYSTEM_UNIT, ServiceUser, service_user
from netclaw.process.traces import INSTALL_HINT

if TYPE_CHECKING:
    from netclaw.gateway import ChatInput

PROBE_TIMEOUT_S = 20.0


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
    service = service_user(path, settings.data_dir)
    _doctor_install(report)
    _doctor_database(settings, report)
    _doctor_files(settings, report, service)
    _doctor_workspace(settings, path, report)
    _doctor_provider(settings, report)
    _doctor_speech(settings, report)
    _doctor_adapters(settings, report)
    _doctor_sandbox(settings, report, service)
    _doctor_skills(settings, report)
    _doctor_web_search(settings, report)
    _doctor_traces(settings, report)
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
    from netclaw.config import McpConfig
    from netclaw.mcp import McpHub

    async def probe() -> dict[str, Any]:
        hub = McpHub(
            McpConfig(servers=servers, max_reconnect_delay_s=settings.mcp.max_reconnect_delay_s),
            data_dir=settings.data_dir,
        )
        try:
            await hub.start(wait_s=20.0)
            return hub.statuses()
        finally:
            await hub.stop()

    for name, status in asyncio.run(probe()).items():
        up = status.state == "up"
        report(up, f"mcp {name}", f"{status.tools} tool(s)" if up else (status.error or status.state))


def _doctor_workspace(settings: Settings, config_file: Path | None, report: Any) -> None:
    """With the file or shell tools on: nothing of the daemon's inside the workspace (the
    same check as start-up)."""
    config = settings.tools
    if not (config.files.enabled or config.shell.enabled):
        return
    from netclaw.tools import guard_workspace

    try:
        guard_workspace(settings, config_file)
    except NetclawError as exc:
        report(False, "workspace", str(exc))
        return
    report(True, "workspace", f"{config.workspace_dir} holds none of the daemon's files")


def _doctor_sandbox(settings: Settings, report: Any, service: ServiceUser | None = None) -> None:
    """With the shell tool on: does its sandbox start here (the same check as start-up)? For
    the system ``service``: as the service starts it (its user, inside it), when it runs."""
    shell = settings.tools.shell
    if not shell.enabled:
        return
    from netclaw.tools import runner_for, why_not_tried

    try:
        runner = runner_for(shell, settings.tools.workspace_dir, hidden=(settings.data_dir,), service=service)
    except NetclawError as exc:
        report(False, "shell sandbox", str(exc))
        return
    if runner.name != "bwrap":
        report(True, "shell sandbox", "off (sandbox: none): commands run on the host")
    elif service is None:
        report(True, "shell sandbox", "bubblewrap starts a sandbox")
    elif (untried := why_not_tried(service)) is None:
        report(
            True, "shell sandbox", f"bubblewrap starts a sandbox in the service, as its user {service.name}"
        )
    else:
        report(
            True,
            "shell sandbox",
            f"bubblewrap is installed; the sandbox is not tried ({untried}): the service tries "
            "it as it starts, and a sandbox that cannot start stops it with the fix in "
            f"`journalctl -u {SYSTEM_UNIT} -p err`",
        )


def _doctor_skills(settings: Settings, report: Any) -> None:
    """The skill folders, read as the daemon would (a skipped skill fails the check)."""
    from netclaw.skills import load_skills, skill_dirs

    if not skill_dirs(settings.skills):
        return
    skills = load_skills(settings.skills)
    loaded = f"{len(skills.skills)} loaded" + (f" ({', '.join(skills.names)})" if skills.skills else "")
    if skills.problems:
        report(False, "skills", f"{loaded}; skipped: " + "; ".join(map(str, skills.problems)))
    else:
        report(True, "skills", loaded)


def _doctor_web_search(settings: Settings, report: Any) -> None:
    """With web_search on: its backend's key is set (no search is spent on a check)."""
    search = settings.tools.web_search
    if not search.enabled:
        return
    from netclaw.config.credentials import where_to_put

    where = search.url or f"its public API ({search.backend})"
    try:
        key = search.api_key()
    except NetclawError as exc:
        report(False, "web search", str(exc))
        return
    if search.api_key_env and key is None:
        report(False, "web search", f"{search.backend}: {where_to_put(search.api_key_env)}")
        return
    report(True, "web search", f"{search.backend} at {where}")


def _doctor_traces(settings: Settings, report: Any) -> None:
    """With telemetry.traces on: OpenTelemetry installed, and the collector answering an
    empty export (no span is sent)."""
    config = settings.telemetry
    if not config.traces:
        return
    try:
        import netclaw.process.otel  # noqa: F401 - what start-up imports with traces on
    except ImportError as exc:
        report(False, "traces", f"OpenTelemetry is not installed ({exc.name} is missing): {INSTALL_HINT}")
        return
    import httpx

    url = config.traces_url()
    try:
        answer = httpx.post(url, content=b"", headers={"Content-Type": "application/x-protobuf"}, timeout=3)
    except httpx.HTTPError as exc:
        report(
            False, "traces", f"no collector answers at {url} ({exc}); turns go on, their spans are dropped"
        )
        return
    if answer.status_code >= 300:
        report(False, "traces", f"the collector at {url} answered HTTP {answer.status_code}")
        return
    content = ", with message and tool content" if config.capture_content else ""
    report(True, "traces", f"exported over OTLP/HTTP to {url}{content}")


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
    """Each enabled channel: configured (``check``), then its credentials tried for real
    (Slack ``auth.test``, a Discord login) without serving."""
    from adapters import build_adapters

    # Checking and probing read only the gateway's settings; nothing is served.
    adapters = build_adapters(settings, cast("ChatInput", _SettingsOnly(settings)))

    async def probe_all() -> list[tuple[str, bool, str]]:
        found = []
        for adapter in adapters:
            try:
                adapter.check()
                detail = await asyncio.wait_for(adapter.probe(), PROBE_TIMEOUT_S)
            except TimeoutError:
                found.append((adapter.name, False, f"no answer within {PROBE_TIMEOUT_S:g}s"))
            except NetclawError as exc:
                found.append((adapter.name, False, str(exc)))
            else:
                found.append((adapter.name, True, detail or "configured"))
        return found

    results = asyncio.run(probe_all()) if adapters else []
    for name, good, detail in results:
        report(good, f"adapter {name}", detail)
    return all(good for _, good, _ in results)


class _SettingsOnly:
    """What an adapter's ``check`` and ``probe`` use of the gateway: its settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings


def _doctor_provider(settings: Settings, report: Any) -> bool:
    """Every model's provider (main, compaction, fallbacks, the ones people may choose):
    its key set, the server reachable, and the model served (where it lists its models).
    A provider and model named by several entries is checked once."""
    good = True
    checked: set[tuple[str, str]] = set()
    for model in settings.models.named().values():
        if (model.provider, model.model) in checked:
            continue
        checked.add((model.provider, model.model))
        good = _check_provider(settings, model.provider, model.model, report) and good
    return good


def _check_provider(settings: Settings, name: str, model: str, report: Any) -> bool:
    from netclaw.providers import make_provider

    config = settings.providers[name]
    what = f"provider {name}"
    if missing := config.missing_key():
        report(False, what, missing)
        return False
    if config.type == "anthropic" and not config.api_key_env:
        report(False, what, f"providers.{name}.api_key_env is not set; Anthropic needs an API key")
        return False
    try:
        provider = make_provider(name, config)
    except NetclawError as exc:
        report(False, what, str(exc))
        return False

    async def probe() -> str:
        try:
            return await provider.check(model)
        finally:
            await provider.aclose()

    started = time.perf_counter()
    try:
        detail = asyncio.run(probe())
    except NetclawError as exc:
        report(False, what, str(exc))
        return False
    elapsed = (time.perf_counter() - started) * 1000
    where = "" if config.type == "demo" else f"{config.base_url} "  # the demo has no server
    report(True, what, f"{where}{detail} ({elapsed:.0f} ms); model {model}")
    return True


def _doctor_speech(settings: Settings, report: Any) -> bool:
    """Each speech endpoint (``speech.transcription``, ``speech.synthesis`` and their
    fallbacks): its provider's key set, the server reachable, the model served where the
    server lists its models. Nothing is transcribed or spoken (nothing is billed)."""
    from netclaw.errors import ModelNotServed
    from netclaw.providers import make_provider

    good = True
    for where, endpoint in settings.speech.endpoints():
        config = settings.providers[endpoint.provider]
        what = f"{where} ({endpoint.provider}/{endpoint.model})"
        if missing := config.missing_key():
            report(False, what, missing)
            good = False
            continue
        provider = make_provider(endpoint.provider, config)

        async def probe(provider: Any = provider, model: str = endpoint.model) -> str:
            try:
                answer: str = await provider.check(model)
                return answer
            finally:
                await provider.aclose()

        try:
            detail = asyncio.run(probe())
        except ModelNotServed as exc:
            shown = ", ".join(exc.available[:10]) or "none"
            report(
                False,
                what,
                f"{config.base_url} does not list the model {endpoint.model!r} (it has: {shown}); fix {where}.model",
            )
            good = False
            continue
        except NetclawError as exc:
            report(False, what, str(exc))
            good = False
            continue
        report(True, what, f"{config.base_url} {detail}")
    return good


def _doctor_files(settings: Settings, report: Any, service: ServiceUser | None = None) -> bool:
    """Conversations live in data_dir: it should be 0700 and its files 0600, owned by the
    daemon's user — the system ``service``'s, else whoever runs doctor (beside their own
    ``netclaw run``)."""
    data = settings.data_dir
    if not data.exists():
        return True
    owner = service.uid if service is not None else os.getuid()
    loose, foreign = [], []
    for path in (
        data,
        *(data / n for n in ("netclaw.db", "netclaw.db-wal", "control.token", "netclaw.lock")),
    ):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if stat.S_IMODE(st.st_mode) & 0o077:
            loose.append(f"{path.name or path} is {stat.S_IMODE(st.st_mode):o}")
        if st.st_uid != owner:
            foreign.append(f"{path.name or path} belongs to uid {st.st_uid}")
    if service is not None:
        whose = f"the service's user {service.name} (uid {service.uid}, from {service.found})"
        chown = f"chown -R {_owner_spec(service.uid, service.gid)} {data.resolve()}"
    else:
        whose = f"this user (uid {owner})"
        chown = f"sudo chown -R {_owner_spec(owner, os.getgid())} {data.resolve()}"
    problems = []
    if loose:
        problems.append(
            f"readable beyond their owner: {', '.join(loose)}; fix with chmod 700 {data} && chmod 600 {data}/*"
        )
    if foreign:
        problems.append(f"not owned by {whose}: {', '.join(foreign)}; fix with {chown}")
    if problems:
        report(False, "files", "; and ".join(problems))
        return False
    by = f", owned by the service's user {service.name}" if service is not None else ""
    report(True, "files", f"{data} is private (0700, files 0600{by})")
    return True


def _owner_spec(uid: int, gid: int) -> str:
    """``user:group`` for chown, by name where the names are known here."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return f"{user}:{group}"
