"""The Slack channel adapter: each thread is one session, over Socket Mode.

- ``_adapter``: :class:`SlackAdapter` — event mapping, thread ↔ session, redelivery
  dedupe; replies are rendered by the shared :class:`~adapters.chat.ChatRenderer`.
- ``_client``: the Socket Mode connection (slack-bolt), ``_web``: the Web API calls and
  their errors, ``_port``: the chat port over them, ``_reading``: people's names, earlier
  messages, shared files. These touch slack-bolt and slack-sdk and are imported only
  when the adapter starts, so the daemon runs without the Slack extra installed.
- ``_format``: Slack's text escaping.
- ``_config``: the ``slack`` config section (:class:`SlackConfig`).

Set-up for people: docs/channels/slack.md. This face imports the adapter on first use,
so that registering the config section stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters._lazy import lazy_names
from adapters.channel import Capabilities, Channel
from adapters.slack._config import SlackConfig
from adapters.slack._format import slack_escape, slack_unescape

if TYPE_CHECKING:
    from adapters.slack._adapter import PROCESSING_REACTION, SlackAdapter, conversation_of

__all__ = [
    "CHANNEL",
    "PROCESSING_REACTION",
    "SlackAdapter",
    "SlackConfig",
    "conversation_of",
    "slack_escape",
    "slack_unescape",
]

__getattr__ = lazy_names(
    __name__, {"PROCESSING_REACTION": "_adapter", "SlackAdapter": "_adapter", "conversation_of": "_adapter"}
)

CHANNEL = Channel(
    name="slack",
    section=SlackConfig,
    adapter="adapters.slack._adapter:SlackAdapter",
    capabilities=Capabilities(
        conversations="threads",
        approvals="buttons",
        edits=True,  # native streaming (chat.startStream) where the workspace has it
        files_in=True,
        files_out=True,
        typing=True,
        message_limit=4000,
        edit_interval_s=1.0,
    ),
    summary="Slack over Socket Mode: each thread is a session",
    requires="pip install 'netclaw[slack]'",
    docs="docs/channels/slack.md",
)
