"""Webhooks: ``POST /webhooks/{route}`` per ``webhooks.routes`` (docs/channels.md;
every answer: docs/http-api.md, "Webhooks").

Each route authenticates (HMAC-SHA256 over ``"<timestamp>." + body`` within ±300 s, or
a bearer secret; constant-time comparison), limits its body size and request rate,
picks the session key and text out of the JSON body with a ``$.a.b`` path, and hands
the text to the gateway marked as external content: webhook text is untrusted, and a
webhook session only gets the tools its audience grants (public by default).

Hardening: the auth headers are checked before the body is read; a signed request is
accepted once (its signature is remembered durably for its timestamp window, so a replay
is the same delivery whatever its Idempotency-Key); a key that comes back with another
body is a 409; a route whose secret is missing answers 503 and the others work.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from adapters.base import AdapterStatus
from adapters.webhook._config import WebhookRoute, WebhooksConfig
from netclaw.config import DeliverConfig, Settings
from netclaw.config.credentials import read_secret
from netclaw.errors import AdapterError, ApiError, NetclawError
from netclaw.gateway import ChatInput, Inbound
from netclaw.http.web import (
    idempotency_key,
    identity_for,
    read_body,
    read_json_object,
    submission_response,
    wait_flag,
)
from netclaw.messages import mark_external
from netclaw.persistence import DeliveryLog, make_deliveries

log = logging.getLogger(__name__)

TIMESTAMP_TOLERANCE_S = 300
MAX_KEY_CHARS = 120
DELIVER_LOOKBACK_S = 3600.0  # a retried delivery finds the thread its first try opened
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]")
_INDEX = re.compile(r"[0-9]{1,9}")
_STAMP = re.compile(r"[0-9]{1,12}")


def json_path(body: Any, path: str) -> Any:
    """``$.a.b`` → body["a"]["b"]; None when any step is missing."""
    if path in ("$", ""):
        return body
    if not path.startswith("$."):
        raise ValueError(f"JSON path {path!r} must start with '$.'")
    node = body
    for step in path[2:].split("."):
        if isinstance(node, Mapping) and step in node:
            node = node[step]
        elif isinstance(node, list) and _INDEX.fullmatch(step) and int(step) < len(node):
            node = node[int(step)]
        else:
            return None
    return node


def session_key(value: Any) -> str:
    """A URL-safe session key from any JSON scalar (long or odd keys keep a hash, so two
    different keys never share a session)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    # "surrogatepass": a JSON string may hold a lone surrogate, which strict UTF-8 refuses.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    safe = _UNSAFE.sub("-", text)[:MAX_KEY_CHARS]
    if safe != text:
        safe = f"{safe[: MAX_KEY_CHARS - 13]}-{digest}"
    return safe or digest


def external(route: str, text: str) -> str:
    """Webhook text as the model sees it: marked as untrusted data from outside."""
    return mark_external(f"webhook '{route}'", text)


class _RateLimit:
    """A sliding one-minute window."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._hits: deque[float] = deque()

    def retry_after(self, now: float) -> float | None:
        while self._hits and now - self._hits[0] >= 60:
            self._hits.popleft()
        if len(self._hits) >= self.per_minute:
            return 60 - (now - self._hits[0])
        self._hits.append(now)
        return None


class WebhookAdapter:
    name = "webhooks"

    def __init__(self, settings: Settings, gateway: ChatInput) -> None:
        self.settings = settings  # start-up values: the database path
        self.gateway = gateway
        self._limits: dict[str, _RateLimit] = {}
        self._deliveries: DeliveryLog | None = None
        self._status = AdapterStatus("starting")
        # Secrets once found, by variable: a secret from a file is not read again per request.
        self._secrets: dict[str, bytes] = {}

    @property
    def routes_config(self) -> dict[str, WebhookRoute]:
        """The live routes: a reload (SIGHUP) adds, changes and removes routes at once."""
        return WebhooksConfig.of(self.gateway.settings).routes

    def _limit(self, name: str, route: WebhookRoute) -> _RateLimit:
        limit = self._limits.get(name)
        if limit is None or limit.per_minute != route.rate_limit_per_minute:
            limit = self._limits[name] = _RateLimit(route.rate_limit_per_minute)
        return limit

    # -- the Adapter contract ---------------------------------------------------------------

    def check(self) -> None:
        for name, route in self.routes_config.items():
            for path in (route.session_key, route.text):
                if path is not None and not path.startswith("$"):
                    raise AdapterError(f"webhooks.routes.{name}: JSON path {path!r} must start with '$'")
        missing = self.disabled_routes()
        if missing:
            # Only those routes answer 503 route_disabled; the others work.
            log.warning("webhook route(s) disabled, their secret is not set: %s", ", ".join(missing))

    def disabled_routes(self) -> list[str]:
        return [
            f"{name} ({route.auth.secret_env})"
            for name, route in self.routes_config.items()
            if not read_secret(route.auth.secret_env)
        ]

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/webhooks/{route}", self.handle)]

    async def probe(self) -> str:
        self.check()
        missing = self.disabled_routes()
        if missing:
            raise AdapterError(f"route(s) disabled, their secret is not set: {', '.join(missing)}")
        return f"{len(self.routes_config)} route(s), each with its secret set"

    async def start(self) -> None:
        deliveries = make_deliveries(self.settings)
        await deliveries.open()
        self._deliveries = deliveries
        detail = f"{len(self.routes_config)} route(s)"
        if missing := self.disabled_routes():
            detail += f"; disabled (secret not set): {', '.join(missing)}"
        self._status = AdapterStatus("running", detail)

    async def stop(self) -> None:
        if self._deliveries is not None:
            await self._deliveries.close()
            self._deliveries = None
        self._status = AdapterStatus("stopped")

    def status(self) -> AdapterStatus:
        return self._status

    # -- a delivery -------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["route"]
        route = self.routes_config.get(name)
        if route is None:
            raise ApiError(404, "unknown_route", f"no webhook route {name!r}")
        secret = self._secret(route.auth.secret_env)
        if not secret:
            raise ApiError(503, "route_disabled", "this route's secret is not configured on the server")
        # Everything that can be checked without the body is, before reading it.
        stamp = _check_auth_headers(request, route, secret)
        body_bytes = await read_body(request, route.max_body_bytes)
        if stamp is not None:
            _check_signature(request, secret, body_bytes)
        wait_after = self._limit(name, route).retry_after(time.monotonic())
        if wait_after is not None:
            raise ApiError(
                429, "rate_limited", f"route {name!r} allows {route.rate_limit_per_minute} requests a minute"
            ).with_header("Retry-After", str(max(1, round(wait_after))))
        body = read_json_object(body_bytes)
        text = json_path(body, route.text)
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "invalid_text", f"the body has no text at {route.text} (a non-empty string)")
        session_id = self._session_of(name, route, body)
        # Every delivery has a key (the sender's, or one we make): a delivery whose answer
        # was lost can be retried with it and reaches the same session, recorded once.
        key = idempotency_key(request)
        deliveries = self._require_deliveries()
        replayed = False
        if stamp is not None:
            # A signed request seen before (a replay within the window, whatever its
            # Idempotency-Key) is the same delivery: the same key, so no second turn.
            signature = request.headers["X-Netclaw-Signature"]
            first = await deliveries.first_key_of(name, signature, key, stamp + TIMESTAMP_TOLERANCE_S)
            replayed, key = first != key, first
        if route.deliver is not None:
            session_id = await self._delivery_thread(name, route.deliver, key, text)
        if replayed or "Idempotency-Key" in request.headers or route.session_key is None or route.deliver:
            digest = hashlib.sha256(body_bytes).hexdigest()
            session_id = await deliveries.session_for(name, key, session_id, digest)
        admission, outcome = await self.gateway.submit(
            Inbound(session_id, external(name, text), user=f"webhook:{name}", identity=identity_for(key)),
            wait=wait_flag(request),
        )
        return submission_response(admission, outcome)

    def _secret(self, var: str) -> bytes:
        secret = self._secrets.get(var)
        if secret is None:
            secret = (read_secret(var) or "").encode()
            if secret:
                self._secrets[var] = secret
        return secret

    def _session_of(self, name: str, route: WebhookRoute, body: Any) -> str:
        if route.session_key is None:
            return f"webhook:{name}:{uuid.uuid4().hex[:16]}"  # each delivery its own session
        key_value = json_path(body, route.session_key)
        if key_value is None or isinstance(key_value, (dict, list)):
            raise ApiError(
                400,
                "invalid_session_key",
                f"the body has no session key at {route.session_key} (a string or number)",
            )
        return f"webhook:{name}:{session_key(key_value)}"

    def _require_deliveries(self) -> DeliveryLog:
        if self._deliveries is None:
            raise ApiError(503, "not_ready", "the webhook adapter is not started")
        return self._deliveries

    async def _delivery_thread(self, name: str, deliver: DeliverConfig, key: str, text: str) -> str:
        """A route with ``deliver``: a new thread in that chat channel is the session (the
        same one again for a retry with the same key, within an hour, on Slack)."""
        marker = hashlib.sha256(f"webhook|{name}|{key}".encode()).hexdigest()[:20]
        header = f"🔔 {name}: {text.strip().splitlines()[0][:200]}"
        try:
            return await self.gateway.open_thread(
                deliver.channel, deliver.to, header, key=marker, since=time.time() - DELIVER_LOOKBACK_S
            )
        except NetclawError as exc:
            raise ApiError(
                503, "delivery_unavailable", f"cannot open a thread in {deliver.channel} {deliver.to}: {exc}"
            ) from exc


_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")


def _check_auth_headers(request: web.Request, route: WebhookRoute, secret: bytes) -> int | None:
    """A bearer route's whole check; an HMAC route's headers (well-formed, in the window).
    Returns the HMAC timestamp (None for bearer). Raises 401."""
    if route.auth.type == "bearer":
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(_header_bytes(given.strip()), secret):
            raise ApiError(401, "unauthorized", "missing or wrong 'Authorization: Bearer <secret>'")
        return None
    raw_stamp = request.headers.get("X-Netclaw-Timestamp", "")
    if not _STAMP.fullmatch(raw_stamp):  # ASCII digits only: "²".isdigit() is True
        raise ApiError(401, "unauthorized", "X-Netclaw-Timestamp must be unix seconds")
    stamp = int(raw_stamp)
    if abs(int(time.time()) - stamp) > TIMESTAMP_TOLERANCE_S:
        raise ApiError(
            401,
            "unauthorized",
            f"X-Netclaw-Timestamp is more than {TIMESTAMP_TOLERANCE_S}s away from the server's clock",
        )
    if not _SIGNATURE.fullmatch(request.headers.get("X-Netclaw-Signature", "")):
        raise ApiError(401, "unauthorized", "X-Netclaw-Signature must be 'sha256=' and 64 hex digits")
    return stamp


def _check_signature(request: web.Request, secret: bytes, body: bytes) -> None:
    signature = request.headers["X-Netclaw-Signature"]
    signed = request.headers["X-Netclaw-Timestamp"].encode() + b"." + body  # as the sender wrote it
    expected = "sha256=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise ApiError(401, "unauthorized", "X-Netclaw-Signature does not match the body")


def _header_bytes(value: str) -> bytes:
    # aiohttp decodes non-UTF-8 header bytes with surrogateescape; get the bytes back.
    return value.encode("utf-8", "surrogateescape")
