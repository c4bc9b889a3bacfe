"""A chat platform in memory: a :class:`~adapters.chat.ChatPort` that records what the
renderer does.

It runs on whatever loop calls it (the daemon's I/O loop in the tests) and is read from
the test thread; every record is kept under a lock. Failures are scriptable per
operation: ``fail("post", error)`` makes the next ``post`` raise ``error`` before doing
anything; ``lose_answer("post", error)`` lets it take effect and then raise (the answer
was lost on the way back). A repeated idempotency key returns the message already made,
as the real ports guarantee.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from adapters.chat import Button, ChatApiError, Conversation, MessageRef, StreamingUnsupported, new_key

OPS = (
    "post",
    "edit",
    "delete",
    "react",
    "typing",
    "upload",
    "post_buttons",
    "create_thread",
    "find_posted",
    "history",
    "download",
    "stream_start",
    "stream_append",
    "stream_stop",
)


@dataclass
class FakeMessage:
    id: str
    channel_id: str
    text: str
    sent_at: float
    thread: str | None = None
    edits: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, new text)
    deleted: bool = False
    buttons: tuple[Button, ...] = ()
    file: tuple[str, bytes, str] | None = None  # (name, data, mime type)


class FakeChatPort:
    platform = "fake"
    message_limit = 500
    error_type: type[ChatApiError] = ChatApiError

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(900_001)
        self.messages: dict[str, FakeMessage] = {}
        self.reactions: set[tuple[str, str, str]] = set()  # (channel, message, reaction) now present
        self.reaction_log: list[
            tuple[str, str, str, str]
        ] = []  # ("add"|"remove", channel, message, reaction)
        self.typing_in: list[str] = []
        self.calls: list[tuple[str, float]] = []  # every attempt, failed ones included
        self.failures: list[tuple[str, ChatApiError]] = []  # errors raised so far
        self._scripted: dict[str, deque[ChatApiError]] = defaultdict(deque)
        self._lost: dict[str, deque[ChatApiError]] = defaultdict(deque)
        self._by_key: dict[str, str] = {}

    # -- scripting (test thread) ----------------------------------------------------------------

    def fail(self, op: str, *errors: ChatApiError) -> None:
        """The next ``len(errors)`` calls of ``op`` raise these errors, in order."""
        assert op in OPS, op
        with self._lock:
            self._scripted[op].extend(errors)

    def lose_answer(self, op: str, *errors: ChatApiError) -> None:
        """The next calls of ``op`` take effect, and then raise these errors."""
        assert op in OPS, op
        with self._lock:
            self._lost[op].extend(errors)

    def _enter(self, op: str) -> None:
        with self._lock:
            self.calls.append((op, time.monotonic()))
            pending = self._scripted[op]
            if pending:
                error = pending.popleft()
                self.failures.append((op, error))
                raise error

    def _leave(self, op: str) -> None:
        with self._lock:
            pending = self._lost[op]
            if pending:
                error = pending.popleft()
                self.failures.append((op, error))
                raise error

    # -- the port -------------------------------------------------------------------------------

    def escape(self, text: str) -> str:
        return text

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        self._enter("post")
        message_id = self._store(to, text, key)
        self._leave("post")
        return message_id

    async def post_buttons(self, to: Conversation, text: str, buttons: Sequence[Button], *, key: str) -> str:
        self._enter("post_buttons")
        message_id = self._store(to, text, key, buttons=tuple(buttons))
        self._leave("post_buttons")
        return message_id

    def _store(self, to: Conversation, text: str, key: str, *, buttons: tuple[Button, ...] = ()) -> str:
        if not text or len(text) > self.message_limit:
            raise self.error_type(
                f"400: message length {len(text)} not in 1..{self.message_limit}", status=400
            )
        if len(key) > 25:
            raise self.error_type("400: idempotency key longer than 25 characters", status=400)
        with self._lock:
            if key in self._by_key:  # the same post again: the message already made
                return self._by_key[key]
            message = FakeMessage(
                str(next(self._ids)), to.channel, text, time.monotonic(), to.thread, buttons=buttons
            )
            self.messages[message.id] = message
            self._by_key[key] = message.id
            return message.id

    async def open_thread(self, channel: str, text: str, *, key: str, since: float) -> Conversation:
        message_id = await self.post(Conversation(channel), text, key=key)
        return Conversation(channel, message_id)

    async def find_posted(self, to: Conversation, key: str, since: float) -> str | None:
        self._enter("find_posted")
        with self._lock:
            found = self._by_key.get(key)
            return found if found is not None and not self.messages[found].deleted else None

    async def edit(self, to: Conversation, message_id: str, text: str) -> None:
        self._enter("edit")
        if not text or len(text) > self.message_limit:
            raise self.error_type(
                f"400: message length {len(text)} not in 1..{self.message_limit}", status=400
            )
        with self._lock:
            message = self._own(to.channel, message_id)
            message.text = text
            message.buttons = ()
            message.edits.append((time.monotonic(), text))

    async def delete(self, to: Conversation, message_id: str) -> None:
        self._enter("delete")
        with self._lock:
            message = self.messages.get(message_id)
            if message is not None and message.channel_id == to.channel:
                message.deleted = True

    async def react(self, message: MessageRef, reaction: str, *, add: bool) -> None:
        self._enter("react")
        with self._lock:
            mark = (message.channel, message.message_id, reaction)
            if add:
                self.reactions.add(mark)
            else:
                self.reactions.discard(mark)
            self.reaction_log.append(("add" if add else "remove", *mark))

    async def typing(self, to: Conversation) -> None:
        self._enter("typing")
        with self._lock:
            self.typing_in.append(to.channel)

    async def upload(self, to: Conversation, name: str, data: bytes, mime_type: str) -> str:
        self._enter("upload")
        with self._lock:
            message = FakeMessage(
                str(next(self._ids)), to.channel, f"[file {name}]", time.monotonic(), to.thread
            )
            message.file = (name, data, mime_type)
            self.messages[message.id] = message
            return message.id

    def _own(self, channel_id: str, message_id: str) -> FakeMessage:
        message = self.messages.get(message_id)
        if message is None or message.channel_id != channel_id or message.deleted:
            raise self.error_type(f"404: unknown message {message_id} in {channel_id}", status=404)
        return message

    # -- reading (test thread) ------------------------------------------------------------------

    def in_channel(self, channel_id: str) -> list[FakeMessage]:
        """Messages the bot posted in a channel or thread and did not delete, oldest first."""
        with self._lock:
            return [m for m in self.messages.values() if m.channel_id == channel_id and not m.deleted]

    def texts(self, channel_id: str) -> list[str]:
        return [m.text for m in self.in_channel(channel_id)]

    def posted_with(self, key: str) -> str | None:
        """The id of the message posted with idempotency key ``key``, if any."""
        with self._lock:
            return self._by_key.get(key)

    def count(self, op: str) -> int:
        with self._lock:
            return sum(1 for name, _ in self.calls if name == op)

    def wait_for(
        self, predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)


class FakeStreamingPort(FakeChatPort):
    """A chat port that streams natively (Slack's ``chat.startStream`` & co.): a streamed
    message grows with each append and is closed once, carrying a key. With ``supported``
    False, ``stream_start`` refuses, as a workspace without AI apps does."""

    def __init__(self, *, supported: bool = True) -> None:
        super().__init__()
        self.supported = supported
        self.streaming: set[str] = set()  # message ids still open
        self.stream_log: list[tuple[str, str]] = []  # ("start"|"append"|"stop", text)
        self.stop_keys: dict[str, str] = {}  # message id -> key it was closed with

    async def stream_start(self, to: Conversation, text: str) -> str:
        self._enter("stream_start")
        if not self.supported:
            raise StreamingUnsupported("no streaming in this workspace")
        message_id = self._store(to, text, new_key())
        with self._lock:
            self.streaming.add(message_id)
            self.stream_log.append(("start", text))
        return message_id

    async def stream_append(self, to: Conversation, message_id: str, text: str) -> None:
        self._enter("stream_append")
        with self._lock:
            assert message_id in self.streaming, "append to a closed stream"
            message = self._own(to.channel, message_id)
            message.text += text
            self.stream_log.append(("append", text))

    async def stream_stop(self, to: Conversation, message_id: str, text: str, *, key: str) -> None:
        self._enter("stream_stop")
        with self._lock:
            assert message_id in self.streaming, "stop of a closed stream"
            message = self._own(to.channel, message_id)
            message.text += text
            self.streaming.discard(message_id)
            self.stop_keys[message_id] = key
            self.stream_log.append(("stop", text))
