"""What every page of the control room shares: the gateway's operator roles (input,
control, reads, approvals) and the scheduler, logins, the templates and how a page or a
fragment is rendered, and the secrets to scrub.

Runs on the I/O loop; every read goes through the gateway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from netclaw import __version__
from netclaw.config import Settings
from netclaw.gateway import Operator
from netclaw.http.web import SseStreams
from netclaw.security.redact import Scrubber
from netclaw.ui._auth import COOKIE, Login, Logins, LoginThrottle
from netclaw.ui._charts import fmt
from netclaw.ui._timeline import seconds
from netclaw.ui._views import path_id, utc, when
from netclaw.workers.scheduler import Scheduler

HERE = Path(__file__).parent
PREFIX = "/ui"

HealthReport = Callable[[], Mapping[str, Any]]  # what /healthz answers


class Room:
    """Everything the pages share: the operator's roles, the scheduler, logins, templates."""

    def __init__(
        self,
        operator: Operator,
        token: str,
        *,
        scheduler: Scheduler | None = None,
        health: HealthReport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.intake, self.control, self.reads = operator.intake, operator.control, operator.reads
        self.approvals = operator.approvals
        self.scheduler = scheduler
        self.health = health
        self.clock = clock
        self._token = token
        self.logins = Logins(token, operator.reads.settings.ui.login_hours * 3600, clock)
        self.throttle = LoginThrottle()
        self.streams = SseStreams()
        self._scrubber: Scrubber | None = None
        self._scrubbed_for: Settings | None = None
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            when=lambda ts: when(ts, self.clock()), utc=utc, fmt=fmt, sid=path_id, seconds=seconds
        )

    @property
    def settings(self) -> Settings:
        return self.reads.settings

    async def scrubber(self) -> Scrubber:
        settings = self.settings
        if self._scrubber is None or self._scrubbed_for is not settings:
            # Reading secret files is file I/O: not on the loop.
            self._scrubber = await asyncio.to_thread(Scrubber.of, settings, self._token)
            self._scrubbed_for = settings
        return self._scrubber

    # -- rendering ------------------------------------------------------------------------------

    def render(
        self, request: web.Request, template: str, *, status: int = 200, **context: Any
    ) -> web.Response:
        page = self.templates.get_template(template)
        context.setdefault("title", "netclaw")
        login = self.login_of(request)
        html = page.render(
            csrf=self.logins.csrf(login) if login is not None else "",
            logged_in=login is not None,
            path=request.path,
            version=__version__,
            **context,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def login_of(self, request: web.Request) -> Login | None:
        """The login the request's cookie proves (the guard let only such requests in)."""
        return self.logins.check(request.cookies.get(COOKIE))

    def fragment_or_page(
        self, request: web.Request, template: str, fragments: Mapping[str, str], /, **context: Any
    ) -> web.Response:
        """An htmx request naming one of ``fragments`` (target id → template) gets that part
        alone; anything else, the whole page."""
        target = request.headers.get("HX-Target") if "HX-Request" in request.headers else None
        return self.render(request, fragments.get(target or "", template), **context)

    def error_page(self, request: web.Request, status: int, message: str) -> web.Response:
        return self.render(
            request, "error.html", status=status, status_code=status, message=message, title=f"Error {status}"
        )

    async def after_form(
        self, request: web.Request, back: str, fragment: Callable[[], Awaitable[web.Response]]
    ) -> web.Response:
        """After a form: htmx gets the fragment to swap in; a plain form post is sent back
        to ``back`` (post/redirect/get)."""
        if "HX-Request" in request.headers:
            return await fragment()
        raise web.HTTPSeeOther(back)
