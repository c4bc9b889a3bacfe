"""What a tool is and what a call of it returns, as values: the tool (schema and
handler), who calls it (:class:`ToolContext`), and its result.

Pure (no I/O library is imported here), so the session core can name these types
without loading the tools' own dependencies; the registry and the tools themselves
live in :mod:`netclaw.tools`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from netclaw.llm import ToolSchema
from netclaw.messages import Attachment, ToolCall


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling: tools that keep state (memory) scope it by session and audience."""

    session_id: str
    audience: str  # personal / team / public
    turn: int | None = None  # the turn that called (provenance of what the tool saves)
    scope: str | None = None  # where memories made here belong (a channel, a DM, a route)
    recall_scope: str | None = None  # what memory search keeps to (None: the whole audience)
    recall: bool = True  # memory search is on (audiences.*.memory_scope is not "none")
    call_id: str | None = None  # the call being run (set per call by the registry)


# Used when the caller passes no context (callers that predate it).
DEFAULT_CONTEXT = ToolContext("", "personal")


@dataclass(frozen=True, slots=True)
class ToolReply:
    """What a tool returns when it has more than text: files to show in the conversation
    (a ``file`` output each, uploaded by chat channels)."""

    content: str
    files: tuple[Attachment, ...] = ()


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[str | ToolReply]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object
    handler: ToolHandler

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self.parameters)


@dataclass(frozen=True, slots=True)
class ToolResult:
    call: ToolCall
    content: str
    is_error: bool = False
    files: tuple[Attachment, ...] = ()  # shared with the conversation


class ToolSource(Protocol):
    """Tools that come and go while the daemon runs (an MCP server's)."""

    def tools(self) -> Iterable[Tool]: ...
