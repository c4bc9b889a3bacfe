"""A model call as values: the request in netclaw's message model, the deltas it
streams, the completion it ends with, and the protocol every provider speaks.

Pure (no I/O library is imported here), so the session core can name these types
without loading an HTTP client; the implementations live in :mod:`netclaw.providers`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from netclaw.messages import ChatMessage, ToolCall


@dataclass(frozen=True, slots=True)
class ToolSchema:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    model: str
    messages: Sequence[ChatMessage]  # system prompt first; already swept and trimmed
    tools: Sequence[ToolSchema] = ()
    max_output_tokens: int = 4096
    vision: bool = False  # the model reads images: attached ones go as image parts
    # Groups a session's requests for the provider's prompt cache (OpenAI's prompt_cache_key);
    # None: no caching hint.
    cache_key: str | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of the answer as it streams in."""

    kind: Literal["text", "thinking"]
    text: str


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    usage: Usage | None = None
    finish_reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # provider round-trip data


OnDelta = Callable[[Delta], None]


class Provider(Protocol):
    """A chat model behind some API. Runs on the I/O loop.

    ``complete`` streams, calling ``on_delta`` for every text or thinking piece,
    and returns the assembled completion. It raises only
    :class:`~netclaw.errors.ProviderError` subclasses. Transient failures are
    retried inside ``complete`` only while nothing has been streamed yet, so a
    retry can never show or record anything twice.
    """

    name: str

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion: ...

    async def check(self, model: str | None = None) -> str:
        """Cheap probe for ``doctor``, ``init`` and start-up: reachable, and ``model`` served
        (where the server lists its models); returns a short description."""
        ...

    async def aclose(self) -> None: ...
