"""Policy: which audience a session serves, and what that audience may use.

Defaults by source (issue 5 adds per-channel configuration): CLI and control-API
sessions are ``personal``; Slack and Discord threads are ``team``; a webhook
session takes its route's ``audience`` (``public`` unless configured).
"""

from __future__ import annotations

from typing import Literal

from netclaw.config import AudienceConfig, Settings
from netclaw.sessions._state import channel_of

Audience = Literal["personal", "team", "public"]


def audience_of(session_id: str, settings: Settings) -> Audience:
    channel = channel_of(session_id)
    if channel in ("slack", "discord"):
        return "team"
    if channel == "webhook":
        route = settings.webhooks.routes.get(session_id.split(":")[1] if ":" in session_id else "")
        return route.audience if route is not None else "public"
    return "personal"


def recall_allowed(audience: Audience, settings: Settings) -> bool:
    """Public sessions never see recalled memories; others unless their audience opts out."""
    if audience == "public":
        return False
    return settings.audiences.get(audience, AudienceConfig()).memory_recall
