"""The ``matrix`` section of netclaw.json: who may talk (the chat policy's
:class:`~netclaw.config.ChannelAccess`: ``channels`` are room ids, ``users`` Matrix user
ids), whether the adapter runs, the homeserver, where the bot's access token is, and
which invites it accepts. Registered with the other channel sections by the ``adapters``
package."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from netclaw.config import ChatSection, check_env_name


class MatrixConfig(ChatSection):
    key: ClassVar[str] = "matrix"
    restart_keys: ClassVar[tuple[str, ...]] = ("enabled", "homeserver", "token_env")

    homeserver: str = ""  # the client-server API's base URL: https://matrix.example.org
    token_env: str = "MATRIX_ACCESS_TOKEN"  # the bot account's access token
    # Invites: True accepts those the allowlists allow (a room in `channels`; a direct chat
    # when `allow_dms` and the inviter passes `users`) and rejects the rest; False leaves
    # every invite alone (the bot is joined to rooms by hand).
    auto_join: bool = True

    _env = field_validator("token_env")(check_env_name)

    @field_validator("homeserver")
    @classmethod
    def _homeserver(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not value.startswith(("https://", "http://")):
            raise ValueError(
                f"homeserver {value!r}: give the client-server API's URL, e.g. https://matrix.example.org"
            )
        return value
