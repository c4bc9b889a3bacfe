"""The Discord channel adapter (discord.py): one Discord thread is one session.

Named ``discord_bot``, not ``discord``: a package ``adapters/discord/`` would be safe for
Python itself (imports are absolute, so ``import discord`` always means the library), but it
would shadow the library for anything that puts ``adapters/`` on ``sys.path`` and make every
``discord`` in tracebacks, logs and tool output ambiguous. ``adapters.build_adapters`` loads
this package by that name. The modules:

- ``_port``: the narrow platform port (the chat port plus threads), its error type,
  normalised messages.
- ``_adapter``: :class:`DiscordAdapter` — policy, thread ↔ session mapping; replies are
  rendered by the shared :class:`~adapters.chat.ChatRenderer`.
- ``_client``: discord.py itself (client, real port, normalisation, exception translation),
  imported only when the adapter starts, so the daemon runs without discord.py installed.
- ``_config``: the ``discord`` config section (:class:`DiscordConfig`).

Set-up for people: docs/channels/discord.md. This face imports the adapter and the port
on first use, so that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.discord_bot._config import DiscordConfig

if TYPE_CHECKING:
    from adapters.discord_bot._adapter import DiscordAdapter, conversation_of, session_id_for, thread_name
    from adapters.discord_bot._port import (
        MESSAGE_LIMIT,
        SEEN_EMOJI,
        DiscordApiError,
        DiscordAttachment,
        DiscordMessage,
        DiscordPort,
        rate_limited,
    )

__all__ = [
    "CHANNEL",
    "MESSAGE_LIMIT",
    "SEEN_EMOJI",
    "DiscordAdapter",
    "DiscordApiError",
    "DiscordAttachment",
    "DiscordConfig",
    "DiscordMessage",
    "DiscordPort",
    "conversation_of",
    "rate_limited",
    "session_id_for",
    "thread_name",
]

_ADAPTER = ("DiscordAdapter", "conversation_of", "session_id_for", "thread_name")
_PORT = (
    "MESSAGE_LIMIT",
    "SEEN_EMOJI",
    "DiscordApiError",
    "DiscordAttachment",
    "DiscordMessage",
    "DiscordPort",
)
__getattr__ = lazy_names(
    __name__, {**dict.fromkeys(_ADAPTER, "_adapter"), **dict.fromkeys((*_PORT, "rate_limited"), "_port")}
)

CHANNEL = Channel(
    name="discord",
    section=DiscordConfig,
    adapter="adapters.discord_bot._adapter:DiscordAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="buttons",
        edits=True,
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=2000,
        edit_interval_s=1.5,
    ),
    summary="Discord bot: a mention starts a thread, each thread is a session",
    one_node=True,  # one gateway connection per bot: one node of a cluster holds it
    requires="pip install 'netclaw[discord]'",
    docs="docs/channels/discord.md",
)
