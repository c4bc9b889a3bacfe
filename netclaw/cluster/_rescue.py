"""Sessions a node left behind when it died, recovered by the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from netclaw.errors import NetclawError
from netclaw.persistence import Journal

log = logging.getLogger(__name__)


async def rescue_orphans(journal: Journal, warm: Callable[[str], None], every_s: float) -> None:
    """Forever: recover here the sessions a node that died left with unanswered input,
    once their leases expired (every node looks; the first claim wins, the others' stop
    quietly). Acknowledged input is never left waiting for its next message. A draining
    node's manager starts nothing (``warm`` does nothing there)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            orphans = await journal.orphans()
        except NetclawError as exc:
            log.warning("cannot look for sessions left by a failed node: %s", exc)
            continue
        for session_id in orphans:
            log.info("%s: recovering it here: its node is gone and it owes replies", session_id)
            warm(session_id)
