"""Chat commands: what a person can tell a session without it becoming model input (pure).

A message whose text — after a leading bot mention, which the channel strips — is one
of these is a command: ``/new`` (same as ``/reset``), ``/reset``, ``/stop``,
``/compact``, ``/status``, ``/skills``, ``/agents`` (the conversation's sub-agents),
``/model`` (list the models; ``/model NAME`` chooses one for this conversation, ``/model
default`` goes back to ``models.main``), ``/voice`` (``/voice on`` or ``off``: replies also
spoken in this conversation), ``/help``. ``!`` works in place of ``/`` (some
clients swallow a leading slash). Commands answer with a short ``notice`` and start no turn.

``/prompt server:name args…`` is the one command that becomes model input: an MCP
server's prompt, filled in with the arguments (``key=value`` or in the prompt's order;
quote a value with spaces), is sent as the person's message. ``/prompt`` alone lists the
prompts, ``/prompt server`` one server's; a prompt missing a required argument is
answered with its arguments (and the server's suggestions) instead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Command = Literal[
    "reset", "stop", "compact", "status", "skills", "agents", "model", "voice", "help", "prompt"
]

_ALIASES: dict[str, Command] = {
    "new": "reset",
    "reset": "reset",
    "stop": "stop",
    "cancel": "stop",
    "compact": "compact",
    "status": "status",
    "skills": "skills",
    "agents": "agents",
    "model": "model",
    "voice": "voice",
    "help": "help",
}
_TAKES_ARGUMENT: frozenset[Command] = frozenset({"model", "voice"})
_COMMAND = re.compile(r"\s*[/!]([a-z]+)(?:\s+([A-Za-z0-9][A-Za-z0-9_.-]{0,39}))?\s*", re.IGNORECASE)
DEFAULT_MODEL = "default"  # `/model default`: back to models.main

HELP_TEXT = "\n".join(
    (
        "Commands (`!` works in place of `/`):",
        "/new or /reset — start the conversation afresh (the transcript is kept)",
        "/stop — stop the running turn",
        "/compact — summarise the conversation now",
        "/status — model, context used, memories",
        "/skills — the procedures I can follow here",
        "/agents — the sub-agents working for this conversation",
        "/model — the models; /model NAME chooses one for this conversation (/model default goes back)",
        "/voice on or /voice off — replies also spoken here, or not (/voice alone says which)",
        "/prompt server:name args — send an MCP server's prompt (/prompt alone lists them)",
        "/help — this list",
    )
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


def models_text(models: Mapping[str, str], current: str, pinned: bool) -> str:
    """``/model``: the model in use and the ones a person may choose (``models``: each
    name under ``models`` and its model id, main first)."""
    chosen = "chosen for this conversation" if pinned else "the default"
    available = ", ".join(f"{name} ({model})" for name, model in models.items())
    model = models.get(current) or next(iter(models.values()), "")
    return (
        f"Model: {current} ({model}), {chosen}. Available: {available}. "
        f"/model NAME chooses one for this conversation; /model {DEFAULT_MODEL} goes back to main."
    )


@dataclass(frozen=True, slots=True)
class PromptCommand:
    """``/prompt [server[:name]] [args…]``: ``server`` and ``name`` None to list."""

    server: str | None
    name: str | None
    named: tuple[tuple[str, str], ...] = ()  # key=value arguments, in order
    positional: tuple[str, ...] = ()


class PromptSyntaxError(ValueError):
    """A ``/prompt`` line that cannot be read (an unclosed quote); the message says why."""


_PROMPT = re.compile(r"^\s*[/!]prompt(?:\s+(?P<rest>.*))?$", re.IGNORECASE | re.DOTALL)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def parse_prompt(text: str) -> PromptCommand | None:
    """The ``/prompt`` command ``text`` is, or None when it is not one."""
    match = _PROMPT.match(text)
    if match is None:
        return None
    rest = (match.group("rest") or "").strip()
    if not rest:
        return PromptCommand(None, None)
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise PromptSyntaxError(f"cannot read the arguments of /prompt: {exc}") from exc
    head, *args = words
    server, _, name = head.partition(":")
    named: list[tuple[str, str]] = []
    positional: list[str] = []
    for word in args:
        key, eq, value = word.partition("=")
        if eq and _KEY.match(key):
            named.append((key, value))
        else:
            positional.append(word)
    return PromptCommand(server or None, name or None, tuple(named), tuple(positional))
