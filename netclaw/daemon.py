"""Wiring: start-up in a fixed order, shutdown in reverse in one ``finally``.

journal → sessions → (adapters) → API. Then wait for SIGTERM/SIGINT; SIGHUP
reloads the config. After shutdown, check that no actor survived.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pykka
from aiohttp import web

from adapters import Adapter, AdapterStatus, build_adapters
from netclaw.api import Api
from netclaw.config import LiveSettings, Settings, load_settings
from netclaw.control_token import load_control_token
from netclaw.errors import ConfigError, DaemonError
from netclaw.gateway import Gateway
from netclaw.history import preload_encoding
from netclaw.metrics import GaugeMetricFamily, Metrics, gauge
from netclaw.persistence import (
    Manifest,
    SqliteJournal,
    SqliteMemoryStore,
    SqliteReminderStore,
    prepare_database,
    save_manifest,
    take_manifest,
)
from netclaw.providers import Provider, make_provider
from netclaw.runtime import IoLoop
from netclaw.scheduler import Clock, Scheduler
from netclaw.sessions import SessionActor, SessionDeps, SessionManager
from netclaw.tools import McpHub, ToolRegistry, build_registry, reminder_tools

log = logging.getLogger(__name__)

ACTOR_STOP_TIMEOUT_S = 10.0
WARM_CONCURRENCY = 16  # sessions recovering at once at start-up
WARM_TIMEOUT_S = 120.0
MCP_START_WAIT_S = 15.0  # how long start-up waits for MCP servers' first connection


def sd_notify(state: str) -> None:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("sd_notify(%s) failed: %s", state, exc)


class DataDirLock:
    """One daemon per data_dir: two writers would corrupt the journal's sequence."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "netclaw.lock"
        self._fh: TextIO | None = None

    def acquire(self) -> None:
        if not self.path.parent.exists():  # a new data_dir is private (conversations live here)
            self.path.parent.mkdir(mode=0o700, parents=True)
        fh = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            raise DaemonError(
                f"another netclaw daemon is already using {self.path.parent} (lock {self.path})"
            ) from exc
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


class Daemon:
    """The running netclaw. ``start()``/``stop()`` for embedding (tests, benchmarks);
    ``run_forever()`` for the command line."""

    def __init__(
        self,
        settings: Settings,
        *,
        config_path: str | None = None,
        provider_factory: Callable[[Settings], Provider] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.live = LiveSettings(settings)
        self.config_path = config_path
        self._provider_factory = provider_factory or _default_provider
        self._clock = clock  # the scheduler's (tests inject one that does not sleep)
        self._lock = DataDirLock(settings.data_dir)
        self.io: IoLoop | None = None
        self.journal: SqliteJournal | None = None
        self.provider: Provider | None = None
        self.compaction_provider: Provider | None = None
        self.memory: SqliteMemoryStore | None = None
        self.tools: ToolRegistry | None = None
        self.mcp: McpHub | None = None
        self.metrics = Metrics()
        self.reminders: SqliteReminderStore | None = None
        self.scheduler: Scheduler | None = None
        self.manager: SessionManager | None = None
        self.gateway: Gateway | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.adapters: list[Adapter] = []  # checked and started (or starting)
        self._disabled: dict[str, AdapterStatus] = {}  # failed their check or start
        self._stop = threading.Event()
        self._reload = threading.Event()

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self.live.current

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.gateway.host}:{self.port}"

    # -- start-up, in order -------------------------------------------------------------------

    def start(self) -> None:
        started = time.perf_counter()
        try:
            self._lock.acquire()
            prepare_database(self.settings.database_path, synchronous=self.settings.journal.synchronous)
            token = load_control_token(self.settings)
            preload_encoding()  # here, not in the first session's actor on the I/O loop
            self.io = IoLoop().start()
            metrics = self.metrics
            self.journal = self.io.run(
                SqliteJournal(
                    self.settings.database_path,
                    synchronous=self.settings.journal.synchronous,
                    on_commit=metrics.commit_seconds.observe,
                ).open()
            )
            self.memory = self.io.run(
                SqliteMemoryStore(
                    self.settings.database_path, synchronous=self.settings.journal.synchronous
                ).open()
            )
            self.provider = self._provider_factory(self.settings)
            self.compaction_provider = _compaction_provider(self.settings)
            self.tools = tools = build_registry(self.settings, self.memory)
            # MCP servers connect before any session runs, so the first turns see their tools
            # (a server that is slow or broken keeps retrying in the background).
            self.mcp = McpHub(self.settings.mcp.servers)
            tools.add_source(self.mcp)
            self.io.run(self.mcp.start(MCP_START_WAIT_S), MCP_START_WAIT_S + 10)
            io, journal, provider, memory = self.io, self.journal, self.provider, self.memory
            compaction_provider = self.compaction_provider
            self.manager = SessionManager(
                lambda manager: SessionDeps(
                    io, journal, provider, tools, self.live, manager, memory, compaction_provider, metrics
                )
            )
            self.reminders = self.io.run(
                SqliteReminderStore(
                    self.settings.database_path, synchronous=self.settings.journal.synchronous
                ).open()
            )
            self.gateway = Gateway(self.manager, self.journal, self.live, self.memory, self.reminders)
            self.scheduler = Scheduler(
                self.reminders, self.gateway, lambda: self.live.current, clock=self._clock, metrics=metrics
            )
            for tool in reminder_tools(self.scheduler):
                tools.register(tool)
            metrics.watch(self._scraped_gauges)
            api = Api(
                self.gateway, token, health_extra=self.health, scheduler=self.scheduler, metrics=metrics
            )
            app = api.app()
            # Sessions that were active at a graceful stop (and any with unanswered input)
            # recover now, before channels deliver and before READY=1.
            manifest = take_manifest(self.settings.database_path)
            warmed = self.io.run(self._warm_sessions(manifest), WARM_TIMEOUT_S + 10)
            self._check_adapters(build_adapters(self.settings, self.gateway))
            for adapter in self.adapters:
                app.router.add_routes(adapter.routes())
            self.io.run(self._start_adapters())
            self.io.run(self._serve(app))
            # Channels listen now: the warmed sessions resume their turns (and replies reach them).
            self.io.run(_call(self.manager.release_held))
            # Scheduled input last: whatever it fires finds sessions and channels ready.
            self.io.run(self.scheduler.start())
        except BaseException:
            self.stop()
            raise
        log.info(
            "netclaw listening on %s (data %s, %d session(s) resumed) in %.0f ms",
            self.base_url,
            self.settings.data_dir,
            warmed,
            (time.perf_counter() - started) * 1000,
        )

    def _check_adapters(self, candidates: list[Adapter]) -> None:
        for adapter in candidates:
            try:
                adapter.check()
            except Exception as exc:  # noqa: BLE001 - one misconfigured channel must not stop the daemon
                log.error("adapter %s disabled: %s", adapter.name, exc)
                self._disabled[adapter.name] = AdapterStatus("disabled", str(exc))
                continue
            self.adapters.append(adapter)

    async def _start_adapters(self) -> None:
        for adapter in list(self.adapters):
            try:
                await adapter.start()
            except Exception as exc:  # noqa: BLE001 - a failing adapter is disabled, not the daemon
                log.error("adapter %s failed to start and is disabled: %s", adapter.name, exc)
                self.adapters.remove(adapter)
                self._disabled[adapter.name] = AdapterStatus("failed", str(exc))
                with contextlib.suppress(Exception):
                    await adapter.stop()

    async def _stop_adapters(self) -> None:
        for adapter in reversed(self.adapters):
            try:
                await adapter.stop()
            except Exception:
                log.exception("adapter %s did not stop cleanly", adapter.name)
        self.adapters = []

    def health(self) -> dict[str, Any]:
        """``/healthz`` beyond the sessions: channels and MCP servers, and what is down."""
        adapters = self.adapter_statuses()
        problems = [
            f"adapter {name} is {status['state']}" + (f": {status['detail']}" if status.get("detail") else "")
            for name, status in adapters.items()
            if status["state"] not in ("running", "starting")
        ]
        body: dict[str, Any] = {"adapters": adapters}
        if self.mcp is not None and self.mcp.servers:
            body["mcp"] = {name: status.to_json() for name, status in self.mcp.statuses().items()}
            problems += self.mcp.problems()
        if problems:
            body["problems"] = problems
        return body

    def _scraped_gauges(self) -> list[GaugeMetricFamily]:
        """``/metrics`` gauges read when scraped (on the loop, where their owners live)."""
        resident = len(self.manager.resident()) if self.manager is not None else 0
        adapters: dict[tuple[str, ...], float] = {
            (name,): float(s["state"] == "running") for name, s in self.adapter_statuses().items()
        }
        servers = self.mcp.statuses() if self.mcp is not None else {}
        return [
            gauge("netclaw_sessions_resident", "Sessions with a live actor", {(): resident}),
            gauge("netclaw_adapter_up", "1 when the channel is running", adapters, ("adapter",)),
            gauge(
                "netclaw_mcp_server_up",
                "1 when the MCP server answers",
                {(name,): float(status.state == "up") for name, status in servers.items()},
                ("server",),
            ),
        ]

    def adapter_statuses(self) -> dict[str, dict[str, str]]:
        statuses = {a.name: a.status().to_json() for a in self.adapters}
        statuses.update({name: status.to_json() for name, status in self._disabled.items()})
        return statuses

    async def _serve(self, app: web.Application) -> None:
        # handler_cancellation: a client that disconnects (an SSE subscriber) ends its
        # handler at once, so its subscription is removed without waiting for a write.
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True, shutdown_timeout=5.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.gateway.host, self.settings.gateway.port)
        try:
            await site.start()
        except OSError as exc:
            raise DaemonError(
                f"cannot listen on {self.settings.gateway.host}:{self.settings.gateway.port}: "
                f"{exc.strerror} (is another netclaw running? change gateway.port)"
            ) from exc
        addresses = self._runner.addresses  # the bound port, when gateway.port is 0
        self.port = int(addresses[0][1]) if addresses else self.settings.gateway.port

    async def _warm_sessions(self, manifest: Manifest | None) -> int:
        """The manifest's sessions (a graceful stop) and those with admitted input whose turn
        never finished (a crash) recover, WARM_CONCURRENCY at a time. The manifest's learn
        on their first model call that a restart interrupted them."""
        assert self.journal is not None and self.manager is not None
        pending = await self.journal.sessions_with_pending_input()
        resumed = frozenset(manifest.session_ids) if manifest is not None else frozenset()
        ordered = [*sorted(resumed), *(sid for sid in pending if sid not in resumed)]
        return await self.manager.warm_all(
            ordered,
            concurrency=WARM_CONCURRENCY,
            resumed_at=manifest.stopped_at if manifest is not None else None,
            resumed=resumed,
            timeout_s=WARM_TIMEOUT_S,
        )

    # -- shutdown, in reverse -----------------------------------------------------------------

    def stop(self) -> None:
        """Reverse order of start. Each step runs even if an earlier one failed, so no
        actor outlives the loop it needs to finish."""
        io = self.io
        if io is not None:
            if self._runner is not None:
                _step("stop listening", io.run, _stop_sites(self._runner), 5)
            if self.scheduler is not None:
                _step("stop the scheduler", io.run, self.scheduler.stop(), 5)
            if self.adapters:
                _step("stop adapters", io.run, self._stop_adapters(), 15)
            if self.manager is not None and self.journal is not None:
                _step("save the warm-restart manifest", self._save_manifest, io)
            if self.manager is not None:
                # Before the HTTP server finishes: a request waiting for a turn (?wait=1) is
                # answered now ("accepted; the reply comes after restart"), not at a timeout.
                refs = _step("stop sessions", io.run, _call(self.manager.shutdown), 5) or []
                for ref in refs:
                    ref.actor_stopped.wait(ACTOR_STOP_TIMEOUT_S)
            if self._runner is not None:
                _step("stop the HTTP server", io.run, self._runner.cleanup(), 15)
            self._close_resources(io)
        self._runner = None
        self.mcp = None
        self.scheduler = None
        self.reminders = None
        self.manager = None
        self.journal = None
        self.provider = None
        self.compaction_provider = None
        self.memory = None
        if io is not None:
            io.stop()
        self.io = None
        self._lock.release()
        survivors = [ref for ref in pykka.ActorRegistry.get_all() if _is_ours(ref)]
        if survivors:
            log.error("%d session actor(s) survived shutdown: %s", len(survivors), survivors)

    def _close_resources(self, io: IoLoop) -> None:
        """What the sessions used, in reverse order of opening; each step isolated."""
        closers: list[tuple[str, Any, float]] = [
            ("stop MCP servers", self.mcp.stop() if self.mcp else None, 10),
            ("close the provider", self.provider.aclose() if self.provider else None, 5),
            (
                "close the compaction provider",
                self.compaction_provider.aclose() if self.compaction_provider else None,
                5,
            ),
            ("close the memory store", self.memory.close() if self.memory else None, 5),
            ("close the reminder store", self.reminders.close() if self.reminders else None, 5),
            ("close the journal", self.journal.close() if self.journal else None, 10),
        ]
        for what, closing, timeout in closers:
            if closing is not None:
                _step(what, io.run, closing, timeout)

    def _save_manifest(self, io: IoLoop) -> None:
        assert self.manager is not None
        active = io.run(_call(self.manager.active_sessions), 5)
        save_manifest(self.settings.database_path, active, time.time())
        log.info("warm-restart manifest: %d active session(s)", len(active))

    # -- the foreground process ---------------------------------------------------------------

    def run_forever(self) -> int:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            self.start()
            sd_notify("READY=1")
            while not self._stop.is_set():
                self._stop.wait(1.0)
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
            sd_notify("STOPPING=1")
            log.info("netclaw stopping")
            return 0
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Signal handlers only set flags; run_forever acts on them (it polls every second).
        (self._reload if signum == signal.SIGHUP else self._stop).set()

    def reload(self) -> None:
        """Re-read the config and apply what can change in a running daemon: sessions
        (at their next turn), audiences, agent, history, webhook routes, chat allowlists.
        The log line says what changed, what applied and what needs a restart."""
        sd_notify("RELOADING=1")
        try:
            new = load_settings(self.config_path)
        except ConfigError as exc:
            log.error("config reload failed; keeping the running config:\n%s", exc)
            sd_notify("READY=1")
            return
        # Routes are served by the webhook adapter, which only runs if it had routes at start.
        webhooks_running = any(a.name == "webhooks" for a in self.adapters)
        extra = () if webhooks_running else ("webhooks",)
        change = self.live.reload(new, restart_keys=extra)
        (log.warning if change.restart else log.info)("%s", change.describe())
        sd_notify("READY=1")


def _step(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        log.exception("shutdown: could not %s", what)
        return None


async def _stop_sites(runner: web.AppRunner) -> None:
    for site in list(runner.sites):
        await site.stop()


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a loop-confined function on the loop (from another thread via ``IoLoop.run``)."""
    return fn(*args)


def _is_ours(ref: pykka.ActorRef[Any]) -> bool:
    return ref.actor_class is SessionActor


def _compaction_provider(settings: Settings) -> Provider | None:
    """A separate provider only when models.compaction names a different one."""
    compaction = settings.models.compaction
    if compaction is None or compaction.provider == settings.models.main.provider:
        return None
    return make_provider(compaction.provider, settings.providers[compaction.provider])


def _default_provider(settings: Settings) -> Provider:
    main = settings.models.main
    return make_provider(main.provider, settings.providers[main.provider])


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_daemon(config_path: str | None) -> int:
    settings = load_settings(config_path)
    return Daemon(settings, config_path=config_path).run_forever()
