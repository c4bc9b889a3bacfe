"""Attached images as the providers send them: base64 of the stored file, read once.

A session re-sends its whole context every turn, so an image in it would be read and
encoded again and again; a few recent encodings are kept (keyed by path and size: a
stored attachment never changes). An image whose file is gone is left out and named
in its place, never a failed turn.
"""

from __future__ import annotations

import base64
import logging
from collections import OrderedDict

from netclaw.messages import Attachment

log = logging.getLogger("netclaw.providers")

CACHED_IMAGES = 8
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
    while len(_cache) > CACHED_IMAGES:
        _cache.popitem(last=False)
    return encoded


def missing_note(image: Attachment) -> str:
    return f"[the image {image.name} is no longer available]"
