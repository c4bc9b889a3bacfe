"""Steps of start-up and shutdown that need no more of the daemon than they are handed:
today's spend before this process, the sessions to warm, the control listener's
application, and shutdown's isolated steps (one failing never skips the next)."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import pykka
from aiohttp import web

from netclaw.cluster.membership import ClusterNode
from netclaw.config import Settings, SkillsConfig, TelemetryConfig
from netclaw.errors import ConfigError
from netclaw.gateway import Auditing, Operator, ToolQuestions
from netclaw.http.api import Api
from netclaw.http.mcp import mcp_routes
from netclaw.http.questions import question_routes
from netclaw.mcp import McpHub
from netclaw.persistence import Journal, Manifest, save_manifest
from netclaw.process.runtime import IoLoop
from netclaw.process.traces import INSTALL_HINT, OFF, Tracing
from netclaw.providers import Provider
from netclaw.sessions import SessionActor, SessionManager
from netclaw.skills import LiveSkills, load_skills
from netclaw.spend import SpendLedger, Spent, next_midnight, utc_day
from netclaw.ui import UI_PREFIX, control_room
from netclaw.workers.provider_health import ProviderHealth

log = logging.getLogger(__name__)

WARM_CONCURRENCY = 16  # sessions recovering at once at start-up
WARM_TIMEOUT_S = 120.0
ACTOR_STOP_TIMEOUT_S = 10.0


def start_tracing(config: TelemetryConfig) -> Tracing:
    """The daemon's tracer: OFF unless ``telemetry.traces``; then OpenTelemetry's SDK, imported
    only now (the ``telemetry`` extra)."""
    if not config.traces:
        return OFF
    try:
        from netclaw.process.otel import Running
    except ImportError as exc:
        raise ConfigError(
            f"telemetry.traces is on, but OpenTelemetry is not installed ({exc.name or exc} is missing): "
            f"{INSTALL_HINT}, or set telemetry.traces to false"
        ) from exc
    tracing = Running(
        capture_content=config.capture_content,
        endpoint=config.endpoint,
        service_name=config.service_name,
        max_queue=config.max_queue,
    )
    log.info(
        "traces: exported over OTLP/HTTP to %s%s",
        config.traces_url(),
        ", with message and tool content" if config.capture_content else "",
    )
    return tracing


async def seed_ledger(journal: Journal, ledger: SpendLedger) -> None:
    """What was spent today before this process started counts toward the daemon's cap."""
    now = time.time()
    since = next_midnight(now) - 86_400
    rows = await journal.usage("day", since)
    ledger.seed(
        utc_day(now), Spent(sum(r.input_tokens + r.output_tokens for r in rows), sum(r.cost for r in rows))
    )


async def warm_sessions(
    journal: Journal, manager: SessionManager, manifest: Manifest | None, *, node: str | None
) -> int:
    """The manifest's sessions (a graceful stop) and those with admitted input whose turn
    never finished (a crash) recover, WARM_CONCURRENCY at a time. The manifest's learn
    on their first model call that a restart interrupted them. ``node``: this node's name
    in a cluster, where the sessions other nodes hold run their turns there: only its own
    (restarted before its leases ran out) and those nobody holds are this node's to take
    (claiming one merely between owners before this node listens would hold its requests
    until it does)."""
    pending = await (
        journal.orphans(mine=node) if node is not None else journal.sessions_with_pending_input()
    )
    resumed = frozenset(manifest.session_ids) if manifest is not None else frozenset()
    ordered = [*sorted(resumed), *(sid for sid in pending if sid not in resumed)]
    return await manager.warm_all(
        ordered,
        concurrency=WARM_CONCURRENCY,
        resumed_at=manifest.stopped_at if manifest is not None else None,
        resumed=resumed,
        timeout_s=WARM_TIMEOUT_S,
    )


def control_app(
    api: Api,
    operator: Operator,
    questions: ToolQuestions,
    audit: Auditing,
    mcp: McpHub,
    token: str,
    *,
    ui: bool,
) -> web.Application:
    """The control listener's application: the API, the control room (never on the webhook
    listener), the MCP routes and the routes of tools' questions."""
    app = api.app()
    if ui:
        room = control_room(operator, token, scheduler=api.scheduler, health=api.health)
        app.add_subapp(UI_PREFIX, room)
    app.router.add_routes(mcp_routes(mcp))
    app.router.add_routes(question_routes(questions, audit))
    return app


def step(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """One step of shutdown: a failure is logged, and the next step runs."""
    try:
        return fn(*args)
    except Exception:
        log.exception("shutdown: could not %s", what)
        return None


def close_all(io: IoLoop, closers: Iterable[tuple[str, Any, float]]) -> None:
    """Close what the sessions used, each in its own step: ``(what, awaitable or None, timeout)``."""
    for what, closing, timeout in closers:
        if closing is not None:
            step(what, io.run, closing, timeout)


async def stop_sites(runner: web.AppRunner) -> None:
    for site in list(runner.sites):
        await site.stop()


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a loop-confined function on the loop (from another thread via ``IoLoop.run``)."""
    return fn(*args)


def surviving_sessions() -> list[pykka.ActorRef[Any]]:
    """Session actors still alive (after shutdown: none should be)."""
    return [ref for ref in pykka.ActorRegistry.get_all() if ref.actor_class is SessionActor]


def swap_skills(skills: LiveSkills, config: SkillsConfig) -> None:
    """(Re)load the skills from disk and put them in force; each skipped one is logged with
    its file and field (the daemon runs on without it)."""
    loaded = load_skills(config)
    skills.swap(loaded)
    for problem in loaded.problems:
        log.error("skill skipped: %s", problem)
    if loaded.skills or loaded.problems:
        log.info("skills: %s", ", ".join(loaded.names) or "none loaded")


def announce_provider(
    settings: Settings, io: IoLoop, provider: Provider | None, health: ProviderHealth
) -> concurrent.futures.Future[None] | None:
    """Say which model this daemon talks to, and warn early when it cannot: an unset key
    variable, an unreachable server, a model it does not have. The check goes on in the
    background (``/healthz``'s ``provider``): its future is returned."""
    main = settings.models.main
    config = settings.providers[main.provider]
    where = "built in" if config.type == "demo" else f"at {config.base_url}"
    log.info("provider %s (%s %s), model %s", main.provider, config.type, where, main.model)
    if missing := config.missing_key():
        log.warning("provider %s: %s", main.provider, missing)
    return io.submit(health.watch(provider)) if provider is not None else None


def leave_cluster(io: IoLoop, cluster: ClusterNode, *, listening: bool, drain_s: float) -> None:
    """Drain while still listening (what reaches this node meanwhile goes to the others),
    then stop looking at the registry."""
    if listening:
        step("drain (hand the sessions to other nodes)", io.run, cluster.drain(stopping=True), drain_s + 15)
    step("stop the cluster view", io.run, cluster.stop(), 5)


def stop_sessions(io: IoLoop, manager: SessionManager, manifest_for: Settings | None) -> None:
    """Save the warm-restart manifest (``manifest_for``: the settings naming where, while the
    journal is open), then stop every session and wait for its actor. Before the HTTP
    server finishes: a request waiting for a turn (?wait=1) is answered now ("accepted; the
    reply comes after restart"), not at a timeout."""
    if manifest_for is not None:
        step("save the warm-restart manifest", _save_manifest, io, manager, manifest_for)
    refs = step("stop sessions", io.run, call(manager.shutdown), 5) or []
    for ref in refs:
        ref.actor_stopped.wait(ACTOR_STOP_TIMEOUT_S)


def _save_manifest(io: IoLoop, manager: SessionManager, settings: Settings) -> None:
    active = io.run(call(manager.active_sessions), 5)
    save_manifest(settings, active, time.time())
    log.info("warm-restart manifest: %d active session(s)", len(active))
