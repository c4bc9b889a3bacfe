"""The Telegram channel adapter (python-telegram-bot's ``Bot``): a private chat, a group
or a forum topic is one session.

The library: python-telegram-bot (v22) over aiogram — the most used Bot API library,
maintained in step with the Bot API, async over httpx like the rest of netclaw, typed;
its ``Bot`` takes ``base_url`` / ``base_file_url``, so tests run it unchanged against a
Bot API fake on 127.0.0.1. Only ``Bot`` is used, not ``Application``: the adapter polls
and serves the webhook itself (``_client.py`` says why). The modules:

- ``_port``: the narrow platform port (the chat port plus updates and downloads), its
  error type, normalised messages and updates.
- ``_adapter``: :class:`TelegramAdapter` — polling and the webhook route, policy, chat
  and topic ↔ session mapping; replies are rendered by the shared
  :class:`~adapters.chat.ChatRenderer`.
- ``_client``: python-telegram-bot itself (the bot, the real port, normalisation,
  exception translation), imported only when the adapter starts or probes.
- what the bot posted is recorded by idempotency key (:class:`adapters.chat.PostedMessages`:
  Telegram has no client nonce and bots cannot read history).
- ``_config``: the ``telegram`` config section (:class:`TelegramConfig`).

Set-up for people: docs/channels/telegram.md. This face imports the adapter on first
use, so that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.telegram._config import TelegramConfig

if TYPE_CHECKING:
    from adapters.telegram._adapter import TelegramAdapter, conversation_of, session_id_for
    from adapters.telegram._port import (
        MESSAGE_LIMIT,
        TelegramApiError,
        TelegramFile,
        TelegramMessage,
        TelegramPort,
        TelegramUpdate,
    )

__all__ = [
    "CHANNEL",
    "MESSAGE_LIMIT",
    "TelegramAdapter",
    "TelegramApiError",
    "TelegramConfig",
    "TelegramFile",
    "TelegramMessage",
    "TelegramPort",
    "TelegramUpdate",
    "conversation_of",
    "session_id_for",
]

_ADAPTER = ("TelegramAdapter", "conversation_of", "session_id_for")
_PORT = (
    "MESSAGE_LIMIT",
    "TelegramApiError",
    "TelegramFile",
    "TelegramMessage",
    "TelegramPort",
    "TelegramUpdate",
)
__getattr__ = lazy_names(__name__, {**dict.fromkeys(_ADAPTER, "_adapter"), **dict.fromkeys(_PORT, "_port")})

CHANNEL = Channel(
    name="telegram",
    section=TelegramConfig,
    adapter="adapters.telegram._adapter:TelegramAdapter",
    capabilities=Capabilities(
        conversations="topics",
        approvals="buttons",
        edits=True,
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=4096,
        edit_interval_s=1.5,
    ),
    summary="Telegram bot: each private chat, group and forum topic is a session",
    one_node=True,  # one getUpdates consumer per bot (a second gets 409): one node polls
    requires="pip install 'netclaw[telegram]'",
    docs="docs/channels/telegram.md",
)
