"""What a tool is and what a call of it returns, as values: the tool (schema and
handler), who calls it (:class:`ToolContext`), and its result.

Pure (no I/O library is imported here), so the session core can name these types
without loading the tools' own dependencies; the registry and the tools themselves
live in :mod:`netclaw.tools`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from netclaw.llm import ToolSchema
from netclaw.messages import Attachment, ToolCall
from netclaw.security.policy import NO_HINTS, ToolHints

# -- what a running call may ask of its session (progress, a person's answer, sampling) ----------

AnswerAction = Literal["accept", "decline", "cancel"]
QuestionKind = Literal["form", "url", "confirm"]


@dataclass(frozen=True, slots=True)
class Question:
    """Something a tool needs a person to say.

    - ``form``: fill in ``schema`` (a flat JSON-Schema object of strings, numbers,
      booleans and enums, as MCP elicitation allows);
    - ``url``: open ``url`` and say whether they did (MCP's URL-mode elicitation:
      credentials, payments — nothing passes through netclaw);
    - ``confirm``: yes or no (sampling's go-ahead).
    """

    kind: QuestionKind
    source: str  # who asks, for people: "MCP server docs"
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    action: AnswerAction
    content: Mapping[str, Any] | None = None  # form: the values, when accepted
    by: str = ""


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """A prompt a tool wants the session's model to answer (MCP ``sampling/createMessage``)."""

    source: str
    messages: Sequence[tuple[Literal["user", "assistant"], str]]
    system_prompt: str | None = None
    max_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class SampleReply:
    text: str
    model: str
    stop_reason: str | None = None


class SampleRefused(Exception):
    """The person said no (or did not answer), or the session may not sample."""


class ToolSession(Protocol):
    """The session a tool call runs in (on the I/O loop). ``call_id`` and ``tool`` name the
    call (the registry puts them on the ToolContext)."""

    def progress(
        self, call_id: str, tool: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """Tell subscribers how far the call is (a ``tool_progress`` output)."""
        ...

    async def ask(self, call_id: str, tool: str, question: Question) -> Answer:
        """Ask the person in the conversation and wait (up to ``tools.approval_timeout_s``);
        ``cancel`` when nobody answers, ``decline`` where nobody may be asked (public)."""
        ...

    async def sample(self, call_id: str, tool: str, request: SampleRequest) -> SampleReply:
        """The session's model answers ``request`` once a person allows it; its tokens count
        toward the session's spend. SampleRefused otherwise."""
        ...


# -- tools, their context and their results ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling: tools that keep state (memory) scope it by session and audience."""

    session_id: str
    audience: str  # personal / team / public
    turn: int | None = None  # the turn that called (provenance of what the tool saves)
    scope: str | None = None  # where memories made here belong (a channel, a DM, a route)
    recall_scope: str | None = None  # what memory search keeps to (None: the whole audience)
    recall: bool = True  # memory search is on (audiences.*.memory_scope is not "none")
    session: ToolSession | None = None  # what the call may ask of its session (progress, questions)
    call_id: str = ""  # the call being run (set by the registry for each call)
    tool: str = ""


# Used when the caller passes no context (callers that predate it).
DEFAULT_CONTEXT = ToolContext("", "personal")


@dataclass(frozen=True, slots=True)
class ToolReply:
    """What a tool returns when it has more than text: files to show in the conversation
    (a ``file`` output each, uploaded by chat channels), and images for the model (stored
    with the tool's message; a vision model sees them, another gets a note)."""

    content: str
    files: tuple[Attachment, ...] = ()
    images: tuple[Attachment, ...] = ()
    # This result carries outside text although the tool's results do not always (a skill
    # the agent saved, a sub-agent's answer): the registry labels it like an untrusted tool's.
    untrusted: bool = False


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[str | ToolReply]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object
    handler: ToolHandler
    hints: ToolHints = NO_HINTS  # what it says about itself (approvals read it)
    # Its results carry text from outside the conversation (a web page, a file, a command's
    # output, an MCP server's answer): the registry labels every result once the handler ran,
    # errors included (netclaw/security/trust.py), and the label ends "always" grants for the turn.
    untrusted: bool = False

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(self.name, self.description, self.parameters)


@dataclass(frozen=True, slots=True)
class ToolResult:
    call: ToolCall
    content: str
    is_error: bool = False
    files: tuple[Attachment, ...] = ()  # shared with the conversation
    images: tuple[Attachment, ...] = ()  # for the model, with the tool's message


class ToolSource(Protocol):
    """Tools that come and go while the daemon runs (an MCP server's)."""

    def tools(self) -> Iterable[Tool]: ...
