"""What ``sessions show --context`` adds to the recorded projection, so it shows what the
model is sent: the tools the session's audience is offered. (The memories recalled for a
turn are recorded in its tail, so the projection has them already.)"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from netclaw.config import Settings
from netclaw.security.policy import Place, allowed_tools, audience_of
from netclaw.tools import ToolRegistry

log = logging.getLogger(__name__)

RECALL_TIMEOUT_S = 5.0


def offered_tools(
    session_id: str, place: Place | None, settings: Settings, tools: ToolRegistry | None
) -> Sequence[str]:
    """The names of the tools the model is offered in this session (its audience's)."""
    if tools is None:
        return ()
    allowed = allowed_tools(audience_of(session_id, settings, place), settings)
    return tuple(schema.name for schema in tools.schemas(allowed))
