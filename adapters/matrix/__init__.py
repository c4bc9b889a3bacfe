"""The Matrix channel adapter (matrix-nio): a room's thread is a session, a direct chat is one.

matrix-nio rather than mautrix: nio is a client library (mautrix's strength is bridges and
appservices, with a database of its own), its core is sans-I/O with an aiohttp transport —
the HTTP stack netclaw already runs on — and it needs no store without encryption. netclaw
uses its client for sending and the session; events are normalised from their JSON here
(``_events``), so the adapter never depends on nio's event classes. The modules:

- ``_port``: the narrow platform port (the chat port plus sync, rooms, events, media),
  its error type, normalised messages, reactions and invites.
- ``_events``: the client-server API's event JSON normalised (pure): threads, mentions,
  files, the history a join brings along, approval prompts.
- ``_ids``: Matrix room and event ids in session ids, reversibly (``matrix:<room>:<thread>``).
- ``_adapter``: :class:`MatrixAdapter` — policy, invites, encrypted rooms, the sync loop,
  approvals by reaction; replies are rendered by the shared :class:`~adapters.chat.ChatRenderer`.
- ``_client``: matrix-nio itself (the real port, error translation), imported only when
  the adapter starts, so the daemon runs without matrix-nio installed.
- ``_config``: the ``matrix`` config section (:class:`MatrixConfig`).

Set-up for people: docs/channels/matrix.md. This face imports the adapter on first use,
so that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.matrix._config import MatrixConfig

if TYPE_CHECKING:
    from adapters.matrix._adapter import MatrixAdapter, conversation_of

__all__ = ["CHANNEL", "MatrixAdapter", "MatrixConfig", "conversation_of"]

__getattr__ = lazy_names(__name__, {"MatrixAdapter": "_adapter", "conversation_of": "_adapter"})

CHANNEL = Channel(
    name="matrix",
    section=MatrixConfig,
    adapter="adapters.matrix._adapter:MatrixAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="reactions",
        edits=True,
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=4000,  # _port.MESSAGE_LIMIT (this face stays light: no port import)
        edit_interval_s=2.0,  # _port.EDIT_INTERVAL_S
    ),
    summary="Matrix bot account: a mention starts a thread, each thread (or direct chat) is a session",
    one_node=True,  # one sync position per bot account: one node of a cluster syncs
    requires="pip install 'netclaw[matrix]'",
    docs="docs/channels/matrix.md",
)
