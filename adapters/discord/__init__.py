"""The Discord channel adapter (discord.py): one Discord thread is one session.

This is a package, ``adapters.discord``, inside ``adapters``; the discord.py library is the
top-level ``discord``. Python 3 imports are absolute, so ``import discord`` anywhere in
netclaw — including ``adapters/discord/_client.py`` — always means the library; only code
that runs with ``adapters/`` itself on ``sys.path`` (``python adapters/x.py``) would see this
package instead, and nothing does. The modules:

- ``_port``: the narrow platform port, its error type, normalised messages, rate-limit retry.
- ``_adapter``: :class:`DiscordAdapter` — policy, thread ↔ session mapping, rendering.
- ``_client``: discord.py itself (client, real port, normalisation, exception translation),
  imported only when the adapter starts, so the daemon runs without discord.py installed.

Set-up for people: docs/channels/discord.md.
"""

from adapters.discord._adapter import DiscordAdapter, session_id_for, thread_name
from adapters.discord._port import (
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
