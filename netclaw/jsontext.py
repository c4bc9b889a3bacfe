"""Compact JSON, as netclaw writes it on every turn (journal events, snapshots, provider
requests) and reads it from every streamed answer: ``orjson``, about ten times faster
than ``json`` at writing and four at reading, with ``json`` taking what ``orjson`` refuses.

The text is the one ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``
wrote: no spaces, UTF-8 as it is. Where they differ it reads back the same: a small
float's digits (``0.00001`` for ``1e-05``), and NaN or an infinity, which ``orjson``
writes as ``null`` where ``json`` wrote text that is not JSON. A value ``orjson`` cannot
write (a string with a lone surrogate, an integer past 64 bits, a dict keyed by numbers)
is written by ``json``, as before.

Recovery reads thousands of journal payloads at once (:func:`loads_each`): ``msgspec``'s
decoder, which reads every value as ``json`` does, integers of any size included (where
``orjson`` would make one past 64 bits a float), in about a third of ``json``'s time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson


def dumps(value: Any) -> str:
    """``value`` as compact JSON text."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError included
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dumps_bytes(value: Any) -> bytes:
    """``value`` as compact JSON, UTF-8."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes) -> Any:
    """JSON read from UTF-8 ``data``. What ``orjson`` refuses that ``json`` reads (a lone
    surrogate's escape, NaN, nesting past 1,024) goes to ``json``, which fails as it always
    did: ValueError, or RecursionError. (``orjson`` reads an integer past 64 bits as a
    float; read only where no field holds one: a streamed answer's events.)"""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data.decode())  # UTF-8 by contract: no guessing of the encoding


_DECODER = msgspec.json.Decoder()
# msgspec's refusals: not JSON to it, a str it cannot encode as UTF-8 (a lone surrogate), depth.
_REFUSED = (msgspec.DecodeError, UnicodeEncodeError, RecursionError)


def loads_each(texts: Sequence[str]) -> list[Any]:
    """Each text's JSON value, as ``json.loads`` reads it. What ``msgspec`` refuses and
    ``json`` reads (a lone surrogate, escaped or not, a number past a double's range,
    nesting past ``msgspec``'s depth) goes to ``json``, which fails as it always did for a
    text that is not JSON: ValueError (TypeError for one that is not text), or
    RecursionError."""
    try:
        return list(map(_DECODER.decode, texts))
    except _REFUSED:
        return [_loads_one(text) for text in texts]


def _loads_one(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except _REFUSED:
        return json.loads(text)
