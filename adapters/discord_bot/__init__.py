"""The Discord channel adapter (discord.py): one Discord thread is one session.

Named ``discord_bot``, not ``discord``: a package ``adapters/discord/`` would be safe for
Python itself (imports are absolute, so ``import discord`` always means the library), but it
would shadow the library for anything that puts ``adapters/`` on ``sys.path`` and make every
``discord`` in tracebacks, logs and tool output ambiguous. ``adapters.build_adapters`` loads
this package by that name. The modules:

- ``_port``: the narrow platform port, its error type, normalised messages, rate-limit retry.
- ``_adapter``: :class:`DiscordAdapter` — policy, thread ↔ session mapping, rendering.
- ``_client``: discord.py itself (client, real port, normalisation, exception translation),
  imported only when the adapter starts, so the daemon runs without discord.py installed.

Set-up for people: docs/channels/discord.md.
"""

from adapters.discord_bot._adapter import DiscordAdapter, session_id_for, thread_name
from adapters.discord_bot._port import (
    MESSAGE_LIMIT,
    DiscordApiError,
    DiscordMessage,
    DiscordPort,
    rate_limited,
    with_retry,
)

__all__ = [
    "MESSAGE_LIMIT",
    "DiscordAdapter",
    "DiscordApiError",
    "DiscordMessage",
    "DiscordPort",
    "rate_limited",
    "session_id_for",
    "thread_name",
    "with_retry",
]
