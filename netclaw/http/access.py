"""Who may call the control API, and the API of access itself: bearer tokens resolved to a
speaker and a role (netclaw/security/roles.py), each route's permission checked before its
handler, and the routes for named API tokens and the audit trail.

The control token is the ``admin`` role. A named token (``netclaw tokens add NAME --role
R``) is looked up by its SHA-256 in the database, and acts as ``token:NAME`` in role R.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from netclaw.cluster import SUBMIT_PATH
from netclaw.config import Settings
from netclaw.errors import ApiError, NotPermitted
from netclaw.gateway import Auditing, check_session_id
from netclaw.http.web import Handler, parse_since, read_body, read_json_object
from netclaw.persistence import AccessLogic
from netclaw.security.roles import ADMIN, CONTROL, Permission, known_roles, may, refusal

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 65_536
TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True)
class Principal:
    speaker: str  # "control" or "token:NAME"
    role: str


CONTROL_PRINCIPAL = Principal(CONTROL, ADMIN)


# aiohttp ≥ 3.12 types request storage keys; older ones take a string.
_KEY: Any = web.RequestKey("principal", Principal) if hasattr(web, "RequestKey") else "principal"


def principal(request: web.Request) -> Principal:
    found = request.get(_KEY)
    return found if isinstance(found, Principal) else CONTROL_PRINCIPAL


def actor(request: web.Request) -> str:
    """Who did it, for records: a token's name, or "api" for the control token (as always)."""
    who = principal(request)
    return "api" if who.speaker == CONTROL else who.speaker


def permission_for(method: str, path: str) -> Permission:
    """What a request needs (the route table is small enough to say it here)."""
    # The cluster's internal routes (a forwarded message, a node taking a session over) are
    # for nodes, which hold the control token.
    if path == SUBMIT_PATH or path.startswith(("/api/tokens", "/api/audit", "/api/cluster/sessions/")):
        return "admin"
    if method in ("GET", "HEAD"):
        return "read"
    if method == "DELETE" or (method == "PATCH" and path.startswith("/api/memories/")):
        return "manage"  # forgetting, or rewording what the agent will recall
    if "/approvals/" in path or "/questions/" in path:  # a tool's question is a go-ahead too
        return "approve"
    # Running the daemon, not chatting: reconnecting an MCP server, draining or resuming a
    # node, moving a session to another node.
    if path.startswith(("/api/mcp/", "/api/cluster/")) or path.endswith("/move"):
        return "manage"
    if path.endswith("/reminders"):
        # A reminder's turn has no speaker, so it runs with the audience's rules alone:
        # scheduling one is for people trusted with those.
        return "manage"
    return "chat"  # messages, cancel and reset (these also as commands)


class Access:
    def __init__(
        self,
        store: AccessLogic | None,
        audit: Auditing,
        control_token: str,
        settings_of: Callable[[], Settings],
    ) -> None:
        self._store = store  # named tokens and the audit trail (None: the daemon keeps neither)
        self._audit = audit
        self._token = control_token.encode()
        self._settings_of = settings_of

    async def authenticate(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "unauthorized", "missing 'Authorization: Bearer <token>' header")
        secret = given.strip()
        if hmac.compare_digest(secret.encode("utf-8", "surrogateescape"), self._token):
            return CONTROL_PRINCIPAL
        store = self._store
        if store is not None and secret.isascii():
            token = await store.token(secret)
            if token is not None:
                return Principal(f"token:{token.name}", token.role)
        raise ApiError(
            401, "unauthorized", "the token is wrong (neither the control token nor a named token)"
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api/"):
            who = await self.authenticate(request)
            request[_KEY] = who
            needed = permission_for(request.method, request.path)
            if not may(self._settings_of(), who.role, needed):
                raise NotPermitted(refusal(who.role, _what(needed)))
        return await handler(request)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/api/audit", self.audit)
        app.router.add_get("/api/tokens", self.list_tokens)
        app.router.add_post("/api/tokens", self.add_token)
        app.router.add_delete("/api/tokens/{name}", self.remove_token)

    async def audit(self, request: web.Request) -> web.Response:
        store = self._store
        if store is None:
            raise ApiError(503, "access_unavailable", "this daemon keeps no audit trail")
        session = request.query.get("session")
        if session is not None:
            check_session_id(session)
        since = request.query.get("since")
        raw_limit = request.query.get("limit", "1000")
        if not (raw_limit.isascii() and raw_limit.isdigit()) or not 1 <= int(raw_limit) <= 100_000:
            raise ApiError(400, "invalid_limit", "limit must be a whole number from 1 to 100000")
        entries = await store.entries(
            since=parse_since(since) if since else None, session_id=session, limit=int(raw_limit)
        )
        return web.json_response([e.to_json() for e in entries])

    async def list_tokens(self, request: web.Request) -> web.Response:
        store = self._store
        if store is None:
            raise ApiError(503, "access_unavailable", "this daemon keeps no tokens")
        return web.json_response([t.to_json() for t in await store.tokens()])

    async def add_token(self, request: web.Request) -> web.Response:
        store = self._store
        if store is None:
            raise ApiError(503, "access_unavailable", "this daemon keeps no tokens")
        body = read_json_object(await read_body(request, MAX_BODY_BYTES))
        name, role = body.get("name"), body.get("role")
        if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
            raise ApiError(400, "invalid_name", "'name' must be 1-64 letters, digits, '.', '_' or '-'")
        roles = known_roles(self._settings_of())
        if role not in roles:
            raise ApiError(
                400, "invalid_role", f"'role' must be one of the configured roles: {', '.join(roles)}"
            )
        token = await store.add_token(name, str(role))
        await self._audit.audit("token_added", actor(request), name=name, role=role)
        log.info("API token %s added (role %s)", name, role)
        return web.json_response({"name": name, "role": role, "token": token}, status=201)

    async def remove_token(self, request: web.Request) -> web.Response:
        store = self._store
        if store is None:
            raise ApiError(503, "access_unavailable", "this daemon keeps no tokens")
        name = request.match_info["name"]
        if not await store.remove_token(name):
            raise ApiError(404, "token_not_found", f"no token named {name[:64]!r}")
        await self._audit.audit("token_removed", actor(request), name=name)
        log.info("API token %s removed", name)
        return web.Response(status=204)


def _what(permission: Permission) -> str:
    return {
        "read": "reading sessions",
        "chat": "sending messages or steering sessions",
        "approve": "deciding on tool calls",
        "manage": "deleting sessions, memories or reminders",
        "admin": "managing tokens or reading the audit trail",
    }.get(permission, permission)
