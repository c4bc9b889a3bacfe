"""Policy: which audience a session serves, and what that audience may use.

Defaults by source (issue 5 adds per-channel configuration): CLI and control-API
sessions are ``personal``; Slack and Discord threads are ``team``; a webhook
session takes its route's ``audience`` (``public`` unless configured).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from netclaw.config import ChannelAccess, Settings, is_chat_channel
from netclaw.lineage import root_of

Audience = Literal["personal", "team", "public"]


def channel_of(session_id: str) -> str:
    """``slack:C1:123.4`` → ``slack``; ids without a prefix are ``api`` sessions."""
    head, sep, _ = session_id.partition(":")
    return head if sep else "api"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a session lives, as its channel saw it when the session started (journaled
    with the message, so recovery and passivation agree): the memory scope, and the
    audience when the channel decides it (a direct message from someone no allowlist
    vetted is ``public``)."""

    scope: str | None = None
    audience: Audience | None = None

    def to_dict(self) -> dict[str, str]:
        out = {}
        if self.scope is not None:
            out["scope"] = self.scope
        if self.audience is not None:
            out["audience"] = self.audience
        return out

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Place:
        audience = data.get("audience")
        return cls(
            scope=data.get("scope"),
            audience=audience if audience in ("personal", "team", "public") else None,  # type: ignore[arg-type]
        )


def default_scope(session_id: str) -> str | None:
    """The memory scope a session id names by itself: a Slack channel (or DM channel), a
    Discord thread or DM channel, a webhook route. None (audience-wide) for the CLI and API.
    A sub-agent's is its root session's."""
    parts = root_of(session_id).split(":")
    # Every channel names a session <channel>:<place>[:<conversation there>...]: the place
    # (a Slack channel, a Discord thread, a Telegram chat, a webhook route) is the scope.
    if len(parts) >= 2 and parts[1] and (parts[0] == "webhook" or is_chat_channel(parts[0])):
        return f"{parts[0]}:{parts[1]}"
    return None


def dm_audience(access: ChannelAccess) -> Audience:
    """A direct message is ``team`` when a user allowlist vetted its sender, else ``public``
    (anyone in the workspace may write to the bot)."""
    return "team" if access.users is not None else "public"


def audience_of(session_id: str, settings: Settings, place: Place | None = None) -> Audience:
    if place is not None and place.audience is not None:
        return place.audience
    # A sub-agent serves its parent's audience (the place its task gave it says which; this
    # is the fallback): the one its root session has, never more.
    session_id = root_of(session_id)
    channel = channel_of(session_id)
    if is_chat_channel(channel):
        return "team"
    if channel == "webhook":
        return settings.webhooks.audience_of(session_id) or "public"
    return "personal"


def recall_allowed(audience: Audience, settings: Settings) -> bool:
    """Public sessions never see recalled memories; others unless their audience opts out."""
    if audience == "public":
        return False
    config = settings.audience(audience)
    return config.memory_recall and config.memory_scope != "none"


def recall_scope(session_id: str, audience: Audience, settings: Settings, place: Place | None) -> str | None:
    """The scope memory recall and search keep to (None: the whole audience), per the
    audience's ``memory_scope``."""
    if settings.audience(audience).memory_scope == "audience":
        return None
    if place is not None and place.scope is not None:
        return place.scope
    return default_scope(session_id)


def memory_scope_of(session_id: str, place: Place | None) -> str | None:
    """Where a memory made in this session belongs."""
    if place is not None and place.scope is not None:
        return place.scope
    return default_scope(session_id)


def allowed_tools(audience: Audience, settings: Settings) -> list[str] | None:
    """Tool-name patterns the audience may use (None: all). A tool not granted is invisible
    to the model, and a call to it is refused."""
    return settings.audience(audience).tools


def tool_matches(name: str, patterns: Iterable[str]) -> bool:
    """``name`` matches one of ``patterns`` (exact names or ``*`` globs, case-sensitive)."""
    return any(name == p or fnmatchcase(name, p) for p in patterns)


# Tools that wait for a person unless the audience grants them by name and does not list
# them in `approve`: running commands, and writing down a skill (instructions every later
# session follows), are never something a session starts on its own.
ALWAYS_APPROVE = ("shell", "save_skill")


@dataclass(frozen=True, slots=True)
class ToolHints:
    """What a tool says about itself (an MCP server's ``readOnlyHint`` / ``destructiveHint``
    annotations), as far as approvals care."""

    read_only: bool = False  # it changes nothing
    destructive: bool = False  # it may delete or overwrite


NO_HINTS = ToolHints()


def needs_approval(name: str, audience: Audience, settings: Settings, hints: ToolHints = NO_HINTS) -> bool:
    """Whether a call to ``name`` waits for a person in this audience:

    - named exactly in ``approve``: always;
    - read-only (``readOnlyHint``): never otherwise — a glob in ``approve`` does not catch it;
    - matched by a glob in ``approve``: yes;
    - destructive (``destructiveHint``) or ``shell``: yes, unless the audience grants the
      tool by its exact name in ``tools``.
    """
    config = settings.audience(audience)
    if name in config.approve:
        return True
    if hints.read_only:
        return False
    if tool_matches(name, config.approve):
        return True
    if name in ALWAYS_APPROVE or hints.destructive:
        return config.tools is None or name not in config.tools
    return False


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """What the policy needs to know about one platform message."""

    platform: str  # "slack", "discord"
    channel_id: str
    user_id: str
    is_dm: bool = False
    mentioned: bool = False  # the bot was mentioned in this message
    thread_known: bool = False  # it continues a thread that is already a session
    from_bot: bool = False  # sent by a bot (ours or another): never a turn


def denial_reason(access: ChannelAccess, event: ChatEvent) -> str | None:
    """Why this message gets no turn, or None when it may start or continue a session."""
    if event.from_bot:
        return "sent by a bot"
    if event.is_dm:
        if not access.allow_dms:
            return "direct messages are off (allow_dms)"
    elif event.channel_id not in access.channels:
        return f"channel {event.channel_id} is not in the allowlist"
    if access.users is not None and event.user_id not in access.users:
        return f"user {event.user_id} is not in the allowlist"
    if access.require_mention and not event.mentioned and not event.thread_known and not event.is_dm:
        return "a new thread needs a mention of the bot"
    return None


def reminders_allowed(audience: Audience, settings: Settings) -> bool:
    """May the model create reminders in this audience's sessions (default: all but public)?"""
    allowed = settings.audience(audience).reminders
    return audience != "public" if allowed is None else allowed


def subagents_allowed(audience: Audience, settings: Settings) -> bool:
    """May the model spawn sub-agents in this audience's sessions (default: all but public)?"""
    allowed = settings.audience(audience).subagents
    return audience != "public" if allowed is None else allowed
