"""The Mattermost channel adapter: a thread (its root post) is a session, a direct message
channel is one.

Mattermost's REST API v4 over httpx and its websocket over aiohttp, both already
netclaw's, rather than a driver package (``_client.py`` says why). The modules:

- ``_port``: the narrow platform port (the chat port plus the websocket, posts, threads,
  channels, files and the saved position), its error type, normalised posts.
- ``_events``: what the server sends, normalised (pure): posts, mentions, files; the ids
  in session ids.
- ``_actions``: approval buttons and the verification of their presses (pure).
- ``_adapter``: :class:`MattermostAdapter` — policy, the websocket and its reconnects,
  reading back what was missed, the button-press route; replies are rendered by the
  shared :class:`~adapters.chat.ChatRenderer`.
- ``_client``: the real port (httpx, aiohttp's websocket, error translation), imported
  only when the adapter starts or probes.
- ``_config``: the ``mattermost`` config section (:class:`MattermostConfig`).

Set-up for people: docs/channels/mattermost.md. This face imports the adapter on first
use, so that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.mattermost._config import MattermostConfig

if TYPE_CHECKING:
    from adapters.mattermost._adapter import MattermostAdapter, conversation_of

__all__ = ["CHANNEL", "MattermostAdapter", "MattermostConfig", "conversation_of"]

__getattr__ = lazy_names(__name__, {"MattermostAdapter": "_adapter", "conversation_of": "_adapter"})

CHANNEL = Channel(
    name="mattermost",
    section=MattermostConfig,
    adapter="adapters.mattermost._adapter:MattermostAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="buttons",
        edits=True,
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=16383,  # _port.MESSAGE_LIMIT (this face stays light: no port import)
        edit_interval_s=1.0,  # _port.EDIT_INTERVAL_S
    ),
    summary="Mattermost bot account: a mention starts a thread, each thread (or direct message) is a session",
    one_node=True,  # one websocket per bot: every connection gets every post
    docs="docs/channels/mattermost.md",
)
