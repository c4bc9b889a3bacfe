"""What ``sessions show --context`` adds to the recorded projection, so it shows what the
model is sent: the memories recalled for the newest message (the same search, audience
and scope a turn uses, in the same place: right after the system prompt) and the tools
the session's audience is offered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from netclaw.config import Settings
from netclaw.messages import ChatMessage, MessageKind, system
from netclaw.persistence import MemoryStore, format_recall
from netclaw.policy import Place, allowed_tools, audience_of, channel_of, recall_allowed, recall_scope
from netclaw.tools import ToolRegistry

log = logging.getLogger(__name__)

RECALL_TIMEOUT_S = 5.0


async def with_recall(
    messages: list[ChatMessage],
    *,
    session_id: str,
    place: Place | None,
    settings: Settings,
    memory: MemoryStore | None,
) -> list[ChatMessage]:
    """``messages`` with the recall block the newest user message would bring, if any."""
    audience = audience_of(session_id, settings, place)
    if memory is None or not recall_allowed(audience, settings) or channel_of(session_id) == "webhook":
        return messages
    newest = next((m for m in reversed(messages) if m.role == "user" and m.kind == MessageKind.CHAT), None)
    if newest is None:
        return messages
    scope = recall_scope(session_id, audience, settings, place)
    try:
        async with asyncio.timeout(RECALL_TIMEOUT_S):
            found = await memory.search(newest.content, audience=audience, scope=scope)
    except Exception as exc:  # noqa: BLE001 - a view without recall beats no view
        log.warning("%s: memory recall for the context view failed: %s", session_id, exc)
        return messages
    block = format_recall(found)
    if block is None:
        return messages
    return [*messages[:1], system(block, id="recall"), *messages[1:]]


def offered_tools(
    session_id: str, place: Place | None, settings: Settings, tools: ToolRegistry | None
) -> Sequence[str]:
    """The names of the tools the model is offered in this session (its audience's)."""
    if tools is None:
        return ()
    allowed = allowed_tools(audience_of(session_id, settings, place), settings)
    return tuple(schema.name for schema in tools.schemas(allowed))
