"""The control room as an aiohttp application, mounted by the daemon under ``/ui`` of the
control listener only (the webhook listener never serves it): the guard, the login, the
static files, the session pages and the others."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from netclaw.gateway import Operator
from netclaw.ui._guard import Guard
from netclaw.ui._pages import OtherPages
from netclaw.ui._room import HERE, HealthReport, Room
from netclaw.ui._session_pages import SessionPages
from netclaw.workers.scheduler import Scheduler


def control_room(
    operator: Operator,
    token: str,
    *,
    scheduler: Scheduler | None = None,
    health: HealthReport | None = None,
    clock: Callable[[], float] = time.time,
) -> web.Application:
    room = Room(operator, token, scheduler=scheduler, health=health, clock=clock)
    guard = Guard(room)
    app = web.Application(middlewares=[guard.middleware])
    app.router.add_routes(guard.routes())
    app.router.add_static("/static", HERE / "static", append_version=False)
    app.router.add_routes(SessionPages(room).routes())
    app.router.add_routes(OtherPages(room).routes())
    app.on_shutdown.append(room.streams.close_all)
    return app
