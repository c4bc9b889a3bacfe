"""Frozen records built fast: a positional constructor for a frozen slots dataclass that
sets each slot through the slot's own descriptor.

A frozen dataclass's ``__init__`` goes around its own ``__setattr__`` with
``object.__setattr__``, a lookup and a call for every field: about half of what building a
message costs. Recovery builds thousands of messages and events from the journal
(bench/recovery.py), so its decoders build them with :func:`builder` instead. What is built
is the same object ``__init__`` makes: every slot set, still frozen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def builder(cls: type[T]) -> Callable[..., T]:
    """``cls``'s constructor taking every field, in the order the class declares them, by
    position (no defaults: each is given). ``cls`` must be a frozen slots dataclass without
    ``__post_init__``, whose ``__init__`` only stores its arguments; anything else is
    refused here, at import."""
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__ that a builder would skip")
    names = tuple(f.name for f in dataclasses.fields(cls))
    if not all(f.init for f in dataclasses.fields(cls)) or names != getattr(cls, "__slots__", None):
        raise TypeError(f"{cls.__name__}: a builder needs slots, each an __init__ field, in field order")
    space: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    space.update({f"_set{i}": cls.__dict__[name].__set__ for i, name in enumerate(names)})
    params = ", ".join(f"a{i}" for i in range(len(names)))
    body = "".join(f"    _set{i}(o, a{i})\n" for i in range(len(names)))
    exec(f"def build({params}):\n    o = _new(_cls)\n{body}    return o\n", space)  # our own text
    made: Callable[..., T] = space["build"]
    made.__qualname__ = made.__name__ = f"build_{cls.__name__}"
    return made
