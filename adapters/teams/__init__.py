"""The Microsoft Teams channel adapter (the Microsoft 365 Agents SDK): a personal chat, a
group chat or a reply chain in a channel is one session.

The library: the Microsoft 365 Agents SDK (``microsoft-agents-hosting-core``,
``microsoft-agents-activity``) — Microsoft's maintained successor of the Bot Framework SDK,
whose Python ``botbuilder-*`` packages reached their end of support. Its token validator
guards the messaging endpoint, its activity model and Bot Connector client carry every
call. The modules:

- ``_port``: the narrow platform port (the chat port plus targeted messages and downloads),
  its error type, normalised messages, conversation references.
- ``_adapter``: :class:`TeamsAdapter` — the messaging endpoint, policy, chat and reply
  chain ↔ session mapping; replies are rendered by the shared
  :class:`~adapters.chat.ChatRenderer`.
- ``_client``: the SDK itself (token validation, activities, the connector client, the
  bot's token, error translation), imported only when the adapter starts or probes.
- ``_store``: conversation references and posted messages, kept across restarts.
- ``_config``: the ``teams`` config section (:class:`TeamsConfig`).

Set-up for people: docs/channels/teams.md. This face imports the adapter on first use, so
that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.teams._config import TeamsConfig

if TYPE_CHECKING:
    from adapters.teams._adapter import TeamsAdapter, session_id_for
    from adapters.teams._port import MESSAGE_LIMIT, Reference, TeamsApiError, TeamsMessage, TeamsPort

__all__ = [
    "CHANNEL",
    "MESSAGE_LIMIT",
    "Reference",
    "TeamsAdapter",
    "TeamsApiError",
    "TeamsConfig",
    "TeamsMessage",
    "TeamsPort",
    "session_id_for",
]

_ADAPTER = ("TeamsAdapter", "session_id_for")
_PORT = ("MESSAGE_LIMIT", "Reference", "TeamsApiError", "TeamsMessage", "TeamsPort")
__getattr__ = lazy_names(__name__, {**dict.fromkeys(_ADAPTER, "_adapter"), **dict.fromkeys(_PORT, "_port")})

CHANNEL = Channel(
    name="teams",
    section=TeamsConfig,
    adapter="adapters.teams._adapter:TeamsAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="buttons",
        edits=True,
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=8000,
        edit_interval_s=1.5,
    ),
    summary="Microsoft Teams bot: each personal chat, group chat and channel reply chain is a session",
    requires="pip install 'netclaw[teams]'",
    docs="docs/channels/teams.md",
)
