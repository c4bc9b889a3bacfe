"""Attached images as the providers send them: base64 of the stored file, read once.

A session re-sends its whole context every turn, so an image in it would be read and
encoded again and again; a few recent encodings are kept (keyed by path and size: a
stored attachment never changes). The provider reads the ones not cached in a worker
thread before it builds the request (``uncached`` / ``read_all``), never on the I/O loop. An image whose file is gone is left out and named
in its place, never a failed turn.
"""

from __future__ import annotations

import base64
import logging
from collections import OrderedDict
from collections.abc import Sequence

from netclaw.messages import Attachment, ChatMessage, images_of

log = logging.getLogger("netclaw.providers")

CACHED_IMAGES = 8
CACHED_CHARS = 24_000_000  # and at most this much base64 text (an image may be 5 MB)
_cache: OrderedDict[tuple[str, int], str] = OrderedDict()


def image_base64(image: Attachment) -> str | None:
    key = (image.path, image.size)
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    try:
        with open(image.path, "rb") as f:
            data = f.read()
    except OSError as exc:
        log.warning("attached image %s is not readable (%s); sent without it", image.name, exc)
        return None
    encoded = base64.b64encode(data).decode("ascii")
    _cache[key] = encoded
    while len(_cache) > CACHED_IMAGES or (len(_cache) > 1 and sum(map(len, _cache.values())) > CACHED_CHARS):
        _cache.popitem(last=False)
    return encoded


def uncached(messages: Sequence[ChatMessage]) -> list[Attachment]:
    """The images of ``messages`` not read yet (to read in a worker thread, off the loop)."""
    return [f for m in messages for f in images_of(m) if (f.path, f.size) not in _cache]


def read_all(images: Sequence[Attachment]) -> None:
    """Read and encode ``images`` into the cache (blocking: call it from a worker thread)."""
    for image in images:
        image_base64(image)


def missing_note(image: Attachment) -> str:
    return f"[the image {image.name} is no longer available]"
