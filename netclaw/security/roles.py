"""Who may do what: roles for people and API tokens (pure).

A *speaker* is who sent something, as netclaw names them: ``slack:U0123``,
``discord:1234``, ``token:ci`` (a named API token), ``control`` (the control token),
``webhook:alerts``. A role (``roles.<name>`` in the config) grants tools, the right to
decide approvals, commands, memory use and chat; it applies on top of the audience of the
session, never beyond it.

- The role of a message is resolved when it is admitted and recorded with it (the
  journal says whose turn it is and in which role); the grants are read from the live
  settings when its turn runs, so the tools a model is offered are computed per turn
  from the speaker's role (:func:`turn_tools`).
- No roles configured, or a speaker with no role and no ``default`` role: the audience's
  rules alone, as before roles existed.
- ``admin`` may do everything, whatever the config says of it; the control token is admin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from netclaw.commands import Command
from netclaw.config import RoleConfig, Settings, is_chat_channel
from netclaw.security.policy import NO_HINTS, Audience, ToolHints, needs_approval, tool_matches

ADMIN = "admin"
DEFAULT = "default"
CONTROL = "control"  # the control token's speaker name
MEMORY_WRITE = ("remember",)
MEMORY_READ = ("search_memory",)

Permission = str  # "read", "chat", "approve", "manage", "admin"


# The ``user`` of a reminder's firing: nobody spoke, so the turn runs with the audience's
# rules alone (in a Slack thread it must not become "slack:reminder" and match "slack:*").
REMINDER_USER = "reminder"


def speaker_of(session_id: str, user: str | None, given: str | None = None) -> str | None:
    """Who sent a message, as roles name them: ``given`` (the API's authenticated caller),
    else the platform user of a chat session, else a webhook route's name; None for a
    reminder firing."""
    if given is not None:
        return given
    if user == REMINDER_USER:
        return None
    channel = session_id.partition(":")[0]
    if is_chat_channel(channel) and user:
        return f"{channel}:{user}"
    if channel == "webhook" and user and user.startswith("webhook:"):
        return user
    return None


def role_for(settings: Settings, speaker: str | None, assigned: str | None = None) -> str | None:
    """The role ``speaker`` acts in: ``assigned`` (a token's own role), else the role that
    lists them (an exact member before a glob, in file order), else ``default`` if
    configured, else None (no role: the audience's rules alone)."""
    if speaker == CONTROL:
        return ADMIN
    if assigned is not None:
        return assigned
    if speaker is None:
        return None
    for name, role in settings.roles.items():
        if speaker in role.members:
            return name
    for name, role in settings.roles.items():
        if any(fnmatchcase(speaker, m) for m in role.members if any(c in m for c in "*?[")):
            return name
    return DEFAULT if DEFAULT in settings.roles else None


@dataclass(frozen=True, slots=True)
class Grants:
    """What a role may do (None where a role does not restrict)."""

    name: str
    tools: tuple[str, ...] | None
    approve_tools: tuple[str, ...]
    approve: bool
    chat: bool
    commands: frozenset[str] | None
    memory: str
    manage: bool
    admin: bool = False


ADMIN_GRANTS = Grants(ADMIN, None, (), True, True, None, "read_write", True, True)


def grants(settings: Settings, role: str | None) -> Grants | None:
    """The grants of ``role`` (None: no role, nothing beyond the audience is restricted). A
    role that is not configured (removed since a token got it) grants nothing."""
    if role is None:
        return None
    if role == ADMIN:
        return ADMIN_GRANTS
    config = settings.roles.get(role)
    if config is None:
        config = RoleConfig(tools=[], chat=False, commands=[], memory="none")
    return Grants(
        role,
        None if config.tools is None else tuple(config.tools),
        tuple(config.approve_tools),
        config.approve,
        config.chat,
        None if config.commands is None else frozenset(config.commands),
        config.memory,
        config.manage,
    )


def role_allows_tool(g: Grants | None, name: str) -> bool:
    if g is None or g.admin:
        return True
    if g.memory != "read_write" and name in MEMORY_WRITE:
        return False
    if g.memory == "none" and name in MEMORY_READ:
        return False
    return g.tools is None or tool_matches(name, g.tools)


def turn_tools(
    settings: Settings, audience: Audience, role: str | None, names: Iterable[str]
) -> list[str] | None:
    """The tools offered in a turn: those the audience allows and the speaker's role grants
    (None: every tool). ``names``: the tools there are now."""
    audience_allows = settings.audience(audience).tools
    g = grants(settings, role)
    if g is None or g.admin:
        return None if audience_allows is None else list(audience_allows)
    return sorted(
        n
        for n in names
        if (audience_allows is None or tool_matches(n, audience_allows)) and role_allows_tool(g, n)
    )


def turn_needs_approval(
    name: str,
    audience: Audience,
    settings: Settings,
    role: str | None,
    granted: Iterable[str],
    untrusted_before: bool,
    hints: ToolHints = NO_HINTS,
) -> bool:
    """Does this call wait for a person? Yes when the audience or the speaker's role says so,
    unless a person said "always" for the tool earlier — and that "always" does not count
    once this turn has read untrusted content (a web page, an MCP server's answer, a file):
    what a tool returned cannot start an approval-free call of a tool that needs approval."""
    g = grants(settings, role)
    needed = needs_approval(name, audience, settings, hints) or (
        g is not None and not g.admin and tool_matches(name, g.approve_tools)
    )
    if not needed:
        return False
    return untrusted_before or name not in set(granted)


def may(settings: Settings, role: str | None, permission: Permission) -> bool:
    """May this role ``read`` (sessions, transcripts, usage), ``chat`` (send messages),
    ``approve`` (decide tool calls), ``manage`` (delete sessions and memories, reminders)
    or ``admin`` (tokens, the audit trail)? No role: everything but ``admin``."""
    g = grants(settings, role)
    if g is None:
        return permission != "admin"
    if g.admin:
        return True
    match permission:
        case "read":
            return True
        case "chat":
            return g.chat
        case "approve":
            return g.approve
        case "manage":
            return g.manage
    return False


def may_command(settings: Settings, role: str | None, command: Command) -> bool:
    g = grants(settings, role)
    return g is None or g.admin or g.commands is None or command in g.commands


def refusal(role: str | None, what: str) -> str:
    """A refused attempt, said to the person."""
    return f"Your role ({role}) does not allow {what}; ask an admin if you need it."


def known_roles(settings: Settings) -> Sequence[str]:
    return [ADMIN, *(n for n in settings.roles if n != ADMIN)]
