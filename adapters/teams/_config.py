"""The ``teams`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`: ``channels`` are Teams channel ids and group chat
ids, ``users`` the people's Microsoft Entra object ids), whether the adapter runs, the
bot's Azure registration (its app id, tenant, and where its password is), and where its
client-credentials token comes from. Registered with the other channel sections by the
``adapters`` package."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator, model_validator

from netclaw.config import ChatSection, check_env_name

MULTI_TENANT = "botframework.com"  # the token tenant of a multi-tenant bot registration


class TeamsConfig(ChatSection):
    key: ClassVar[str] = "teams"
    restart_keys: ClassVar[tuple[str, ...]] = (
        "enabled",
        "app_id",
        "app_password_env",
        "tenant_id",
        "token_url",
    )

    app_id: str = ""  # the Azure bot's Microsoft App ID (a GUID; not a secret)
    app_password_env: str = "TEAMS_APP_PASSWORD"  # the app registration's client secret
    # The Entra tenant of a single-tenant bot (a GUID); empty: a multi-tenant registration.
    tenant_id: str = ""
    # Where the bot asks for its client-credentials token; empty: Microsoft's token endpoint
    # of the tenant (a sovereign cloud's, or a test double, can be named here).
    token_url: str = ""

    _env = field_validator("app_password_env")(check_env_name)

    @field_validator("token_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @model_validator(mode="after")
    def _needs_app_id(self) -> TeamsConfig:
        if self.enabled and not self.app_id.strip():
            raise ValueError(
                "teams.app_id is required: the Microsoft App ID of the Azure bot (see docs/channels/teams.md)"
            )
        return self

    def token_endpoint(self) -> str:
        tenant = self.tenant_id or MULTI_TENANT
        return self.token_url or f"https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"
