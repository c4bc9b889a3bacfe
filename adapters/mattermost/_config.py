"""The ``mattermost`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`: ``channels`` are channel ids, ``users`` user ids),
whether the adapter runs, the server, where the bot's token is, and the URL at which the
Mattermost server reaches this daemon for approval buttons. Registered with the other
channel sections by the ``adapters`` package."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from netclaw.config import ChatSection, check_env_name


def _http_url(value: str, what: str, example: str) -> str:
    value = value.strip().rstrip("/")
    if value and not value.startswith(("https://", "http://")):
        raise ValueError(f"{what} {value!r}: give an http(s) URL, e.g. {example}")
    return value


class MattermostConfig(ChatSection):
    key: ClassVar[str] = "mattermost"
    restart_keys: ClassVar[tuple[str, ...]] = ("enabled", "url", "token_env", "actions_url")

    url: str = ""  # the server's site URL: https://chat.example.org (the API is under /api/v4)
    token_env: str = "MATTERMOST_BOT_TOKEN"  # the bot account's access token
    # Where the Mattermost server reaches this daemon: approval buttons post their presses
    # to <actions_url>/mattermost/actions (the daemon's port, or gateway.webhook_port).
    actions_url: str = ""

    _env = field_validator("token_env")(check_env_name)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "url", "https://chat.example.org")

    @field_validator("actions_url")
    @classmethod
    def _actions_url(cls, value: str) -> str:
        return _http_url(value, "actions_url", "https://netclaw.example.org")
