"""Sub-agents in a chat conversation: one compact status line per child the session
spawned — posted when it starts, edited when its answer (or failure) comes back — never
the child's own stream (that is on the child's session, for whoever subscribes to it)."""

from __future__ import annotations

import hashlib
from functools import partial

from adapters.chat._calls import PlatformCalls
from adapters.chat._port import Conversation
from netclaw import outputs as out

_MARK = {"completed": "✅", "cancelled": "⏹"}


class ChildLines:
    """The status lines of one conversation's sub-agents."""

    def __init__(self, calls: PlatformCalls, session_id: str, to: Conversation) -> None:
        self._calls = calls
        self._session_id = session_id
        self._to = to
        self._shown: dict[str, str] = {}  # child id → the message showing it at work

    @property
    def running(self) -> bool:
        """A line still says "working" (the conversation waits for that child's answer)."""
        return bool(self._shown)

    async def started(self, started: out.SubagentStarted) -> None:
        port = self._calls.port
        text = port.escape(f"⏳ sub-agent {started.child_id} is working on: {started.task}")
        key = hashlib.sha256(f"{self._session_id}|{started.child_id}|line".encode()).hexdigest()[:20]
        self._shown[started.child_id] = await self._calls.retried(
            "show a sub-agent", partial(port.post, self._to, text, key=key)
        )

    async def finished(self, finished: out.SubagentFinished) -> None:
        """Its line says how it ended (a child of a line not shown here, as after a restart,
        gets a line now)."""
        port = self._calls.port
        mark = _MARK.get(finished.status, "⚠️")
        if finished.status == "completed":
            what = f"finished: {finished.summary}"
        elif finished.status == "cancelled":
            what = "was cancelled"
        else:
            what = f"did not finish ({finished.status}): {finished.summary}"
        text = port.escape(f"{mark} sub-agent {finished.child_id} {what}")
        shown = self._shown.pop(finished.child_id, None)
        if shown is not None:
            await self._calls.retried("show a sub-agent's end", partial(port.edit, self._to, shown, text))
        else:
            key = hashlib.sha256(
                f"{self._session_id}|{finished.child_id}|{finished.turn}".encode()
            ).hexdigest()
            await self._calls.retried(
                "show a sub-agent's end", partial(port.post, self._to, text, key=key[:20])
            )
