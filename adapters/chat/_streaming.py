"""Showing a reply as it streams: one :class:`ReplyStream` per followed session.

The first text of a reply is posted at once; later deltas edit it at most every
``edit_interval_s`` (platforms rate-limit edits), and the final ``text`` replaces what
streamed, split at the platform's message size on paragraph and code-fence boundaries,
leftover pieces deleted. Each piece is posted with the outbox key of its turn and index,
so a post whose answer was lost (or the outbox, after a crash) never shows it twice.

Where the port streams natively (:class:`~adapters.chat.StreamingPort`: Slack's
``chat.startStream``) the reply is one growing message instead, appended to at the same
pace and closed with the final text; a platform without it falls back to posting and
editing, once and for all (:class:`NativeStreaming` is shared by a renderer's replies).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from adapters.chat._calls import PlatformCalls
from adapters.chat._port import (
    BEST_EFFORT,
    MUST_DELIVER,
    ChatApiError,
    Conversation,
    StreamingPort,
    StreamingUnsupported,
    new_key,
    outbox_key,
)
from adapters.chat._text import split_message
from netclaw.retry import RetryPolicy

log = logging.getLogger(__name__)

STREAM_PIECES = 3  # a natively streamed reply holds up to this many messages' worth of text


@dataclass(slots=True)
class NativeStreaming:
    """Does the platform stream natively here? True for a StreamingPort until it says no."""

    available: bool


@dataclass(slots=True)
class _Piece:
    message_id: str
    shown: str


@dataclass(slots=True)
class _Shown:
    """What the conversation shows of the turn being streamed."""

    turn: int | None = None
    text: str = ""
    pieces: list[_Piece] = field(default_factory=list)
    keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # piece → (key, text first sent)
    dirty: bool = False  # the text changed since it was last shown
    last_sync: float = 0.0
    stream: str | None = None  # the natively streamed message, while it is open
    streamed: str = ""  # the text it shows


class ReplyStream:
    def __init__(
        self,
        calls: PlatformCalls,
        session_id: str,
        to: Conversation,
        native: NativeStreaming,
        edit_interval_s: float,
    ) -> None:
        self._calls = calls
        self._port = calls.port
        self._session_id = session_id
        self._to = to
        self._native = native
        self._interval = edit_interval_s
        self._shown = _Shown()

    # -- state ----------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Is part of a reply shown, or waiting to be?"""
        shown = self._shown
        return bool(shown.text or shown.pieces or shown.stream)

    def due_in(self, now: float) -> float | None:
        """Seconds until the waiting update may be shown (throttled); None: nothing waits."""
        if not self._shown.dirty:
            return None
        return max(0.0, self._shown.last_sync + self._interval - now)

    def reset(self) -> None:
        """The reply is over (shown, or given up): the next text starts a new one."""
        self._shown = _Shown()

    def restart(self) -> None:
        """A new subscription: a resumed turn streams again from its start (into the
        messages already posted)."""
        self._shown.text = ""

    # -- what the session says ------------------------------------------------------------------

    async def delta(self, turn: int, delta: str) -> None:
        shown = self._for(turn)
        shown.text += delta
        shown.dirty = True
        first = not shown.pieces and shown.stream is None  # shown at once, the rest throttled
        if first or time.monotonic() - shown.last_sync >= self._interval:
            await self._sync()

    async def flush(self) -> None:
        """Show the update the throttle held back."""
        if self._shown.dirty:
            await self._sync()

    async def final(self, turn: int, text: str) -> list[str] | None:
        """The turn's reply as recorded, shown in full: the ids of its messages, or None
        when it could not be shown. The caller records it, then resets."""
        shown = self._for(turn)
        if text.strip() or not shown.pieces:  # an empty answer leaves what streamed
            shown.text = text
        shown.dirty = True
        if await self._sync(final=True):
            return [p.message_id for p in shown.pieces]
        return None

    async def completed(self) -> None:
        """The turn ended; without a final ``text`` what streamed stays, as it is."""
        shown = self._shown
        if shown.dirty or shown.stream is not None:
            await self._sync(final=True)
        self.reset()

    async def failed(self) -> None:
        """The turn failed: show what streamed (closing an open stream), then start afresh."""
        shown = self._shown
        if shown.dirty or shown.stream is not None:
            await self._sync(final=shown.stream is not None)
        self.reset()

    def _for(self, turn: int) -> _Shown:
        if self._shown.turn not in (None, turn) and self.active:
            self.reset()  # a new turn's text never lands in the last one's messages
        self._shown.turn = turn
        return self._shown

    # -- showing it -----------------------------------------------------------------------------

    async def _sync(self, *, final: bool = False) -> bool:
        """Make the conversation show the reply: edit what is posted, post what is new and,
        when final, delete what is left over. A streaming update that fails is tried again
        at the next interval; a final one is retried before it gives up. True when shown."""
        shown, port = self._shown, self._port
        shown.dirty = False
        shown.last_sync = time.monotonic()
        if self._native.available and self._to.thread is not None and (shown.stream or not shown.pieces):
            streamed = await self._sync_stream(final=final)
            if streamed is not None:
                return streamed
        text = shown.text
        pieces = [port.escape(p) for p in split_message(text, port.message_limit)] if text.strip() else []
        try:
            await self._show(pieces, MUST_DELIVER if final else BEST_EFFORT)
            if final:
                while len(shown.pieces) > len(pieces):  # the final reply is shorter than the stream
                    extra = shown.pieces.pop()
                    await self._calls.quietly("delete a stale piece", port.delete(self._to, extra.message_id))
        except ChatApiError as exc:
            if final:
                log.error("%s: could not show the reply in %s: %s", port.platform, self._session_id, exc)
            else:
                log.info("%s: streaming update in %s skipped: %s", port.platform, self._session_id, exc)
                shown.dirty = True
            return False
        finally:
            shown.last_sync = time.monotonic()
        return True

    async def _sync_stream(self, *, final: bool) -> bool | None:
        """The reply as one natively streamed message: opened with the first text, appended
        to, closed with the rest of the final text. None: not handled here (no streaming on
        this platform, or a final text the stream cannot show whole) — post and edit."""
        port = self._port
        assert isinstance(port, StreamingPort)
        shown, to = self._shown, self._to
        text = shown.text
        try:
            if shown.stream is None:
                if final or not text.strip():
                    return None if final else True
                shown.stream = await port.stream_start(to, text)
                shown.streamed = text
                return True
            grows = text.startswith(shown.streamed) and len(text) <= port.message_limit * STREAM_PIECES
            if not final:
                if grows and len(text) > len(shown.streamed):  # else: the final text settles it
                    await port.stream_append(to, shown.stream, text[len(shown.streamed) :])
                    shown.streamed = text
                return True
            key = outbox_key(self._session_id, shown.turn, 0) if shown.turn is not None else new_key()
            rest = text[len(shown.streamed) :] if grows else ""
            stream_id = shown.stream
            await self._calls.retried(
                "close a streamed reply", partial(port.stream_stop, to, stream_id, rest, key=key)
            )
            shown.stream = None
            shown.streamed = text if grows else shown.streamed
            # From here it is an ordinary posted piece: a final text it could not show whole
            # (rewritten, or longer than a streamed message holds) is edited in as usual.
            shown.pieces = [_Piece(stream_id, port.escape(text) if grows else "")]
            return True if grows else None
        except StreamingUnsupported as exc:
            log.info("%s: no native streaming here (%s); posting and editing instead", port.platform, exc)
            self._native.available = False
            shown.stream = None
            return None
        except ChatApiError as exc:
            if final:
                log.error(
                    "%s: could not close the streamed reply in %s: %s", port.platform, self._session_id, exc
                )
            else:
                log.info("%s: streaming update in %s skipped: %s", port.platform, self._session_id, exc)
                shown.dirty = True
            return False

    async def _show(self, pieces: Sequence[str], policy: RetryPolicy) -> None:
        shown, to, port = self._shown, self._to, self._port
        for index, piece in enumerate(pieces):
            if index >= len(shown.pieces):
                # One key per piece of the turn, the outbox's: a repeat after a lost answer (or
                # the outbox after a crash) finds the message already made.
                key = new_key() if shown.turn is None else outbox_key(self._session_id, shown.turn, index)
                key, first = shown.keys.setdefault(index, (key, piece))
                message_id = await self._calls.retried(
                    "send a reply", partial(port.post, to, piece, key=key), policy
                )
                shown.pieces.append(_Piece(message_id, first))
            current = shown.pieces[index]
            if current.shown == piece:
                continue
            try:
                await self._calls.retried(
                    "edit a reply", partial(port.edit, to, current.message_id, piece), policy
                )
            except ChatApiError as exc:
                if exc.status != 404:
                    raise
                # Someone deleted our message: post the piece anew rather than lose it.
                key = new_key()
                shown.keys[index] = (key, piece)
                current.message_id = await self._calls.retried(
                    "send a reply", partial(port.post, to, piece, key=key), policy
                )
            current.shown = piece
