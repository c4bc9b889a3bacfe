"""The running netclaw: start-up in a fixed order, shutdown in reverse in one ``finally``.

journal → sessions → (adapters) → API. Then wait for SIGTERM/SIGINT; SIGHUP
reloads the config. After shutdown, check that no actor survived.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from aiohttp import web

from adapters import Adapter, build_adapters
from adapters.channels import Channels, one_node
from netclaw.cluster import Forwarder, Routing, protocol, rescue_orphans
from netclaw.cluster.membership import ClusterNode
from netclaw.config import LiveSettings, ScheduleConfig, Settings, find_config_path, load_settings
from netclaw.daemon import _health
from netclaw.daemon._health import Looked
from netclaw.daemon._steps import (
    WARM_TIMEOUT_S,
    announce_provider,
    call,
    close_all,
    control_app,
    leave_cluster,
    seed_ledger,
    start_tracing,
    step,
    stop_sessions,
    stop_sites,
    surviving_sessions,
    swap_skills,
    warm_sessions,
)
from netclaw.errors import ConfigError
from netclaw.gateway import Gateway
from netclaw.history import preload_encoding
from netclaw.http.api import Api, webhook_app
from netclaw.http.cluster import ClusterHttp
from netclaw.http.listener import check_free, listen
from netclaw.mcp import McpHub
from netclaw.persistence import (
    AccessLogic,
    Journal,
    MemoryStore,
    ReminderStore,
    make_access,
    make_journal,
    make_memory,
    make_reminders,
    prepare_stores,
    take_manifest,
    uses_postgres,
)
from netclaw.process.heap import HeapTrimmer
from netclaw.process.lock import DataDirLock
from netclaw.process.logs import configure_logging, log_lines
from netclaw.process.metrics import GaugeMetricFamily, Metrics
from netclaw.process.runtime import IoLoop
from netclaw.process.service import Notifier
from netclaw.process.system import ensure_writable_dir
from netclaw.process.traces import OFF, Tracing
from netclaw.providers import Provider, Speech, make_providers
from netclaw.security.control_token import load_control_token
from netclaw.security.policy import channel_of
from netclaw.security.redact import KNOWN, known_values
from netclaw.sessions import SessionDeps, SessionManager
from netclaw.skills import LiveSkills
from netclaw.spend import SpendLedger
from netclaw.tools import (
    Questions,
    ToolRegistry,
    build_registry,
    guard_workspace,
    reminder_tools,
    subagent_tools,
)
from netclaw.workers.provider_health import ProviderHealth, WatchedProvider
from netclaw.workers.scheduler import Clock, Scheduler
from netclaw.workers.subagents import Subagents

log = logging.getLogger(__name__)

MCP_START_WAIT_S = 15.0  # how long start-up waits for MCP servers' first connection


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
        self.speech: Speech | None = None  # speech.transcription and speech.synthesis
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
        self.tracing: Tracing = OFF  # telemetry.traces: the running tracer, from start-up
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
        self.heartbeat_task: concurrent.futures.Future[None] | None = None
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

    def _client_url(self) -> str:
        """Where a client on this host reaches the API (a wildcard host is loopback)."""
        host = self.settings.gateway.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    # -- start-up, in order -------------------------------------------------------------------

    def start(self) -> None:
        started = time.perf_counter()
        try:
            guard_workspace(self.settings, find_config_path(self.config_path))  # before anything is made
            listens = self.settings.gateway
            check_free(listens.host, listens.port, "gateway.port")  # also before: a busy port makes nothing
            if listens.webhook_host is not None and listens.webhook_port is not None:
                check_free(listens.webhook_host, listens.webhook_port, "gateway.webhook_port")
            self._lock.acquire()
            ensure_writable_dir("tools.workspace_dir", self.settings.tools.workspace_dir)
            with self.notifier.extending_start("preparing the database"):  # a migration may take minutes
                prepare_stores(self.settings)
            token = self._token = load_control_token(self.settings)
            # Redaction and the last line of defence (provider requests, API answers) know the
            # daemon's own secrets from now on (netclaw/security/redact.py).
            KNOWN.hold(self, known_values(self.settings, token))
            preload_encoding()  # here, not in the first session's actor on the I/O loop
            self.io = IoLoop().start()
            metrics = self.metrics
            tracing = self.tracing = start_tracing(self.settings.telemetry)
            metrics.watch_traces(tracing)  # its counts (zero when traces are off)
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
            self.io.run(seed_ledger(journal, self.ledger))
            self.load_skills()
            self.tools = tools = build_registry(
                self.settings, self.memory, lambda: self.live.current, skills=self.skills
            )
            tools.timed = lambda name, seconds: metrics.tool_seconds.labels(name).observe(seconds)
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
            speech = self.speech = Speech(self.live)  # voice notes heard, replies spoken (settings.speech)
            questions = self.questions = Questions()
            manager = self.manager = SessionManager(
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
                    tracing=tracing,
                    speech=speech,
                )
            )
            self.manager.on_session_stopped(HeapTrimmer(io.loop).session_stopped)
            journal.on_lease_lost = self._lease_lost
            reminders = make_reminders(self.settings)
            self.io.run(reminders.open())
            self.reminders = reminders
            routing = self._join_cluster(journal, manager, token) if uses_postgres(self.settings) else None
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
            app = control_app(
                api,
                gateway.operator,
                gateway.approvals,
                gateway.control,
                self.mcp,
                token,
                ui=self.settings.ui.enabled,
            )
            # Sessions that were active at a graceful stop (and any with unanswered input)
            # recover now, before channels deliver and before READY=1. In a cluster, once
            # this node listens: a lease it takes while it cannot be reached would hold the
            # other nodes' requests for that session until it can.
            manifest = take_manifest(self.settings)
            node = self.settings.cluster.node if self.cluster is not None else None

            def warm() -> Coroutine[Any, Any, int]:
                return warm_sessions(journal, manager, manifest, node=node)

            warmed = 0
            if self.cluster is None:
                warmed = self.io.run(warm(), WARM_TIMEOUT_S + 10)
            self.channels.check(build_adapters(self.settings, gateway.chat))
            hook_routes = self.channels.routes()
            if self.settings.gateway.webhook_host is None:
                app.router.add_routes(hook_routes)
            else:  # only on the second listener: the control API's port need not be exposed
                self._webhook_app = webhook_app(hook_routes)
            leases = journal if self.cluster is not None else None  # a one-node channel's lease
            self.io.run(self.channels.start(leases, retry_s=self.settings.cluster.lease_s / 3))
            self.io.run(self._serve(app))
            self._lock.listening(self._client_url())
            if self.cluster is not None:
                warmed = self.io.run(warm(), WARM_TIMEOUT_S + 10)
            # Channels listen now: the warmed sessions resume their turns (and replies reach them).
            self.io.run(call(self.manager.release_held))
            # Sub-agents' answers recorded before a crash go to their parents now.
            self.io.run(call(self.subagents.start))
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
        if self.io is not None:
            self._provider_watch = announce_provider(
                self.settings, self.io, self.provider, self.provider_health
            )
        log.info(
            "netclaw listening on %s (data %s, %d session(s) resumed) in %.0f ms",
            self.base_url,
            self.settings.data_dir,
            warmed,
            (time.perf_counter() - started) * 1000,
        )

    def load_skills(self) -> None:
        """(Re)load the skills from disk and put them in force (each skipped one logged)."""
        swap_skills(self.skills, self.settings.skills)

    def _join_cluster(self, journal: Journal, manager: SessionManager, token: str) -> Routing:
        """Several nodes on one database: forwarding, routing and this node's membership."""
        from netclaw.persistence.postgres import PostgresJournal

        assert isinstance(journal, PostgresJournal)
        cluster = self.settings.cluster
        self.forwarder = Forwarder(cluster.node, token, turn_timeout_s=self.settings.session.turn_timeout_s)
        routing = Routing(cluster.node, self.forwarder, journal, manager, hold_s=cluster.hold_for_s)
        self.cluster = ClusterNode(
            cluster,
            journal.leases,
            manager,
            routing,
            pinned=lambda session_id: one_node(channel_of(session_id)),
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

    def apply_log_config(self) -> None:
        config = self.settings.log
        configure_logging(self.log_level or config.level, config.format, config.libraries)

    def _lease_lost(self, name: str) -> None:
        """Another node took a lease of ours over (on the loop): a session's, or a channel's."""
        if not self.channels.lease_lost(name) and self.manager is not None:
            self.manager.lease_lost(name)

    def _looked(self) -> Looked:
        return Looked(
            self.channels,
            self.provider_health,
            self.skills,
            self.journal,
            self.manager,
            self.cluster,
            self.mcp,
            self.memory,
        )

    def health(self) -> dict[str, Any]:
        """``/healthz`` beyond the sessions (netclaw/daemon/_health.py)."""
        return _health.health(self._looked())

    def _scraped_gauges(self) -> list[GaugeMetricFamily]:
        return _health.scraped_gauges(self._looked())

    def status_line(self) -> str:
        """systemd's STATUS= (on the loop)."""
        return _health.status_line(self._looked())

    async def _serve(self, app: web.Application) -> None:
        gateway = self.settings.gateway
        self._runner, self.port = await listen(app, gateway.host, gateway.port, "gateway.port")
        if self._webhook_app is not None:
            assert gateway.webhook_host is not None and gateway.webhook_port is not None
            self._webhook_runner, self.webhook_port = await listen(
                self._webhook_app, gateway.webhook_host, gateway.webhook_port, "gateway.webhook_port"
            )
            log.info("webhooks listening on %s:%d", gateway.webhook_host, self.webhook_port)

    # -- shutdown, in reverse -----------------------------------------------------------------

    def stop(self) -> None:
        """Reverse order of start. Each step runs even if an earlier one failed, so no
        actor outlives the loop it needs to finish."""
        io = self.io
        for background in (self.heartbeat_task, self._rescuer, self._provider_watch):
            if background is not None:
                background.cancel()
        self.heartbeat_task = self._rescuer = self._provider_watch = None
        if io is not None:
            if self.cluster is not None:
                leave_cluster(
                    io,
                    self.cluster,
                    listening=self._runner is not None,
                    drain_s=self.settings.cluster.drain_s,
                )
            for runner in (self._webhook_runner, self._runner):
                if runner is not None:
                    step("stop listening", io.run, stop_sites(runner), 5)
            if self.scheduler is not None:  # what submits input by itself stops before the channels
                step("stop the scheduler", io.run, self.scheduler.stop(), 5)
            if self.subagents is not None:  # a report cut short is delivered again after a restart
                step("stop the sub-agent courier", io.run, call(self.subagents.stop), 5)
            if self.channels.adapters:
                step("stop adapters", io.run, self.channels.stop(), 15)
            if self.manager is not None:
                stop_sessions(io, self.manager, self.settings if self.journal is not None else None)
            for runner in (self._webhook_runner, self._runner):
                if runner is not None:
                    step("stop the HTTP server", io.run, runner.cleanup(), 15)
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
        self.speech = None
        self.memory = None
        self.forwarder = None
        self.cluster = None
        if io is not None:
            io.stop()
        self.io = None
        KNOWN.release(self)
        self._lock.release()
        if survivors := surviving_sessions():
            log.error("%d session actor(s) survived shutdown: %s", len(survivors), survivors)

    def _close_resources(self, io: IoLoop) -> None:
        """What the sessions used, in reverse order of opening; each step isolated."""
        # The sessions' last spans have ended: export them (for a few seconds at most).
        step("stop the tracer", self.tracing.shutdown)
        self.tracing = OFF
        close_all(
            io,
            [
                ("stop MCP servers", self.mcp.stop() if self.mcp else None, 10),
                *(
                    (f"close provider {name}", provider.aclose(), 5)
                    for name, provider in self.providers.items()
                ),
                ("close the speech endpoints", self.speech.close() if self.speech else None, 5),
                ("close the memory store", self.memory.close() if self.memory else None, 5),
                ("close the reminder store", self.reminders.close() if self.reminders else None, 5),
                ("close the audit and token store", self.access.close() if self.access else None, 5),
                ("close the journal", self.journal.close() if self.journal else None, 10),
                ("close the links to other nodes", self.forwarder.close() if self.forwarder else None, 5),
            ],
        )

    # -- the foreground process ---------------------------------------------------------------

    def reload(self) -> None:
        """Re-read the config and apply what can change in a running daemon: sessions
        (at their next turn), audiences, agent, history, webhook routes, chat allowlists,
        and the skills on disk.
        The log line says what changed, what applied and what needs a restart."""
        self.notifier.reloading()
        try:
            new = load_settings(self.config_path)
        except ConfigError as exc:
            log_lines(log, logging.ERROR, f"config reload failed; keeping the running config:\n{exc}")
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


async def _sync_schedules(scheduler: Scheduler, schedules: Mapping[str, ScheduleConfig]) -> None:
    try:
        await scheduler.sync_config(schedules)
    except Exception:  # the reload has been applied; say so rather than lose it in a future
        log.exception("reload: the schedules could not be applied; the scheduler keeps the previous ones")
