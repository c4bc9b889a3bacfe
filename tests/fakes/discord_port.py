"""A fake :class:`~adapters.discord.DiscordPort`: records what the adapter does on "Discord".

It runs on whatever loop calls it (the daemon's I/O loop in the integration tests) and is
read from the test thread; every record is appended under a lock. Failures are scriptable
per operation: ``fail("send", rate_limited(0.05))`` makes the next ``send`` raise that
error (before doing anything), as the real port does when Discord answers 429.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from adapters.discord import MESSAGE_LIMIT, DiscordApiError

OPS = ("create_thread", "send", "edit", "delete", "add_reaction", "remove_reaction", "typing")


@dataclass
class FakeMessage:
    id: str
    channel_id: str
    text: str
    sent_at: float
    edits: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, new text)
    deleted: bool = False


@dataclass(frozen=True)
class FakeThread:
    id: str
    channel_id: str
    message_id: str
    name: str


class FakeDiscordPort:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(900_001)
        self.threads: list[FakeThread] = []
        self.messages: dict[str, FakeMessage] = {}
        self.reactions: set[tuple[str, str, str]] = set()  # (channel, message, emoji) now present
        self.reaction_log: list[tuple[str, str, str, str]] = []  # ("add"|"remove", channel, message, emoji)
        self.typing_in: list[str] = []
        self.calls: list[tuple[str, float]] = []  # every attempt, failed ones included
        self.failures: list[tuple[str, DiscordApiError]] = []  # errors raised so far
        self._scripted: dict[str, deque[DiscordApiError]] = defaultdict(deque)

    # -- scripting ------------------------------------------------------------------------------

    def fail(self, op: str, *errors: DiscordApiError) -> None:
        """The next ``len(errors)`` calls of ``op`` raise these errors, in order."""
        assert op in OPS, op
        with self._lock:
            self._scripted[op].extend(errors)

    def _enter(self, op: str) -> None:
        with self._lock:
            self.calls.append((op, time.monotonic()))
            pending = self._scripted[op]
            if pending:
                error = pending.popleft()
                self.failures.append((op, error))
                raise error

    # -- the port -------------------------------------------------------------------------------

    async def create_thread(self, channel_id: str, message_id: str, name: str) -> str:
        self._enter("create_thread")
        assert 1 <= len(name) <= 100, name
        with self._lock:
            thread = FakeThread(str(next(self._ids)), channel_id, message_id, name)
            self.threads.append(thread)
        return thread.id

    async def send(self, channel_id: str, text: str) -> str:
        self._enter("send")
        if not text or len(text) > MESSAGE_LIMIT:
            raise DiscordApiError(f"400: message length {len(text)} not in 1..{MESSAGE_LIMIT}", status=400)
        with self._lock:
            message = FakeMessage(str(next(self._ids)), channel_id, text, time.monotonic())
            self.messages[message.id] = message
        return message.id

    async def edit(self, channel_id: str, message_id: str, text: str) -> None:
        self._enter("edit")
        if not text or len(text) > MESSAGE_LIMIT:
            raise DiscordApiError(f"400: message length {len(text)} not in 1..{MESSAGE_LIMIT}", status=400)
        with self._lock:
            message = self._own(channel_id, message_id)
            message.text = text
            message.edits.append((time.monotonic(), text))

    async def delete(self, channel_id: str, message_id: str) -> None:
        self._enter("delete")
        with self._lock:
            self._own(channel_id, message_id).deleted = True

    async def add_reaction(self, channel_id: str, message_id: str, emoji: str) -> None:
        self._enter("add_reaction")
        with self._lock:
            self.reactions.add((channel_id, message_id, emoji))
            self.reaction_log.append(("add", channel_id, message_id, emoji))

    async def remove_reaction(self, channel_id: str, message_id: str, emoji: str) -> None:
        self._enter("remove_reaction")
        with self._lock:
            self.reactions.discard((channel_id, message_id, emoji))
            self.reaction_log.append(("remove", channel_id, message_id, emoji))

    async def typing(self, channel_id: str) -> None:
        self._enter("typing")
        with self._lock:
            self.typing_in.append(channel_id)

    def _own(self, channel_id: str, message_id: str) -> FakeMessage:
        message = self.messages.get(message_id)
        if message is None or message.channel_id != channel_id or message.deleted:
            raise DiscordApiError(f"404: unknown message {message_id} in {channel_id}", status=404)
        return message

    # -- reading (test thread) ------------------------------------------------------------------

    def in_channel(self, channel_id: str) -> list[FakeMessage]:
        """Messages the bot posted in a channel or thread and did not delete, oldest first."""
        with self._lock:
            return [m for m in self.messages.values() if m.channel_id == channel_id and not m.deleted]

    def texts(self, channel_id: str) -> list[str]:
        return [m.text for m in self.in_channel(channel_id)]

    def count(self, op: str) -> int:
        with self._lock:
            return sum(1 for name, _ in self.calls if name == op)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)
