"""What the chat renderer's parts use of the gateway, in memory and driven by the test.

Each ``subscribe`` opens a stream the test pushes outputs into (it starts with
``joined``, as the real one does); the outbox's records, the sessions owing replies, the
owners of sessions (several nodes) and the approval decisions are plain attributes.
Runs on the test's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from netclaw import outputs as out
from netclaw.errors import NetclawError, NotAnApprover
from netclaw.gateway import Subscription
from netclaw.sessions import OutputQueue


class ChatGateway:
    def __init__(self) -> None:
        self.streams: list[tuple[str, OutputQueue]] = []
        self.closed: list[str] = []  # subscriptions closed by the renderer, by name
        self.owed: dict[str, list[tuple[int, str, float]]] = {}  # session -> (turn, text, recorded at)
        self.delivered: dict[tuple[str, int], list[str]] = {}
        self.failing: NetclawError | None = None  # the outbox's calls raise it
        self.pending: list[str] = []  # sessions with input waiting
        self.owing: list[str] = []  # sessions owing replies
        self.listeners: list[Callable[[str], None]] = []
        self.cluster_poll_s: float | None = None  # a number: several nodes
        self.elsewhere: set[str] = set()  # sessions resident on another node
        self.approvals: dict[str, str] = {}  # approval id -> session, for find_approval
        self.decisions: list[tuple[str, str, str, str]] = []

    # -- subscriptions --------------------------------------------------------------------------

    def subscribe(self, session_id: str, mask: out.OutputFilter) -> Subscription:
        queue = OutputQueue(asyncio.get_running_loop())
        name = f"sub{len(self.streams)}"
        self.streams.append((session_id, queue))
        queue.offer(out.Joined(session_id=session_id, title=None, turns=0, phase="ready"))
        return Subscription(session_id, name, queue, lambda: self.closed.append(name))

    def push(self, *outputs: out.Output) -> None:
        for output in outputs:
            self.streams[-1][1].offer(output)

    def end_stream(self) -> None:
        self.streams[-1][1].close()

    async def owner_of(self, session_id: str) -> object | None:
        return "another node" if session_id in self.elsewhere else None

    # -- the outbox -----------------------------------------------------------------------------

    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]:
        if self.failing is not None:
            raise self.failing
        return [r for r in self.owed.get(session_id, []) if (session_id, r[0]) not in self.delivered]

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        if self.failing is not None:
            raise self.failing
        self.delivered[(session_id, turn)] = list(message_ids)
        return True

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]:
        return list(self.pending)

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        return list(self.owing)

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    # -- approvals ------------------------------------------------------------------------------

    async def find_approval(self, approval_id: str) -> str | None:
        return self.approvals.get(approval_id)

    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str:
        if user_id == "U666":
            raise NotAnApprover(f"{user_name} may not decide on tool calls in this session")
        if self.failing is not None:
            raise self.failing
        self.decisions.append((session_id, approval_id, decision, user_name))
        return decision


async def until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll on the loop (the parts work in background tasks) until ``predicate`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)
