"""The ``discord`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`), whether the adapter runs, and where its token
is. Registered with the other channel sections by the ``adapters`` package."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from netclaw.config import ChatSection, check_env_name


class DiscordConfig(ChatSection):
    key: ClassVar[str] = "discord"
    restart_keys: ClassVar[tuple[str, ...]] = ("enabled", "token_env")

    token_env: str = "DISCORD_BOT_TOKEN"

    _env = field_validator("token_env")(check_env_name)
