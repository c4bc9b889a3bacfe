"""The control room's guard and its door: every request but the login page and the static
files needs a valid login cookie, every state change the login's CSRF token and our own
origin; every answer gets strict security headers and has its secrets scrubbed; errors
are pages, not JSON. The login (slowed per address after failures) and logout pages."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from aiohttp import web

from netclaw.errors import ApiError, ApprovalError, InvalidInput, NetclawError, SessionUnavailable
from netclaw.ui._auth import COOKIE, Login
from netclaw.ui._room import PREFIX, Room

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 256 * 1024
PUBLIC = ("/ui/login", "/ui/static/")
# Content: only our own files; nothing may frame the pages; forms post only here.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Guard:
    def __init__(self, room: Room) -> None:
        self.room = room
        self.logins = room.logins
        self.throttle = room.throttle

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("", self._home),
            web.get("/", self._home),
            web.get("/login", self._login_page),
            web.post("/login", self._login),
            web.post("/logout", self._logout),
        ]

    # -- the guard ------------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await self._guarded(request, handler)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise  # redirects
            response = self.room.error_page(request, exc.status, exc.reason)
        except ApiError as exc:
            response = self.room.error_page(request, exc.status, exc.message)
        except InvalidInput as exc:
            response = self.room.error_page(request, 400, str(exc))
        except ApprovalError as exc:
            response = self.room.error_page(request, exc.status, str(exc))
        except SessionUnavailable as exc:
            response = self.room.error_page(request, 503, str(exc))
        except NetclawError as exc:
            log.warning("control room: %s %s failed: %s", request.method, request.path, exc)
            response = self.room.error_page(request, 500, str(exc))
        response.headers.update(SECURITY_HEADERS)
        if isinstance(response, web.Response) and response.text is not None:
            response.text = (await self.room.scrubber()).scrub(response.text)
        return response

    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(PUBLIC):
            return await handler(request)
        login = self.logins.check(request.cookies.get(COOKIE))
        if login is None:
            return self._not_logged_in(request)
        if request.method not in ("GET", "HEAD"):
            await self._check_post(request, login)
        return await handler(request)

    def _not_logged_in(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.headers.get("Sec-Fetch-Site") == "cross-site":
            # A link from elsewhere (a chat message): a SameSite=Strict cookie is not sent on
            # that navigation. Ask again from here, where it is.
            return self.room.render(request, "continue.html", here=request.path_qs, title="Continue")
        if request.method != "GET" or "HX-Request" in request.headers:
            response = self.room.error_page(request, 401, "log in first")
            response.headers["HX-Redirect"] = f"{PREFIX}/login"
            return response
        if request.headers.get("Accept", "").startswith("text/event-stream"):
            return self.room.error_page(request, 401, "log in first")
        raise web.HTTPSeeOther(f"{PREFIX}/login?next={quote(request.path_qs, safe='')}")

    async def _check_post(self, request: web.Request, login: Login) -> None:
        """A state change must come from our own pages: same origin, with the login's CSRF token."""
        if not self._same_origin(request):
            raise ApiError(403, "cross_site", "refused: this form was not sent from the control room")
        if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
            raise ApiError(413, "body_too_large", f"a form may carry at most {MAX_FORM_BYTES} bytes")
        given = request.headers.get("X-CSRF-Token")
        if given is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            field = form.get("csrf")
            given = field if isinstance(field, str) else None
        if not self.logins.csrf_matches(login, given):
            raise ApiError(
                403, "csrf", "refused: the form's security token is missing or stale; reload the page"
            )

    @staticmethod
    def _same_origin(request: web.Request) -> bool:
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = request.headers.get("Origin")
        if origin is None or origin == "null":
            return origin is None  # "null": a sandboxed or privacy-stripped context
        parts = urlsplit(origin)
        return parts.netloc == request.host

    # -- login ----------------------------------------------------------------------------------

    async def _home(self, request: web.Request) -> web.Response:
        raise web.HTTPSeeOther(f"{PREFIX}/sessions")

    async def _login_page(self, request: web.Request) -> web.Response:
        if self.logins.check(request.cookies.get(COOKIE)) is not None:
            raise web.HTTPSeeOther(_safe_next(request.query.get("next")))
        return self.room.render(
            request, "login.html", next=_safe_next(request.query.get("next")), message=None, title="Log in"
        )

    async def _login(self, request: web.Request) -> web.Response:
        address = request.remote or "?"
        if not self._same_origin(request):
            return self.room.render(
                request,
                "login.html",
                status=403,
                next=f"{PREFIX}/sessions",
                title="Log in",
                message="Refused: this form was not sent from the control room.",
            )
        wait = self.throttle.wait_s(address)
        if wait > 0:
            response = self.room.render(
                request,
                "login.html",
                status=429,
                next=f"{PREFIX}/sessions",
                title="Log in",
                message=f"Too many failed logins from your address: try again in {wait:.0f} s.",
            )
            response.headers["Retry-After"] = str(max(1, round(wait)))
            return response
        if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
            raise ApiError(413, "body_too_large", "the login form is too large")
        form = await request.post()
        token, target = form.get("token"), _safe_next(_text(form.get("next")))
        if not isinstance(token, str) or not self.logins.token_matches(token):
            wait = self.throttle.failed(address)
            log.warning("control room: a failed login from %s (next try in %.0f s)", address, wait)
            return self.room.render(
                request,
                "login.html",
                status=401,
                next=target,
                title="Log in",
                message=f"That is not the control token. Next try in {wait:.0f} s.",
            )
        self.throttle.succeeded(address)
        cookie, _ = self.logins.issue()
        log.info("control room: login from %s", address)
        response = web.HTTPSeeOther(target)
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=int(self.logins.lifetime_s),
            path=PREFIX,
            httponly=True,
            samesite="Strict",
            secure=request.secure or request.headers.get("X-Forwarded-Proto") == "https",
        )
        raise response

    async def _logout(self, request: web.Request) -> web.Response:
        login = self.room.login_of(request)
        if login is not None:
            self.logins.revoke(login)
        response = web.HTTPSeeOther(f"{PREFIX}/login")
        response.del_cookie(COOKIE, path=PREFIX)
        raise response


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _safe_next(target: str | None) -> str:
    """Where to go after logging in: a page of the control room, never another site."""
    if target and target.startswith(f"{PREFIX}/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{PREFIX}/sessions"
