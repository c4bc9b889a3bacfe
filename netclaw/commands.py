"""Chat commands: what a person can tell a session without it becoming model input (pure).

A message whose text — after a leading bot mention, which the channel strips — is one
of these is a command: ``/new`` (same as ``/reset``), ``/reset``, ``/stop``,
``/compact``, ``/status``, ``/agents`` (the conversation's sub-agents), ``/help``. ``!`` works in place of ``/`` (some clients
swallow a leading slash). Commands answer with a short ``notice`` and start no turn.
"""

from __future__ import annotations

import re
from typing import Literal

Command = Literal["reset", "stop", "compact", "status", "agents", "help"]

_ALIASES: dict[str, Command] = {
    "new": "reset",
    "reset": "reset",
    "stop": "stop",
    "cancel": "stop",
    "compact": "compact",
    "status": "status",
    "agents": "agents",
    "help": "help",
}
_COMMAND = re.compile(r"\s*[/!]([a-z]+)\s*", re.IGNORECASE)

HELP_TEXT = (
    "Commands: /new or /reset — start the conversation afresh (the transcript is kept); "
    "/stop — stop the running turn; /compact — summarise the conversation now; "
    "/status — model, context used, memories; /agents — the sub-agents working for this "
    "conversation; /help — this. `!` works in place of `/`."
)


def parse_command(text: str) -> Command | None:
    """The command ``text`` is, or None when it is a message for the model."""
    match = _COMMAND.fullmatch(text)
    if match is None:
        return None
    return _ALIASES.get(match.group(1).lower())
