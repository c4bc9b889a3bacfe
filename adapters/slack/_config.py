"""The ``slack`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`), whether the adapter runs, and where its tokens
are. Registered with the other channel sections by the ``adapters`` package."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from netclaw.config import ChatSection, check_env_name


class SlackConfig(ChatSection):
    key: ClassVar[str] = "slack"
    restart_keys: ClassVar[tuple[str, ...]] = ("enabled", "bot_token_env", "app_token_env", "api_url")

    bot_token_env: str = "SLACK_BOT_TOKEN"  # xoxb-…
    app_token_env: str = "SLACK_APP_TOKEN"  # xapp-… (Socket Mode)
    api_url: str | None = None  # Web API base, e.g. for a local test double; None: Slack's

    _env = field_validator("bot_token_env", "app_token_env")(check_env_name)
