"""Chat commands: what a person can tell a session without it becoming model input (pure).

A message whose text — after a leading bot mention, which the channel strips — is one
of these is a command: ``/new`` (same as ``/reset``), ``/reset``, ``/stop``,
``/compact``, ``/status``, ``/model`` (list the models; ``/model NAME`` chooses one for
this conversation, ``/model default`` goes back to ``models.main``), ``/help``. ``!``
works in place of ``/`` (some clients swallow a leading slash). Commands answer with a
short ``notice`` and start no turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from netclaw.config import Settings

Command = Literal["reset", "stop", "compact", "status", "model", "help"]

_ALIASES: dict[str, Command] = {
    "new": "reset",
    "reset": "reset",
    "stop": "stop",
    "cancel": "stop",
    "compact": "compact",
    "status": "status",
    "model": "model",
    "help": "help",
}
_TAKES_ARGUMENT: frozenset[Command] = frozenset({"model"})
_COMMAND = re.compile(r"\s*[/!]([a-z]+)(?:\s+([A-Za-z0-9][A-Za-z0-9_.-]{0,39}))?\s*", re.IGNORECASE)
DEFAULT_MODEL = "default"  # `/model default`: back to models.main

HELP_TEXT = (
    "Commands: /new or /reset — start the conversation afresh (the transcript is kept); "
    "/stop — stop the running turn; /compact — summarise the conversation now; "
    "/status — model, context used, memories; /model — the models, /model NAME to choose one "
    "for this conversation (/model default to go back); /help — this. `!` works in place of `/`."
)


@dataclass(frozen=True, slots=True)
class ChatCommand:
    name: Command
    argument: str | None = None  # /model NAME


def parse_command(text: str) -> ChatCommand | None:
    """The command ``text`` is, or None when it is a message for the model."""
    match = _COMMAND.fullmatch(text)
    if match is None:
        return None
    name = _ALIASES.get(match.group(1).lower())
    argument = match.group(2)
    if name is None or (argument is not None and name not in _TAKES_ARGUMENT):
        return None
    return ChatCommand(name, argument)


def models_text(settings: Settings, current: str, pinned: bool) -> str:
    """``/model``: the model in use and the ones a person may choose."""
    named = settings.models.named()
    chosen = "chosen for this conversation" if pinned else "the default"
    model = named.get(current) or settings.models.main
    available = ", ".join(f"{name} ({m.model})" for name, m in named.items())
    return (
        f"Model: {current} ({model.model}), {chosen}. Available: {available}. "
        f"/model NAME chooses one for this conversation; /model {DEFAULT_MODEL} goes back to main."
    )
