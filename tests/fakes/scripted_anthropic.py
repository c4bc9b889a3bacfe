"""A scripted Anthropic Messages API server for tests and benchmarks.

A real aiohttp server on 127.0.0.1 speaking ``POST /v1/messages`` (the documented SSE
event stream when ``stream: true``, one Message object otherwise) and ``GET /v1/models``.
Each request consumes one scripted step (a :class:`Reply` or an :class:`ErrorReply`) from a
FIFO queue; marker routes are checked before the queue, and a default responder (echo of the
last user text block unless replaced) answers when it is empty.

Requests are validated the way the real API validates what matters to netclaw's wire
conversion, and rejected with a 400 ``invalid_request_error`` otherwise: ``messages`` must
start with a user message and alternate user/assistant, must not hold ``system`` or ``tool``
roles, text blocks must not be empty, every ``tool_use`` must be answered by a
``tool_result`` in the very next (user) message, and every ``tool_result`` must answer a
``tool_use`` of the immediately preceding assistant message. Rejections are kept in
:attr:`ScriptedAnthropic.rejected`.

Run standalone (used by end-to-end tests)::

    python -m tests.fakes.scripted_anthropic --port 0 [--script FILE.json] [--context-window N]

which prints ``LISTENING http://127.0.0.1:PORT`` on one line and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from aiohttp import web

from tests.fakes._scripted_server import (
    PrefixCache,
    ScriptedServer,
    ScriptedServerThread,
    ToolCallSpec,
    error_fields,
    is_context,
    load_steps,
    pieces,
    reply_fields,
    request_messages,
    run_cli,
    without_cache_marks,
    without_speaker,
)

__all__ = [
    "ErrorReply",
    "Reply",
    "Responder",
    "ScriptedAnthropic",
    "ScriptedAnthropicThread",
    "Step",
    "StreamError",
    "ToolCallSpec",
    "estimate_prompt_tokens",
    "load_script",
    "overflow",
    "overloaded",
    "rate_limited",
    "server_error",
    "step_from_dict",
    "validate_request",
]

MODEL_ID = "claude-scripted"
API_VERSION = "2023-06-01"
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


# --------------------------------------------------------------------------- script steps


@dataclass
class StreamError:
    """An ``event: error`` sent inside a 200 stream (``overloaded_error``, ``api_error``, ...)."""

    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass
class Reply:
    """One scripted successful message.

    Streamed as: a thinking block (``thinking_delta`` pieces, then one ``signature_delta``)
    when ``thinking`` is set, a redacted_thinking block when ``redacted_thinking`` is set, a
    text block when ``text`` is set, then one tool_use block per tool call (its input in
    ``input_json_delta`` pieces).
    """

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    thinking: str = ""
    signature: str = "sig-scripted"  # of the thinking block
    redacted_thinking: str | None = None  # data of a redacted_thinking block
    usage: tuple[int, int] | None = None  # (input, output); None -> rough estimate
    # usage.cache_read_input_tokens / cache_creation_input_tokens; None: as the server's
    # simulated prompt cache says (the prompt's breakpoints against what it holds)
    cache_read: int | None = None
    cache_write: int | None = None
    delay_s: float = 0.0  # wait before the response headers
    chunk_delay_s: float = 0.0  # wait between SSE events
    chunk_size: int = 8  # characters per text / thinking / partial_json delta
    stop_reason: str | None = None  # default "tool_use" if tool_calls else "end_turn"
    drop_after_chunks: int | None = None  # close the connection after N events, no message_stop
    stream_error: StreamError | None = None  # sent after the content blocks, ending the stream
    hang: bool = False  # accept the request, never answer (cancelled by stop())
    hold_open_s: float = 0.0  # after message_stop, keep the body open this long
    omit_end: bool = False  # unused here: message_stop is part of the stream


@dataclass
class ErrorReply:
    """An HTTP error answer: ``{"type": "error", "error": {"type", "message"}}`` or raw ``body``."""

    status: int
    type: str = "invalid_request_error"
    message: str = "scripted error"
    retry_after: float | None = None  # sets the retry-after header
    body: str | None = None  # raw body overriding the JSON
    delay_s: float = 0.0  # wait before answering


Step: TypeAlias = Reply | ErrorReply
Responder: TypeAlias = Callable[[dict[str, Any]], Step | Awaitable[Step]]

DEFAULT_OVERFLOW_MESSAGE = "prompt is too long: 210000 tokens > 200000 maximum"


def overflow(message: str = DEFAULT_OVERFLOW_MESSAGE) -> ErrorReply:
    """A 400 prompt-too-long error, as Anthropic sends it."""
    return ErrorReply(status=400, type="invalid_request_error", message=message)


def overloaded() -> ErrorReply:
    """A 529 overloaded error."""
    return ErrorReply(status=529, type="overloaded_error", message="Overloaded")


def rate_limited(retry_after: float = 1.0) -> ErrorReply:
    """A 429 rate-limit error with a retry-after header."""
    return ErrorReply(
        status=429,
        type="rate_limit_error",
        message="Number of request tokens has exceeded your per-minute rate limit",
        retry_after=retry_after,
    )


def server_error(status: int = 500) -> ErrorReply:
    """A 5xx ``api_error``."""
    return ErrorReply(status=status, type="api_error", message="Internal server error")


def step_from_dict(data: dict[str, Any]) -> Step:
    """Build a step from its JSON script form (keys as the dataclass fields; ``error`` = status)."""
    if data.get("overflow"):
        return overflow(str(data.get("message", DEFAULT_OVERFLOW_MESSAGE)))
    if data.get("overloaded"):
        return overloaded()
    if "error" in data:
        return ErrorReply(**error_fields(data))
    stream_error = data.get("stream_error")
    return Reply(
        **reply_fields(data),
        signature=str(data.get("signature", "sig-scripted")),
        redacted_thinking=data.get("redacted_thinking"),
        cache_read=int(data["cache_read"]) if "cache_read" in data else None,
        cache_write=int(data["cache_write"]) if "cache_write" in data else None,
        stop_reason=data.get("stop_reason"),
        stream_error=None
        if stream_error is None
        else StreamError(
            type=str(stream_error.get("type", "overloaded_error")),
            message=str(stream_error.get("message", "Overloaded")),
        ),
    )


def load_script(path: str | Path) -> list[Step]:
    """Read a JSON list of step objects from ``path``."""
    return load_steps(path, step_from_dict)


# --------------------------------------------------------------------------- request helpers


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks of a message; a plain string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "thinking":
        return str(block.get("thinking") or "")
    if kind == "tool_use":
        return json.dumps(block.get("input"))
    if kind == "tool_result":
        return "".join(_block_text(b) for b in _blocks(block.get("content")))
    return ""


def _system_text(request: dict[str, Any]) -> str:
    return "".join(_block_text(b) for b in _blocks(request.get("system")))


def estimate_prompt_tokens(request: dict[str, Any]) -> int:
    """Rough prompt size: chars of the system prompt and all content blocks, // 4."""
    chars = len(_system_text(request))
    for msg in request_messages(request):
        chars += sum(len(_block_text(b)) for b in _blocks(msg.get("content")))
    return chars // 4


def _last_user_text(request: dict[str, Any]) -> str:
    for msg in reversed(request_messages(request)):
        if msg.get("role") != "user":
            continue
        for block in reversed(_blocks(msg.get("content"))):
            if block.get("type") == "text" and not is_context(str(block.get("text") or "")):
                return str(block.get("text") or "")
    return ""


def _error_json(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def _bad_request(message: str) -> web.Response:
    return web.json_response(_error_json("invalid_request_error", message), status=400)


def _validate_block(where: str, role: str, block: dict[str, Any]) -> str | None:
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return f"{where}.text: Field required"
        if not text:
            return "messages: text content blocks must be non-empty"
        if not text.strip():
            return "messages: text content blocks must contain non-whitespace text"
        return None
    if kind in ("thinking", "redacted_thinking"):
        if role != "assistant":
            return f"{where}: thinking blocks are only allowed in assistant messages"
        if kind == "thinking" and not isinstance(block.get("signature"), str):
            return f"{where}.thinking.signature: Field required"
        if kind == "redacted_thinking" and not isinstance(block.get("data"), str):
            return f"{where}.redacted_thinking.data: Field required"
        return None
    if kind == "tool_use":
        if role != "assistant":
            return f"{where}: `tool_use` blocks can only be in `assistant` messages"
        if not isinstance(block.get("id"), str) or not _TOOL_ID.match(block["id"]):
            return f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
        if not isinstance(block.get("name"), str) or not block["name"]:
            return f"{where}.tool_use.name: Field required"
        if not isinstance(block.get("input"), dict):
            return f"{where}.tool_use.input: Input should be a valid dictionary"
        return None
    if kind == "tool_result":
        if role != "user":
            return f"{where}: `tool_result` blocks can only be in `user` messages"
        if not isinstance(block.get("tool_use_id"), str):
            return f"{where}.tool_result.tool_use_id: Field required"
        content = block.get("content")
        if content is not None and not isinstance(content, str | list):
            return f"{where}.tool_result.content: Input should be a valid list"
        if "is_error" in block and not isinstance(block["is_error"], bool):
            return f"{where}.tool_result.is_error: Input should be a valid boolean"
        return None
    return f"{where}: Input tag {kind!r} found using 'type' does not match any of the expected tags"


MAX_CACHE_BREAKPOINTS = 4
_TTL_SECONDS = {"5m": 300, "1h": 3600}


def _cache_control_problem(body: dict[str, Any]) -> str | None:
    """The API's rules for ``cache_control`` (tools, then system, then messages, in order):
    ``{"type": "ephemeral"}`` with an optional ``ttl`` of ``5m`` or ``1h``, at most four of
    them, none on a thinking block or an empty text, and never a longer TTL after a shorter."""
    marked: list[tuple[str, Any, dict[str, Any]]] = []
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and "cache_control" in tool:
            marked.append((f"tools.{i}", tool["cache_control"], tool))
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else []):
        if isinstance(block, dict) and "cache_control" in block:
            marked.append((f"system.{i}", block["cache_control"], block))
    for n, msg in enumerate(body.get("messages") or []):
        for m, block in enumerate(_blocks(msg.get("content")) if isinstance(msg, dict) else []):
            if "cache_control" in block:
                marked.append((f"messages.{n}.content.{m}", block["cache_control"], block))
    if len(marked) > MAX_CACHE_BREAKPOINTS:
        return f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marked)}."
    longest = None
    for where, control, block in reversed(marked):  # from the end: TTLs may only grow
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            return f"{where}.cache_control.type: Input should be 'ephemeral'"
        if set(control) - {"type", "ttl"}:
            return f"{where}.cache_control: Extra inputs are not permitted"
        ttl = control.get("ttl", "5m")
        if ttl not in _TTL_SECONDS:
            return f"{where}.cache_control.ttl: Input should be '5m' or '1h'"
        if block.get("type") in ("thinking", "redacted_thinking"):
            return f"{where}.cache_control: Thinking blocks cannot be cached directly"
        if block.get("type") == "text" and not str(block.get("text") or "").strip():
            return f"{where}.cache_control: cache_control cannot be set for empty text blocks"
        if longest is not None and _TTL_SECONDS[ttl] < longest:
            return (
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block "
                "(tools, system, messages, in that order)"
            )
        longest = max(longest or 0, _TTL_SECONDS[ttl])
    return None


def cache_parts(body: dict[str, Any]) -> tuple[list[tuple[Any, int]], list[int]]:
    """The request as the prompt cache sees it — tools, system blocks, then every content
    block (with its role) — each with its tokens, and the indexes of the parts marked with
    ``cache_control`` (the breakpoints)."""
    parts: list[tuple[Any, int]] = []
    marks: list[int] = []

    def add(part: dict[str, Any], tokens: int, role: str | None = None) -> None:
        if "cache_control" in part:
            marks.append(len(parts))
        key = without_cache_marks(part)
        parts.append(({"role": role, "block": key} if role else key, tokens))

    for tool in body.get("tools") or []:
        add(tool, 0)
    for block in _blocks(body.get("system")):
        add(block, len(_block_text(block)) // 4)
    for msg in request_messages(body):
        for block in _blocks(msg.get("content")):
            add(block, len(_block_text(block)) // 4, str(msg.get("role")))
    return parts, marks


def validate_request(body: Any) -> str | None:
    """Why the real Messages API would reject ``body`` (None when it is acceptable)."""
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid list"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.name: Field required"
            if not isinstance(tool.get("input_schema"), dict):
                return f"tools.{i}.input_schema: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Field required"
    if not messages:
        return "messages: at least one message is required"
    previous_role: str | None = None
    previous_tool_uses: list[str] = []
    for n, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return f"messages.{n}: Input should be a valid dictionary"
        role = msg.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{n}.role: Input should be 'user' or 'assistant'"
        if n == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if role == previous_role:
            return (
                f'messages: roles must alternate between "user" and "assistant", '
                f'but found multiple "{role}" roles in a row'
            )
        content = msg.get("content")
        blocks: list[dict[str, Any]] = []
        if isinstance(content, str):
            if not content.strip() and not (role == "assistant" and n == len(messages) - 1):
                return f"messages.{n}: all messages must have non-empty content"
        elif isinstance(content, list):
            if not content:
                return f"messages.{n}: all messages must have non-empty content"
            blocks = _blocks(content)
            if len(blocks) != len(content):
                return f"messages.{n}.content: Input should be a valid list of objects"
        else:
            return f"messages.{n}.content: Field required"
        for m, block in enumerate(blocks):
            problem = _validate_block(f"messages.{n}.content.{m}", role, block)
            if problem:
                return problem
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if role == "user":
            first_other = next((i for i, b in enumerate(blocks) if b.get("type") != "tool_result"), None)
            if first_other is not None and any(b.get("type") == "tool_result" for b in blocks[first_other:]):
                return (
                    f"messages.{n}: `tool_result` blocks must come before any other content in a user message"
                )
            unexpected = [r for r in results if r not in previous_tool_uses]
            if unexpected:
                return (
                    f"messages.{n}.content.0: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {', '.join(unexpected)}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
            if len(set(results)) != len(results):
                return f"messages.{n}: duplicate `tool_use_id` found in `tool_result` blocks"
        missing = [u for u in previous_tool_uses if u not in results]
        if missing:
            return (
                f"messages.{n - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if len(set(uses)) != len(uses):
            return f"messages.{n}: `tool_use` ids must be unique"
        previous_tool_uses = uses if role == "assistant" else []
        previous_role = role
    if previous_tool_uses:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(previous_tool_uses)}."
        )
    return _cache_control_problem(body)


# --------------------------------------------------------------------------- the server


class ScriptedAnthropic(ScriptedServer[Reply, ErrorReply]):
    """The scripted server; use ``async with ScriptedAnthropic() as fake: fake.base_url``.

    :attr:`base_url` is ``http://127.0.0.1:PORT`` (the API lives under ``/v1``).
    """

    reply_type = Reply
    error_type = ErrorReply
    POST_PATH = "/v1/messages"
    CALL_ID_FORMAT = "toolu_{:024d}"
    RETRY_AFTER_HEADER = "retry-after"

    def __init__(
        self,
        *,
        default: Responder | None = None,
        context_window: int | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(default=default, context_window=context_window, host=host, port=port)
        self.api_key = api_key  # when set, requests must carry it in x-api-key
        self.rejected: list[tuple[Any, str]] = []  # (body, reason) of invalid requests

    # ----- protocol hooks

    def _auth_problem(self, request: web.Request) -> web.Response | None:
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            return web.json_response(_error_json("authentication_error", "invalid x-api-key"), status=401)
        if not request.headers.get("anthropic-version"):
            return _bad_request("anthropic-version: header is required")
        return None

    async def _handle_models(self, request: web.Request) -> web.Response:
        problem = self._auth_problem(request)
        if problem is not None:
            return problem
        model = {
            "type": "model",
            "id": MODEL_ID,
            "display_name": "Claude (scripted)",
            "created_at": "2025-01-01T00:00:00Z",
        }
        return web.json_response(
            {"data": [model], "has_more": False, "first_id": MODEL_ID, "last_id": MODEL_ID}
        )

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        problem = self._auth_problem(request)
        if problem is not None:
            return problem
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            return _bad_request("There was an issue with your request body: invalid JSON")
        reason = validate_request(body)
        if reason is not None:
            self.rejected.append((body, reason))
            return _bad_request(reason)
        return await self._respond(request, body)

    def _estimate_prompt_tokens(self, body: dict[str, Any]) -> int:
        return estimate_prompt_tokens(body)

    def _overflow(self, prompt_tokens: int) -> ErrorReply:
        return overflow(f"prompt is too long: {prompt_tokens} tokens > {self.context_window} maximum")

    def _texts(self, body: dict[str, Any]) -> list[str]:
        return [_system_text(body)] + [
            _block_text(b) for m in request_messages(body) for b in _blocks(m.get("content"))
        ]

    def _echo(self, body: dict[str, Any]) -> Reply:
        return Reply(text=f"echo: {without_speaker(_last_user_text(body))}")

    def _responder_failed(self, exc: Exception) -> web.Response:
        return web.json_response(_error_json("api_error", f"scripted responder raised {exc!r}"), status=500)

    def _error_headers(self) -> dict[str, str]:
        return {"request-id": f"req_scripted_{next(self._ids)}"}

    def _error_body(self, step: ErrorReply) -> dict[str, Any]:
        return _error_json(step.type, step.message)

    # ----- answers

    def _usage(
        self, body: dict[str, Any], step: Reply, calls: list[tuple[str, str, str]]
    ) -> tuple[int, int, int, int]:
        """(input, output, cache read, cache write) as the API reports them: ``input`` is
        what came after the last cache hit and write, never the whole prompt."""
        read, write = self._cache(body)
        if step.usage is not None:  # scripted: as given (no cache unless scripted too)
            return (*step.usage, step.cache_read or 0, step.cache_write or 0)
        out_chars = len(step.text) + len(step.thinking) + sum(len(a) for _, _, a in calls)
        prompt, output = estimate_prompt_tokens(body), out_chars // 4 + 1
        read = step.cache_read if step.cache_read is not None else read
        write = step.cache_write if step.cache_write is not None else write
        return max(prompt - read - write, 0), output, read, write

    def _cache(self, body: dict[str, Any]) -> tuple[int, int]:
        """The simulated prompt cache: read at the longest held prefix among the breakpoints
        (and the 20 parts before each), write what lies between it and the last breakpoint."""
        parts, marks = cache_parts(body)
        if not marks:
            return 0, 0
        hashes, tokens = PrefixCache.prefixes(str(body.get("model")), parts)
        looked = {i for mark in marks for i in range(max(mark - PrefixCache.LOOKBACK, 0), mark + 1)}
        cache = self.prompt_cache
        read = cache.read(hashes, tokens, looked)
        write = max(tokens[max(marks)] - read, 0)
        cache.hold(hashes, marks)
        return read, write

    @staticmethod
    def _stop_reason(step: Reply) -> str:
        if step.stop_reason is not None:
            return step.stop_reason
        return "tool_use" if step.tool_calls else "end_turn"

    def _content(self, step: Reply, calls: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
        """The message's content blocks, whole."""
        content: list[dict[str, Any]] = []
        if step.thinking:
            content.append({"type": "thinking", "thinking": step.thinking, "signature": step.signature})
        if step.redacted_thinking is not None:
            content.append({"type": "redacted_thinking", "data": step.redacted_thinking})
        if step.text:
            content.append({"type": "text", "text": step.text})
        for call_id, name, args in calls:
            try:
                parsed = json.loads(args) if args else {}
            except ValueError:
                parsed = {}
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": parsed})
        return content

    def _send_json(self, request: web.Request, body: dict[str, Any], step: Reply) -> web.Response:
        calls = self._resolve_calls(step)
        prompt, output, read, write = self._usage(body, step, calls)
        payload = {
            "id": f"msg_scripted_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": self._content(step, calls),
            "stop_reason": self._stop_reason(step),
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt,
                "output_tokens": output,
                "cache_creation_input_tokens": write,
                "cache_read_input_tokens": read,
            },
        }
        if step.drop_after_chunks is not None:
            self._drop(request)
        return web.json_response(payload)

    def _events(self, body: dict[str, Any], step: Reply) -> list[tuple[str, dict[str, Any]]]:
        calls = self._resolve_calls(step)
        prompt, output, read, write = self._usage(body, step, calls)
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_scripted_{next(self._ids)}",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": body["model"],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": prompt,
                            "cache_creation_input_tokens": write,
                            "cache_read_input_tokens": read,
                            "output_tokens": 1,
                        },
                    },
                },
            )
        ]
        index = 0
        pinged = False

        def block(content_block: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
            nonlocal index, pinged
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": content_block},
                )
            )
            if not pinged:  # the real API interleaves a ping after the first block start
                events.append(("ping", {"type": "ping"}))
                pinged = True
            events.extend(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                for d in deltas
            )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1

        size = step.chunk_size
        if step.thinking:
            block(
                {"type": "thinking", "thinking": ""},
                [{"type": "thinking_delta", "thinking": p} for p in pieces(step.thinking, size)]
                + [{"type": "signature_delta", "signature": step.signature}],
            )
        if step.redacted_thinking is not None:
            block({"type": "redacted_thinking", "data": step.redacted_thinking}, [])
        if step.text:
            block(
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": p} for p in pieces(step.text, size)],
            )
        for call_id, name, args in calls:
            block(
                {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                [{"type": "input_json_delta", "partial_json": ""}]
                + [{"type": "input_json_delta", "partial_json": p} for p in pieces(args, size)],
            )
        if step.stream_error is not None:
            events.append(("error", _error_json(step.stream_error.type, step.stream_error.message)))
            return events
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop_reason(step), "stop_sequence": None},
                    "usage": {"output_tokens": output},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    async def _send_stream(
        self, request: web.Request, body: dict[str, Any], step: Reply
    ) -> web.StreamResponse:
        events = self._events(body, step)
        headers = {
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "request-id": f"req_scripted_{next(self._ids)}",
        }
        # Dropped after N events: no message_stop, an incomplete stream.
        return await self._stream(
            request,
            step,
            headers,
            [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events],
        )


# --------------------------------------------------------------------------- threaded variant


class ScriptedAnthropicThread(ScriptedServerThread[Reply, ErrorReply]):
    """A :class:`ScriptedAnthropic` on its own event loop in a daemon thread, for sync code.

    Responders run on the server thread.
    """

    server: ScriptedAnthropic

    def __init__(
        self,
        *,
        default: Responder | None = None,
        context_window: int | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(
            ScriptedAnthropic(
                default=default, context_window=context_window, api_key=api_key, host=host, port=port
            ),
            "scripted-anthropic",
        )

    @property
    def rejected(self) -> list[tuple[Any, str]]:
        """A snapshot of the rejected requests so far."""
        return list(self.server.rejected)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tests.fakes.scripted_anthropic``."""
    return run_cli(
        argv,
        doc=__doc__,
        make_server=lambda port, window: ScriptedAnthropic(context_window=window, port=port),
        load_script=load_script,
    )


if __name__ == "__main__":
    sys.exit(main())
