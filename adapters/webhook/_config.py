"""The ``webhooks`` section of netclaw.json: one route per ``POST /webhooks/{route}`` —
how it authenticates, where its session key and text are in the body, its audience, its
limits, and where to deliver its replies. Registered with the other channel sections by
the ``adapters`` package."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from netclaw.config import ChannelSection, DeliverConfig, Section, check_env_name
from netclaw.config.credentials import read_secret
from netclaw.errors import ConfigError

MIN_WEBHOOK_SECRET_BYTES = 32


class WebhookAuth(Section):
    type: Literal["hmac", "bearer"]
    secret_env: str

    _env = field_validator("secret_env")(check_env_name)


class WebhookRoute(Section):
    auth: WebhookAuth
    session_key: str | None = None
    text: str = "$.text"
    audience: Literal["personal", "team", "public"] = "public"
    max_body_bytes: int = Field(1_048_576, gt=0)
    rate_limit_per_minute: int = Field(60, gt=0)
    deliver: DeliverConfig | None = None  # post each delivery's reply as a new thread there


class WebhooksConfig(ChannelSection):
    key: ClassVar[str] = "webhooks"

    routes: dict[str, WebhookRoute] = {}

    @field_validator("routes")
    @classmethod
    def _route_names(cls, routes: dict[str, WebhookRoute]) -> dict[str, WebhookRoute]:
        # Route names go into URLs and session ids (webhook:<route>:<key>); a ":" would let
        # one route's sessions pass for another's (and take its audience).
        for name in routes:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
                raise ValueError(f"route name {name!r} must be 1-64 letters, digits, '.', '_' or '-'")
        return routes

    def active(self) -> bool:
        """Webhooks run when a route is configured."""
        return bool(self.routes)

    def audience_of(self, session_id: str) -> Literal["personal", "team", "public"] | None:
        """``webhook:<route>:<key>`` → its route's audience (None: no such route)."""
        route = self.routes.get(session_id.split(":")[1] if ":" in session_id else "")
        return route.audience if route is not None else None

    def check_environment(self) -> None:
        """A secret short enough to guess is refused at load (a missing one only disables
        its route)."""
        for name, route in self.routes.items():
            secret = read_secret(route.auth.secret_env)
            if secret is not None and len(secret.encode()) < MIN_WEBHOOK_SECRET_BYTES:
                raise ConfigError(
                    f"{self.key}.routes.{name}.auth.secret_env: the secret in {route.auth.secret_env} is "
                    f"{len(secret.encode())} bytes; use at least {MIN_WEBHOOK_SECRET_BYTES} "
                    "(for example: openssl rand -hex 32)"
                )
