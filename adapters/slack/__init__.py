"""The Slack channel adapter: each thread is one session, over Socket Mode.

- ``_adapter``: :class:`SlackAdapter` — event mapping, thread ↔ session, redelivery
  dedupe; replies are rendered by the shared :class:`~adapters.chat.ChatRenderer`.
- ``_client``: the Socket Mode connection (slack-bolt), ``_web``: the Web API calls and
  their errors, ``_port``: the chat port over them, ``_reading``: people's names, earlier
  messages, shared files. These touch slack-bolt and slack-sdk and are imported only
  when the adapter starts, so the daemon runs without the Slack extra installed.
- ``_format``: Slack's text escaping.

Set-up for people: docs/channels/slack.md.
"""

from adapters.slack._adapter import PROCESSING_REACTION, SlackAdapter, conversation_of
from adapters.slack._format import slack_escape, slack_unescape

__all__ = ["PROCESSING_REACTION", "SlackAdapter", "conversation_of", "slack_escape", "slack_unescape"]
