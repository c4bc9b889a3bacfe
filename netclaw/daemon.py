"""Wiring: start-up in a fixed order, shutdown in reverse in one ``finally``.

journal → sessions → (adapters) → API. Then wait for SIGTERM/SIGINT; SIGHUP
reloads the config. After shutdown, check that no actor survived.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import pykka
from aiohttp import web

from adapters import Adapter, build_adapters
from adapters.channels import ONE_NODE_ADAPTERS, Channels
from netclaw.api import Api, webhook_app
from netclaw.cluster import Forwarder, Routing, protocol, rescue_orphans
from netclaw.cluster_api import ClusterHttp
from netclaw.config import LiveSettings, ScheduleConfig, Settings, find_config_path, load_settings
from netclaw.control_token import load_control_token
from netclaw.errors import ConfigError, DaemonError
from netclaw.gateway import Gateway
from netclaw.heap import HeapTrimmer, settle_heap
from netclaw.history import preload_encoding
from netclaw.listener import listen
from netclaw.logs import configure_logging, log_startup_failure
from netclaw.mcp import McpHub
from netclaw.mcp_api import mcp_routes
from netclaw.membership import ClusterNode
from netclaw.metrics import GaugeMetricFamily, Metrics, gauge
from netclaw.persistence import (
    AccessLogic,
    Journal,
    Manifest,
    MemoryStore,
    ReminderStore,
    make_access,
    make_journal,
    make_memory,
    make_reminders,
    prepare_stores,
    save_manifest,
    take_manifest,
    uses_postgres,
)
from netclaw.policy import channel_of
from netclaw.provider_health import ProviderHealth, WatchedProvider
from netclaw.providers import Provider, make_providers
from netclaw.questions_api import question_routes
from netclaw.redact import KNOWN, known_values
from netclaw.runtime import IoLoop
from netclaw.scheduler import Clock, Scheduler
from netclaw.service import Notifier, SignalWaiter, heartbeat
from netclaw.sessions import SessionActor, SessionDeps, SessionManager
from netclaw.skills import LiveSkills, load_skills
from netclaw.spend import SpendLedger, Spent, next_midnight, utc_day
from netclaw.subagents import Subagents
from netclaw.system import ensure_writable_dir
from netclaw.tools import (
    Questions,
    ToolRegistry,
    build_registry,
    guard_workspace,
    reminder_tools,
    subagent_tools,
)
from netclaw.ui import UI_PREFIX, control_room

log = logging.getLogger(__name__)

ACTOR_STOP_TIMEOUT_S = 10.0
WARM_CONCURRENCY = 16  # sessions recovering at once at start-up
WARM_TIMEOUT_S = 120.0
MCP_START_WAIT_S = 15.0  # how long start-up waits for MCP servers' first connection


class DataDirLock:
    """One daemon per data_dir: two writers would corrupt the journal's sequence."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "netclaw.lock"
        self._fh: TextIO | None = None

    def acquire(self) -> None:
        ensure_writable_dir("data_dir", self.path.parent)  # a new one is private (0700)
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
        provider_factory: Callable[[Settings], Mapping[str, Provider]] | None = None,
        clock: Clock | None = None,
        log_level: str | None = None,
    ) -> None:
        self.live = LiveSettings(settings)
        self.log_level = log_level  # `run --log-level`: beats log.level, also across reloads
        self.config_path = config_path
        self._provider_factory = provider_factory or make_providers
        self._clock = clock  # the scheduler's (tests inject one that does not sleep)
        self._lock = DataDirLock(settings.data_dir)
        self.io: IoLoop | None = None
        self.journal: Journal | None = None
        self.providers: dict[str, Provider] = {}  # by name under `providers`
        self.ledger = SpendLedger()  # the whole daemon's spend today (every session reads it)
        self.memory: MemoryStore | None = None
        self.forwarder: Forwarder | None = None
        self.cluster: ClusterNode | None = None  # several nodes: drain, move, rebalance
        self.tools: ToolRegistry | None = None
        self.skills = LiveSkills()  # loaded at start-up, swapped on SIGHUP
        self.access: AccessLogic | None = None
        self.mcp: McpHub | None = None
        self.questions: Questions | None = None  # what tools ask people (MCP elicitation, sampling)
        self.metrics = Metrics()
        self.reminders: ReminderStore | None = None
        self.scheduler: Scheduler | None = None
        self.subagents: Subagents | None = None
        self.manager: SessionManager | None = None
        self.gateway: Gateway | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self._webhook_app: web.Application | None = None  # gateway.webhook_host/port: a second listener
        self._webhook_runner: web.AppRunner | None = None
        self.webhook_port: int | None = None
        self.channels = Channels()  # checked, started and kept up (adapters/channels.py)
        self.notifier = Notifier()
        self._heartbeat: concurrent.futures.Future[None] | None = None
        self._rescuer: concurrent.futures.Future[None] | None = None
        main = settings.models.main
        self.provider_health = ProviderHealth(main.provider, main.model)  # /healthz's "provider"
        self._provider_watch: concurrent.futures.Future[None] | None = None
        self._token: str | None = None  # the control token, once loaded

    @property
    def settings(self) -> Settings:
        """The running config (follows a reload)."""
        return self.live.current

    @property
    def adapters(self) -> list[Adapter]:
        """The channels that passed their check (started, or starting)."""
        return self.channels.adapters

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.gateway.host}:{self.port}"

    # -- start-up, in order -------------------------------------------------------------------

    def start(self) -> None:
        started = time.perf_counter()
        try:
            guard_workspace(self.settings, find_config_path(self.config_path))  # before anything is made
            self._lock.acquire()
            ensure_writable_dir("tools.workspace_dir", self.settings.tools.workspace_dir)
            prepare_stores(self.settings)
            token = self._token = load_control_token(self.settings)
            # Redaction and the last line of defence (provider requests, API answers) know the
            # daemon's own secrets from now on (netclaw/redact.py).
            KNOWN.hold(self, known_values(self.settings, token))
            preload_encoding()  # here, not in the first session's actor on the I/O loop
            self.io = IoLoop().start()
            metrics = self.metrics
            journal = make_journal(self.settings, metrics.commit_seconds.observe, protocol=protocol.CURRENT)
            self.io.run(journal.open())
            self.journal = journal
            memory = make_memory(self.settings)
            self.io.run(memory.open())
            self.memory = memory
            # Each provider a model names, once; the main model's is watched (/healthz's provider).
            main = self.settings.models.main
            self.provider_health = ProviderHealth(main.provider, main.model)
            providers = dict(self._provider_factory(self.settings))
            providers[main.provider] = WatchedProvider(providers[main.provider], self.provider_health)
            self.providers = providers
            self.io.run(self._seed_ledger(journal))
            self.load_skills()
            self.tools = tools = build_registry(
                self.settings, self.memory, lambda: self.live.current, skills=self.skills
            )
            # MCP servers connect before any session runs, so the first turns see their tools
            # (a server that is slow or broken keeps retrying in the background).
            tools_config = self.settings.tools
            workspace = tools_config.files.enabled or tools_config.shell.enabled
            self.mcp = McpHub(
                self.settings.mcp,
                data_dir=self.settings.data_dir,
                roots=[tools_config.workspace_dir] if workspace else [],
            )
            tools.add_source(self.mcp)
            self.io.run(self.mcp.start(MCP_START_WAIT_S), MCP_START_WAIT_S + 10)
            io, providers, ledger = self.io, self.providers, self.ledger
            questions = self.questions = Questions()
            self.manager = SessionManager(
                lambda manager: SessionDeps(
                    io,
                    journal,
                    providers,
                    tools,
                    self.live,
                    manager,
                    memory,
                    metrics,
                    questions=questions,
                    skills=self.skills,
                    ledger=ledger,
                )
            )
            self.manager.on_session_stopped(HeapTrimmer(io.loop).session_stopped)
            journal.on_lease_lost = self._lease_lost
            reminders = make_reminders(self.settings)
            self.io.run(reminders.open())
            self.reminders = reminders
            routing = self._join_cluster(token) if uses_postgres(self.settings) else None
            access = make_access(self.settings)
            self.io.run(access.open())
            self.access = access
            # The gateway's services; each caller below gets the ones it uses, typed by its role.
            gateway = self.gateway = Gateway.build(
                self.manager,
                journal,
                self.live,
                memory=memory,
                reminders=reminders,
                routing=routing,
                access=access,
                mcp=self.mcp,
                questions=self.questions,
                tools=tools,
                skills=self.skills,
            )
            self.scheduler = Scheduler(
                reminders,
                gateway.intake,
                gateway.outbox,
                lambda: self.live.current,
                clock=self._clock,
                metrics=metrics,
            )
            for tool in reminder_tools(self.scheduler):
                tools.register(tool)
            self.subagents = Subagents(gateway.subagents, lambda: self.live.current)
            for tool in subagent_tools(self.subagents):  # the tools reach the gateway through it
                tools.register(tool)
            metrics.watch(self._scraped_gauges)
            api = Api(
                gateway.operator,
                gateway.commands,
                token,
                health_extra=self.health,
                scheduler=self.scheduler,
                metrics=metrics,
                cluster=ClusterHttp(self.cluster) if self.cluster is not None else None,
                access=access,
            )
            app = api.app()
            if self.settings.ui.enabled:  # the control listener only: never the webhook listener's app
                room = control_room(gateway.operator, token, scheduler=self.scheduler, health=api.health)
                app.add_subapp(UI_PREFIX, room)
            app.router.add_routes(mcp_routes(self.mcp))
            app.router.add_routes(question_routes(gateway.approvals, gateway.control))
            # Sessions that were active at a graceful stop (and any with unanswered input)
            # recover now, before channels deliver and before READY=1. In a cluster, once
            # this node listens: a lease it takes while it cannot be reached would hold the
            # other nodes' requests for that session until it can.
            manifest = take_manifest(self.settings)
            warmed = 0
            if self.cluster is None:
                warmed = self.io.run(self._warm_sessions(manifest), WARM_TIMEOUT_S + 10)
            self.channels.check(build_adapters(self.settings, gateway.chat))
            hook_routes = self.channels.routes()
            if self.settings.gateway.webhook_host is None:
                app.router.add_routes(hook_routes)
            else:  # only on the second listener: the control API's port need not be exposed
                self._webhook_app = webhook_app(hook_routes)
            leases = journal if self.cluster is not None else None  # a one-node channel's lease
            self.io.run(self.channels.start(leases, retry_s=self.settings.cluster.lease_s / 3))
            self.io.run(self._serve(app))
            if self.cluster is not None:
                warmed = self.io.run(self._warm_sessions(manifest), WARM_TIMEOUT_S + 10)
            # Channels listen now: the warmed sessions resume their turns (and replies reach them).
            self.io.run(_call(self.manager.release_held))
            # Sub-agents' answers recorded before a crash go to their parents now.
            self.io.run(_call(self.subagents.start))
            # Scheduled input last: whatever it fires finds sessions and channels ready.
            self.io.run(self.scheduler.start())
            if self.cluster is not None:
                self.io.run(self.cluster.start())
                self._rescuer = self.io.submit(
                    rescue_orphans(journal, self.manager.warm, self.settings.cluster.lease_s / 2)
                )
        except BaseException:
            self.stop()
            raise
        self._announce_provider()
        log.info(
            "netclaw listening on %s (data %s, %d session(s) resumed) in %.0f ms",
            self.base_url,
            self.settings.data_dir,
            warmed,
            (time.perf_counter() - started) * 1000,
        )

    def load_skills(self) -> None:
        """(Re)load the skills from disk and put them in force; each skipped one is logged
        with its file and field (the daemon runs on without it)."""
        skills = load_skills(self.settings.skills)
        self.skills.swap(skills)
        for problem in skills.problems:
            log.error("skill skipped: %s", problem)
        if skills.skills or skills.problems:
            log.info("skills: %s", ", ".join(skills.names) or "none loaded")

    def _join_cluster(self, token: str) -> Routing:
        """Several nodes on one database: forwarding, routing and this node's membership."""
        assert self.journal is not None and self.manager is not None
        from netclaw.persistence.postgres import PostgresJournal

        journal = self.journal
        assert isinstance(journal, PostgresJournal)
        cluster = self.settings.cluster
        self.forwarder = Forwarder(cluster.node, token, turn_timeout_s=self.settings.session.turn_timeout_s)
        routing = Routing(cluster.node, self.forwarder, journal, self.manager, hold_s=cluster.hold_for_s)
        self.cluster = ClusterNode(
            cluster,
            journal.leases,
            self.manager,
            routing,
            pinned=lambda session_id: channel_of(session_id) in ONE_NODE_ADAPTERS,
            on_drain=self.channels.leave_one_node,
            on_resume=self.channels.rejoin_one_node,
        )
        self.metrics.node = cluster.node
        self.metrics.watch(self.cluster.metric_families)
        return routing

    @property
    def provider(self) -> Provider | None:
        """The provider of models.main (the one the start-up probe checks)."""
        return self.providers.get(self.settings.models.main.provider)

    async def _seed_ledger(self, journal: Journal) -> None:
        """What was spent today before this process started counts toward the daemon's cap."""
        now = time.time()
        day = utc_day(now)
        since = next_midnight(now) - 86_400
        rows = await journal.usage("day", since)
        self.ledger.seed(
            day, Spent(sum(r.input_tokens + r.output_tokens for r in rows), sum(r.cost for r in rows))
        )

    def apply_log_config(self) -> None:
        config = self.settings.log
        configure_logging(self.log_level or config.level, config.format, config.libraries)

    def _announce_provider(self) -> None:
        """Say which model this daemon talks to, and warn early (in the background) when it
        cannot: an unset key variable, an unreachable server, a model it does not have. The
        check goes on in the background (``/healthz``'s ``provider``)."""
        main = self.settings.models.main
        config = self.settings.providers[main.provider]
        log.info("provider %s (%s at %s), model %s", main.provider, config.type, config.base_url, main.model)
        if missing := config.missing_key():
            log.warning("provider %s: %s", main.provider, missing)
        if self.io is not None and self.provider is not None:
            self._provider_watch = self.io.submit(self.provider_health.watch(self.provider))

    def _lease_lost(self, name: str) -> None:
        """Another node took a lease of ours over (on the loop): a session's, or a channel's."""
        if not self.channels.lease_lost(name) and self.manager is not None:
            self.manager.lease_lost(name)

    def health(self) -> dict[str, Any]:
        """``/healthz`` beyond the sessions: channels and MCP servers, and what is down."""
        adapters = self.channels.statuses()
        problems = [
            f"adapter {name} is {status['state']}" + (f": {status['detail']}" if status.get("detail") else "")
            for name, status in adapters.items()
            if status["state"] not in ("running", "standby")  # standby: another node runs it
        ]
        journal = self.journal.problem() if self.journal is not None else "the journal is not open"
        if journal is not None:
            problems.insert(0, journal)
        if (provider := self.provider_health.problem()) is not None:
            problems.append(provider)
        body: dict[str, Any] = {"adapters": adapters, "provider": self.provider_health.to_json()}
        if self.manager is not None and self.manager.compaction_failing:
            # Not a problem of the daemon (those sessions trim instead), but worth a look.
            body["compaction_failing"] = dict(sorted(self.manager.compaction_failing.items()))
        if self.cluster is not None:
            body["cluster"] = self.cluster.health()
        if self.mcp is not None and self.mcp.servers:
            body["mcp"] = {name: status.to_json() for name, status in self.mcp.statuses().items()}
            problems += self.mcp.problems()
        skills = self.skills.current
        body["skills"] = {
            "loaded": skills.names,
            "skipped": [problem.to_json(full_path=False) for problem in skills.problems],
        }
        if problems:
            body["problems"] = problems
        return body

    def _scraped_gauges(self) -> list[GaugeMetricFamily]:
        """``/metrics`` gauges read when scraped (on the loop, where their owners live)."""
        resident = len(self.manager.resident()) if self.manager is not None else 0
        adapters: dict[tuple[str, ...], float] = {
            (name,): float(s["state"] == "running") for name, s in self.channels.statuses().items()
        }
        servers = self.mcp.statuses() if self.mcp is not None else {}
        return [
            gauge("netclaw_sessions_resident", "Sessions with a live actor", {(): resident}),
            gauge(
                "netclaw_sessions_compaction_failing",
                "Sessions whose last summaries failed (they trim instead)",
                {(): len(self.manager.compaction_failing) if self.manager is not None else 0},
            ),
            gauge("netclaw_adapter_up", "1 when the channel is running", adapters, ("adapter",)),
            gauge(
                "netclaw_mcp_server_up",
                "1 when the MCP server answers",
                {(name,): float(status.state == "up") for name, status in servers.items()},
                ("server",),
            ),
        ]

    async def _serve(self, app: web.Application) -> None:
        gateway = self.settings.gateway
        self._runner, self.port = await listen(app, gateway.host, gateway.port, "gateway.port")
        if self._webhook_app is not None:
            assert gateway.webhook_host is not None and gateway.webhook_port is not None
            self._webhook_runner, self.webhook_port = await listen(
                self._webhook_app, gateway.webhook_host, gateway.webhook_port, "gateway.webhook_port"
            )
            log.info("webhooks listening on %s:%d", gateway.webhook_host, self.webhook_port)

    async def _warm_sessions(self, manifest: Manifest | None) -> int:
        """The manifest's sessions (a graceful stop) and those with admitted input whose turn
        never finished (a crash) recover, WARM_CONCURRENCY at a time. The manifest's learn
        on their first model call that a restart interrupted them."""
        assert self.journal is not None and self.manager is not None
        # In a cluster the sessions other nodes hold run their turns there: only its own
        # (restarted before its leases ran out) and those nobody holds are this node's to
        # take (claiming one merely between owners before this node listens would hold its
        # requests until it does).
        journal = self.journal
        pending = await (
            journal.orphans(mine=self.settings.cluster.node)
            if self.cluster is not None
            else journal.sessions_with_pending_input()
        )
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
        for background in (self._heartbeat, self._rescuer, self._provider_watch):
            if background is not None:
                background.cancel()
        self._heartbeat = self._rescuer = self._provider_watch = None
        if io is not None:
            if self.cluster is not None:
                self._leave_cluster(io, self.cluster)
            for runner in (self._webhook_runner, self._runner):
                if runner is not None:
                    _step("stop listening", io.run, _stop_sites(runner), 5)
            self._stop_own_input(io)
            if self.channels.adapters:
                _step("stop adapters", io.run, self.channels.stop(), 15)
            if self.manager is not None:
                self._stop_sessions(io, self.manager)
            for runner in (self._webhook_runner, self._runner):
                if runner is not None:
                    _step("stop the HTTP server", io.run, runner.cleanup(), 15)
            self._close_resources(io)
        self._runner = self._webhook_runner = self._webhook_app = None
        self.mcp = None
        self.scheduler = None
        self.subagents = None
        self.reminders = None
        self.access = None
        self.manager = None
        self.journal = None
        self.providers = {}
        self.memory = None
        self.forwarder = None
        self.cluster = None
        if io is not None:
            io.stop()
        self.io = None
        KNOWN.release(self)
        self._lock.release()
        survivors = [ref for ref in pykka.ActorRegistry.get_all() if _is_ours(ref)]
        if survivors:
            log.error("%d session actor(s) survived shutdown: %s", len(survivors), survivors)

    def _stop_sessions(self, io: IoLoop, manager: SessionManager) -> None:
        if self.journal is not None:
            _step("save the warm-restart manifest", self._save_manifest, io)
        # Before the HTTP server finishes: a request waiting for a turn (?wait=1) is
        # answered now ("accepted; the reply comes after restart"), not at a timeout.
        refs = _step("stop sessions", io.run, _call(manager.shutdown), 5) or []
        for ref in refs:
            ref.actor_stopped.wait(ACTOR_STOP_TIMEOUT_S)

    def _leave_cluster(self, io: IoLoop, cluster: ClusterNode) -> None:
        """Drain while still listening (what reaches this node meanwhile goes to the
        others), then stop looking at the registry."""
        if self._runner is not None:
            timeout = self.settings.cluster.drain_s + 15
            _step("drain (hand the sessions to other nodes)", io.run, cluster.drain(stopping=True), timeout)
        _step("stop the cluster view", io.run, cluster.stop(), 5)

    def _stop_own_input(self, io: IoLoop) -> None:
        """What submits input by itself stops before the channels: reminders, and sub-agents'
        reports (one cut short is delivered again after the restart)."""
        if self.scheduler is not None:
            _step("stop the scheduler", io.run, self.scheduler.stop(), 5)
        if self.subagents is not None:
            _step("stop the sub-agent courier", io.run, _call(self.subagents.stop), 5)

    def _close_resources(self, io: IoLoop) -> None:
        """What the sessions used, in reverse order of opening; each step isolated."""
        closers: list[tuple[str, Any, float]] = [
            ("stop MCP servers", self.mcp.stop() if self.mcp else None, 10),
            *((f"close provider {name}", provider.aclose(), 5) for name, provider in self.providers.items()),
            ("close the memory store", self.memory.close() if self.memory else None, 5),
            ("close the reminder store", self.reminders.close() if self.reminders else None, 5),
            ("close the audit and token store", self.access.close() if self.access else None, 5),
            ("close the journal", self.journal.close() if self.journal else None, 10),
            ("close the links to other nodes", self.forwarder.close() if self.forwarder else None, 5),
        ]
        for what, closing, timeout in closers:
            if closing is not None:
                _step(what, io.run, closing, timeout)

    def _save_manifest(self, io: IoLoop) -> None:
        assert self.manager is not None
        active = io.run(_call(self.manager.active_sessions), 5)
        save_manifest(self.settings, active, time.time())
        log.info("warm-restart manifest: %d active session(s)", len(active))

    # -- the foreground process ---------------------------------------------------------------

    def run_forever(self) -> int:
        stop_signals = {signal.SIGTERM, signal.SIGINT}
        with SignalWaiter((signal.SIGTERM, signal.SIGINT, signal.SIGHUP)) as signals:
            try:
                self.start()
                assert self.io is not None
                settle_heap()
                self.notifier.ready(self.io.run(_call(self.status_line), 5))
                if self.notifier.enabled:
                    self._heartbeat = self.io.submit(heartbeat(self.notifier, self.status_line))
                while True:
                    arrived = signals.wait()  # no polling: a signal wakes this at once
                    if stop_signals.intersection(arrived):
                        break
                    if signal.SIGHUP in arrived:
                        self.reload()
                self.notifier.stopping()
                log.info("netclaw stopping")
                return 0
            finally:
                self.stop()

    def status_line(self) -> str:
        """systemd's STATUS=: resident sessions and each channel's state (on the loop)."""
        resident = len(self.manager.resident()) if self.manager is not None else 0
        channels = ", ".join(f"{name} {s['state']}" for name, s in sorted(self.channels.statuses().items()))
        return f"{resident} session(s) resident" + (f"; {channels}" if channels else "")

    def reload(self) -> None:
        """Re-read the config and apply what can change in a running daemon: sessions
        (at their next turn), audiences, agent, history, webhook routes, chat allowlists,
        and the skills on disk.
        The log line says what changed, what applied and what needs a restart."""
        self.notifier.reloading()
        try:
            new = load_settings(self.config_path)
        except ConfigError as exc:
            log.error("config reload failed; keeping the running config:\n%s", exc)
            self.notifier.ready()
            return
        # Routes are served by the webhook adapter, which only runs if it had routes at start.
        webhooks_running = self.channels.running("webhooks")
        extra = () if webhooks_running else ("webhooks",)
        change = self.live.reload(new, restart_keys=extra)
        if self._token is not None:  # a secret the config names now is known from now on
            KNOWN.hold(self, known_values(self.live.current, self._token))
        if any(key == "log" or key.startswith("log.") for key in change.applied):
            self.apply_log_config()
        self.load_skills()  # skills change on disk, not only in the config
        if (
            self.scheduler is not None
            and self.io is not None
            and any(k.startswith("schedules") for k in change.applied)
        ):
            self.io.submit(_sync_schedules(self.scheduler, self.live.current.schedules))
        (log.warning if change.restart else log.info)("%s", change.describe())
        if self.gateway is not None and self.io is not None and (change.applied or change.restart):
            record = self.gateway.control.audit(
                "config_reload", "daemon", applied=list(change.applied), restart=list(change.restart)
            )
            self.io.submit(record)  # the audit trail; never holds up the reload
        self.notifier.ready()


def _step(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        log.exception("shutdown: could not %s", what)
        return None


async def _stop_sites(runner: web.AppRunner) -> None:
    for site in list(runner.sites):
        await site.stop()


async def _sync_schedules(scheduler: Scheduler, schedules: Mapping[str, ScheduleConfig]) -> None:
    try:
        await scheduler.sync_config(schedules)
    except Exception:  # the reload has been applied; say so rather than lose it in a future
        log.exception("reload: the schedules could not be applied; the scheduler keeps the previous ones")


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a loop-confined function on the loop (from another thread via ``IoLoop.run``)."""
    return fn(*args)


def _is_ours(ref: pykka.ActorRef[Any]) -> bool:
    return ref.actor_class is SessionActor


def run_daemon(config_path: str | None, log_level: str | None = None) -> int:
    """``netclaw run``: load the config, set up logging, say what was loaded, run. A failure
    to start is one error line (the traceback at debug), exit status 1."""
    os.umask(0o077)  # whatever the daemon creates (database, WAL, token, workspace) is private
    configure_logging(log_level or "info")  # until the config says otherwise: errors need a voice
    try:
        settings = load_settings(config_path)
        found = find_config_path(config_path)
        daemon = Daemon(settings, config_path=config_path, log_level=log_level)
        daemon.apply_log_config()
        if found is not None and found.is_file():
            log.info("config: %s", found.resolve())
        else:
            log.info(
                "config: no file found (looked for --config, $NETCLAW_CONFIG, ./netclaw.json, "
                "~/.config/netclaw/netclaw.json, /etc/netclaw/netclaw.json); using built-in "
                "defaults. `netclaw init` writes one"
            )
        return daemon.run_forever()
    except Exception as exc:  # noqa: BLE001 - whatever stopped start-up, said once and clearly
        log_startup_failure(log, exc)
        return 1
