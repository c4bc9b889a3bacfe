"""What every chat platform shares: the port a platform implements, and the renderer
that shows a session's outputs through it (streaming edits, splitting, reactions,
notices, files, approval buttons, idle release, re-subscribing).

- ``_port``: :class:`ChatPort`, the conversation and message references, the port's
  error, and the retry policies for platform calls.
- ``_renderer``: :class:`ChatRenderer`, composing one module per concern: ``_links``
  (the subscription of each followed session), ``_streaming`` (the reply as it streams),
  ``_reactions`` (the "working on it" mark), ``_approvals`` (buttons and decisions),
  ``_outbox`` and ``_outbox_watch`` (every recorded reply shown once), over ``_calls``
  (how they call the platform).
- ``_inbound``: fetching a message's shared files within the limits; what people say in
  a followed thread that is not for the bot.
- ``_text``: splitting replies to a platform's message size; notes for people.

A new platform is a port plus its event mapping (see ``adapters/slack/`` and
``adapters/discord_bot/``), not a copy of this.
"""

from adapters.chat._inbound import Asides, SharedFile, fetch_files, session_known, with_file_names
from adapters.chat._links import SUBSCRIPTION, RenderOptions
from adapters.chat._local_db import LocalDb
from adapters.chat._port import (
    BEST_EFFORT,
    MUST_DELIVER,
    Button,
    ButtonClick,
    ChatApiError,
    ChatPort,
    Conversation,
    MessageRef,
    StreamingPort,
    StreamingUnsupported,
    new_key,
    outbox_key,
    retry_verdict,
)
from adapters.chat._posted import PostedMessages
from adapters.chat._renderer import ChatRenderer
from adapters.chat._text import error_note, note_for, split_message

__all__ = [
    "BEST_EFFORT",
    "MUST_DELIVER",
    "SUBSCRIPTION",
    "Asides",
    "Button",
    "ButtonClick",
    "ChatApiError",
    "ChatPort",
    "ChatRenderer",
    "Conversation",
    "LocalDb",
    "MessageRef",
    "PostedMessages",
    "RenderOptions",
    "SharedFile",
    "StreamingPort",
    "StreamingUnsupported",
    "error_note",
    "fetch_files",
    "new_key",
    "note_for",
    "outbox_key",
    "retry_verdict",
    "session_known",
    "split_message",
    "with_file_names",
]
