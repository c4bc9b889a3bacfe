"""Anthropic Messages API (``POST {base_url}/v1/messages``), streamed over SSE.

The Messages API differs from OpenAI's chat completions in ways the wire
conversion must respect: the system prompt is a top-level parameter, roles must
alternate user/assistant starting with user, tool results are ``tool_result``
blocks inside the user message right after the assistant's ``tool_use`` turn,
and thinking blocks carry signatures that must be sent back unchanged.
:func:`to_anthropic_messages` turns netclaw's history into that shape without
losing any content. Transient failures are retried only while nothing has been
streamed, exactly as in the OpenAI-compatible provider.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from netclaw import jsontext
from netclaw.config import ProviderConfig
from netclaw.errors import ProviderError, ProviderProtocolError
from netclaw.messages import Attachment, ChatMessage, ToolCall, images_of, model_text, new_id
from netclaw.providers._base import (
    Completion,
    Delta,
    ProviderRequest,
    ToolSchema,
    Usage,
)
from netclaw.providers._classify import classify_http_error, looks_like_overflow
from netclaw.providers._http import (
    HttpStreamingProvider,
    StreamAssembly,
    _int,
    _plain,
    plain_schema,
)
from netclaw.providers._images import image_base64, missing_note

log = logging.getLogger("netclaw.providers")

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"

#: Key in :attr:`Completion.extra` / :attr:`ChatMessage.extra` holding the raw
#: thinking blocks (with signatures) that must go back to the API unchanged.
THINKING_EXTRA_KEY = "anthropic_thinking"

#: User text placed before an assistant message that no user message precedes.
CONTINUES_PLACEHOLDER = "[conversation continues]"
#: Result sent for a tool call whose result is missing from the history.
MISSING_RESULT = "[no result was recorded for this tool call]"

_TOOL_ID_OK = re.compile(r"[A-Za-z0-9_-]+")
_TOOL_ID_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")


# --------------------------------------------------------------------------- wire format


def _has_text(text: str) -> bool:
    # The API rejects empty and whitespace-only text blocks.
    return bool(text.strip())


def wire_tool_id(call_id: str | None) -> str:
    """A tool call id as the API accepts it (``^[A-Za-z0-9_-]+$``).

    Ids made by other providers may contain other characters; both the
    ``tool_use`` and its ``tool_result`` go through this, so they still match.
    """
    if call_id and _TOOL_ID_OK.fullmatch(call_id):
        return call_id
    return _TOOL_ID_BAD_CHARS.sub("_", call_id or "") or "toolu_unknown"


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object of a ``tool_use`` block.

    Arguments that are not a JSON object (the model produced broken JSON) are
    sent as ``{"_raw": arguments}`` so nothing is lost and the request stays valid.
    """
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    if isinstance(value, dict):
        return value
    return {"_raw": arguments}


def thinking_blocks(extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The signed thinking (and redacted thinking) blocks stored in a message's ``extra``."""
    raw = extra.get(THINKING_EXTRA_KEY)
    if not isinstance(raw, list | tuple):
        return []
    out: list[dict[str, Any]] = []
    for block in raw:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "thinking":
            signature = block.get("signature")
            if isinstance(block.get("thinking"), str) and isinstance(signature, str) and signature:
                out.append(_plain(block))
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            out.append(_plain(block))
    return out


def _is_thinking(block: Mapping[str, Any]) -> bool:
    return block.get("type") in ("thinking", "redacted_thinking")


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    blocks: list[dict[str, Any]]


def _assistant_blocks(msg: ChatMessage) -> list[dict[str, Any]]:
    if not _has_text(msg.content) and not msg.tool_calls:
        # Nothing to send. Thinking alone would make a contentless turn, and the
        # API ignores thinking from earlier turns anyway.
        return []
    blocks = thinking_blocks(msg.extra)
    if _has_text(msg.content):
        blocks.append({"type": "text", "text": msg.content})
    for call in msg.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": wire_tool_id(call.id),
                "name": call.name,
                "input": tool_input(call.arguments),
            }
        )
    return blocks


def _image_block(image: Attachment) -> dict[str, Any]:
    data = image_base64(image)
    if data is None:
        return {"type": "text", "text": missing_note(image)}
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": data}}


def _orphan_result_text(msg: ChatMessage) -> str:
    status = " (error)" if msg.is_error else ""
    return f"[result of tool call {msg.name or '?'} ({msg.tool_call_id or '?'}){status}]\n{msg.content}"


def to_anthropic_messages(
    messages: Sequence[ChatMessage], *, vision: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API from netclaw's history.

    * Every system-role message (the prompt, breadcrumbs, summaries placed as
      system) goes to ``system``, joined by blank lines in their order: the API
      has no system role inside ``messages``.
    * Consecutive same-role messages are merged by concatenating their content
      blocks (the API requires strict user/assistant alternation).
    * Tool results become ``tool_result`` blocks in the one user message right
      after the assistant message whose ``tool_use`` they answer, ahead of any
      text there. A call with no recorded result gets an error result (the API
      rejects unanswered ``tool_use``); a result with no matching call in the
      preceding assistant message is kept as text.
    * An assistant message first in line gets a user placeholder before it.
    * Empty or whitespace-only texts are left out (the API rejects them).
    * A user message's speaker, earlier thread and files are in its text
      (:func:`model_text`); with ``vision`` its images follow as ``image`` blocks.
    """
    conversion = _Conversion(vision)
    for msg in messages:
        conversion.add(msg)
    return conversion.finish()


class _Conversion:
    """netclaw's history → the Messages API, one message at a time (see above)."""

    def __init__(self, vision: bool = False) -> None:
        self.vision = vision
        self.system_parts: list[str] = []
        self.turns: list[_Turn] = []
        self.pending: dict[str, None] = {}  # unanswered tool_use ids of the last assistant message

    def add(self, msg: ChatMessage) -> None:
        if msg.role == "system":
            if _has_text(msg.content):
                self.system_parts.append(msg.content)
        elif msg.role == "user":
            text = model_text(msg, vision=self.vision)
            if _has_text(text):
                self._user_turn().blocks.append({"type": "text", "text": text})
            if self.vision:
                self._user_turn().blocks.extend(_image_block(image) for image in images_of(msg))
        elif msg.role == "tool":
            self._add_tool(msg)
        else:
            self._add_assistant(msg)

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        self._close_pending()
        turns = self.turns
        if not turns or turns[0].role != "user":
            turns.insert(0, _Turn("user", [{"type": "text", "text": CONTINUES_PLACEHOLDER}]))
        wire = [{"role": t.role, "content": t.blocks} for t in turns]
        return "\n\n".join(self.system_parts), wire

    def _user_turn(self) -> _Turn:
        if self.turns and self.turns[-1].role == "user":
            return self.turns[-1]
        turn = _Turn("user", [])
        self.turns.append(turn)
        return turn

    def _add_tool(self, msg: ChatMessage) -> None:
        call_id = wire_tool_id(msg.tool_call_id)
        if msg.tool_call_id is None or call_id not in self.pending:
            self._user_turn().blocks.append({"type": "text", "text": _orphan_result_text(msg)})
            return
        del self.pending[call_id]
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
        text = model_text(msg, vision=self.vision)
        images = images_of(msg) if self.vision else ()
        if images:  # a tool_result may hold image blocks beside its text
            result["content"] = [{"type": "text", "text": text}, *(_image_block(i) for i in images)]
        elif text:
            result["content"] = text
        if msg.is_error:
            result["is_error"] = True
        self._add_result(result)

    def _add_assistant(self, msg: ChatMessage) -> None:
        self._close_pending()
        blocks = _assistant_blocks(msg)
        if not blocks:
            return
        if self.turns and self.turns[-1].role == "assistant":
            # Merge; thinking blocks stay in front of everything else.
            prev = self.turns[-1].blocks
            lead = 0
            while lead < len(prev) and _is_thinking(prev[lead]):
                lead += 1
            prev[lead:lead] = [b for b in blocks if _is_thinking(b)]
            prev.extend(b for b in blocks if not _is_thinking(b))
        else:
            self.turns.append(_Turn("assistant", blocks))
        for block in blocks:
            if block["type"] == "tool_use":
                self.pending[block["id"]] = None

    def _add_result(self, block: dict[str, Any]) -> None:
        # While calls are pending, the last turn is their assistant message or the
        # user message right after it: results go there, before any text.
        turn = self._user_turn()
        pos = 0
        while pos < len(turn.blocks) and turn.blocks[pos].get("type") == "tool_result":
            pos += 1
        turn.blocks.insert(pos, block)

    def _close_pending(self) -> None:
        for call_id in self.pending:
            self._add_result(
                {"type": "tool_result", "tool_use_id": call_id, "content": MISSING_RESULT, "is_error": True}
            )
        self.pending.clear()


def tool_to_wire(tool: ToolSchema) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": plain_schema(tool.parameters),
    }


# The API allows at most this many cache_control breakpoints in one request.
MAX_BREAKPOINTS = 4
EXTENDED_TTL_BETA = "extended-cache-ttl-2025-04-11"  # for a 1 h cache_control ttl
_UNMARKABLE = ("thinking", "redacted_thinking")  # blocks that cannot carry cache_control


def request_body(request: ProviderRequest, *, cache_ttl: str | None = None) -> dict[str, Any]:
    """The Messages API body; with ``cache_ttl`` (``5m`` or ``1h``) it marks the prompt
    cache's breakpoints (:func:`mark_breakpoints`)."""
    system, messages = to_anthropic_messages(request.messages, vision=request.vision)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_output_tokens,
        "stream": True,
    }
    if system:
        body["system"] = [{"type": "text", "text": system}] if cache_ttl else system
    body["messages"] = messages
    if request.tools:
        body["tools"] = [tool_to_wire(t) for t in request.tools]
    if cache_ttl:
        mark_breakpoints(body, cache_ttl)
    return body


def mark_breakpoints(body: dict[str, Any], ttl: str) -> None:
    """Put ``cache_control`` where the cached prefix of the next request ends (the API
    caches tools → system → messages, each breakpoint closing a prefix):

    1. after tools + system — they change only when the tool set or the config does;
    2. on the message before the newest one — where the previous request of the session
       ended (the last tool round, or the previous turn), so it reads that prefix even when
       the newest message has many blocks;
    3. on the newest message — what the next request will read.

    Three of the four breakpoints the API allows, all with one TTL (a longer TTL must never
    follow a shorter one)."""
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl != "5m":
        control["ttl"] = ttl
    marks: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list) and system:
        marks.append(system[-1])
    elif body.get("tools"):
        marks.append(body["tools"][-1])
    messages = body["messages"]
    for message in (messages[-3] if len(messages) >= 3 else None, messages[-1] if messages else None):
        block = _last_markable(message)
        if block is not None and all(block is not m for m in marks):
            marks.append(block)
    for block in marks[:MAX_BREAKPOINTS]:
        block["cache_control"] = dict(control)


def _last_markable(message: dict[str, Any] | None) -> dict[str, Any] | None:
    if message is None:
        return None
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return None
    for block in reversed(blocks):
        if block.get("type") not in _UNMARKABLE and (block.get("type") != "text" or _has_text(block["text"])):
            found: dict[str, Any] = block
            return found
    return None


# --------------------------------------------------------------------------- assembly


@dataclass
class _Block:
    type: str
    parts: list[str] = field(default_factory=list)  # text, thinking or partial JSON
    signature: str = ""
    id: str = ""
    name: str = ""
    start_input: Any = None  # tool_use input given whole in content_block_start
    raw: dict[str, Any] = field(default_factory=dict)  # redacted_thinking as received


_DELTA_BLOCK_TYPES = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
    "input_json_delta": "tool_use",
}

# In-stream error types, as the HTTP status the same error has outside a stream.
_STREAM_ERROR_STATUS = {"rate_limit_error": 429, "overloaded_error": 529}


@dataclass
class _Assembly(StreamAssembly):
    """One attempt's answer as it arrives."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    saw_usage: bool = False
    stop_reason: str | None = None
    done: bool = False

    def emit(self, kind: Literal["text", "thinking"], piece: Any, block: _Block) -> None:
        if not isinstance(piece, str) or not piece:
            return
        block.parts.append(piece)
        self.progress.streamed = True
        if self.on_delta is not None:
            self.on_delta(Delta(kind, piece))

    def add_usage(self, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            return
        self.saw_usage = True
        # message_delta repeats these (cumulatively) on newer API versions; only
        # take a field that is present, so a later event cannot zero it.
        if "input_tokens" in usage:
            self.input_tokens = _int(usage.get("input_tokens"))
        if "output_tokens" in usage:
            self.output_tokens = _int(usage.get("output_tokens"))
        if "cache_read_input_tokens" in usage:
            self.cache_read = _int(usage.get("cache_read_input_tokens"))
        if "cache_creation_input_tokens" in usage:
            self.cache_write = _int(usage.get("cache_creation_input_tokens"))

    def start_block(self, index: int, content: Mapping[str, Any]) -> None:
        kind = str(content.get("type") or "text")
        block = _Block(kind)
        self.blocks[index] = block
        if kind == "text":
            self.emit("text", content.get("text"), block)
        elif kind == "thinking":
            self.emit("thinking", content.get("thinking"), block)
            signature = content.get("signature")
            if isinstance(signature, str):
                block.signature = signature
        elif kind == "tool_use":
            block.id = str(content.get("id") or "")
            block.name = str(content.get("name") or "")
            block.start_input = content.get("input")
        elif kind == "redacted_thinking":
            block.raw = _plain(content)

    def add_delta(self, index: int, delta: Mapping[str, Any]) -> None:
        kind = delta.get("type")
        block = self.blocks.get(index)
        if block is None:  # no content_block_start: infer the block from the delta
            block = _Block(_DELTA_BLOCK_TYPES.get(str(kind), "text"))
            self.blocks[index] = block
        if kind == "text_delta":
            self.emit("text", delta.get("text"), block)
        elif kind == "thinking_delta":
            self.emit("thinking", delta.get("thinking"), block)
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str):
                block.signature += signature
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            if isinstance(partial, str):
                block.parts.append(partial)
        # Other deltas (citations, ...) carry nothing netclaw keeps.

    def stream_error(self, data: Mapping[str, Any]) -> ProviderError:
        err = data.get("error")
        err_type = str(err.get("type") or "") if isinstance(err, Mapping) else ""
        message = str(err.get("message") or "") if isinstance(err, Mapping) else ""
        overflow = looks_like_overflow(message, (err_type,))
        status = 400 if overflow else _STREAM_ERROR_STATUS.get(err_type, 500)
        return classify_http_error(status, json.dumps(_plain(data)), {}, self.provider)

    def add_event(self, event: str, data: Any) -> None:
        if not isinstance(data, Mapping):
            raise ProviderProtocolError(
                f"provider {self.provider!r}: stream event {event!r} is not a JSON object: {str(data)[:200]}"
            )
        kind = data.get("type") if isinstance(data.get("type"), str) else event
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, Mapping):
                self.add_usage(message.get("usage"))
        elif kind == "content_block_start":
            content = data.get("content_block")
            if isinstance(content, Mapping):
                self.start_block(_int(data.get("index")), content)
        elif kind == "content_block_delta":
            delta = data.get("delta")
            if isinstance(delta, Mapping):
                self.add_delta(_int(data.get("index")), delta)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, Mapping):
                stop = delta.get("stop_reason")
                if isinstance(stop, str) and stop:
                    self.stop_reason = stop
            self.add_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self.stream_error(data)
        # ping, content_block_stop and unknown events: nothing to do.

    def add_message(self, message: Mapping[str, Any]) -> None:
        """A whole (non-streamed) Message object."""
        self.add_usage(message.get("usage"))
        content = message.get("content")
        if isinstance(content, list):
            for index, block in enumerate(content):
                if isinstance(block, Mapping):
                    self.start_block(index, block)
        stop = message.get("stop_reason")
        if isinstance(stop, str) and stop:
            self.stop_reason = stop
        self.done = True

    def _arguments(self, block: _Block) -> str:
        joined = "".join(block.parts).strip()
        if joined:
            return joined
        if isinstance(block.start_input, Mapping) and block.start_input:
            return json.dumps(_plain(block.start_input))
        return "{}"

    def completion(self) -> Completion:
        ordered = [b for _, b in sorted(self.blocks.items())]
        calls = tuple(
            ToolCall(id=b.id or new_id("toolu"), name=b.name, arguments=self._arguments(b))
            for b in ordered
            if b.type == "tool_use"
        )
        signed: list[dict[str, Any]] = []
        for b in ordered:
            if b.type == "thinking" and b.signature:
                signed.append({"type": "thinking", "thinking": "".join(b.parts), "signature": b.signature})
            elif b.type == "redacted_thinking" and b.raw:
                signed.append(b.raw)
        usage = None
        if self.saw_usage:
            usage = Usage(
                # The whole prompt, cached parts included, as OpenAI's prompt_tokens.
                input_tokens=self.input_tokens + self.cache_read + self.cache_write,
                output_tokens=self.output_tokens,
                cache_read_tokens=self.cache_read,
                cache_write_tokens=self.cache_write,
            )
        return Completion(
            text="".join("".join(b.parts) for b in ordered if b.type == "text"),
            tool_calls=calls,
            thinking="".join("".join(b.parts) for b in ordered if b.type == "thinking"),
            usage=usage,
            finish_reason=self.stop_reason,
            extra={THINKING_EXTRA_KEY: signed} if signed else {},
        )


# --------------------------------------------------------------------------- provider


class AnthropicProvider(HttpStreamingProvider[_Assembly]):
    """A :class:`~netclaw.providers.Provider` for the Anthropic Messages API."""

    assembly_type = _Assembly
    MODELS_LABEL = "/v1/models"

    def _configured_base_url(self, config: ProviderConfig) -> str:
        # The config's built-in base_url is the local OpenAI-compatible default;
        # an Anthropic provider without its own base_url means Anthropic's API.
        return config.base_url if "base_url" in config.model_fields_set else DEFAULT_BASE_URL

    @property
    def api_url(self) -> str:
        """The API root: :attr:`base_url` ending in ``/v1``."""
        return self.base_url if self.base_url.endswith("/v1") else f"{self.base_url}/v1"

    def _endpoint(self) -> str:
        return f"{self.api_url}/messages"

    def _models_url(self) -> str:
        return f"{self.api_url}/models"

    def _headers(self) -> dict[str, str]:
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream, application/json",
        }
        key = self.config.api_key()
        if key:
            headers["x-api-key"] = key
        if self._cache_ttl() == "1h":
            headers["anthropic-beta"] = EXTENDED_TTL_BETA
        return headers

    def _request_body(self, request: ProviderRequest) -> dict[str, Any]:
        return request_body(request, cache_ttl=self._cache_ttl())

    def _cache_ttl(self) -> str | None:
        return self.config.cache_ttl if self.config.prompt_cache == "auto" else None

    async def _read_whole(self, response: httpx.Response, answer: _Assembly) -> None:
        """A proxy that ignored ``stream: true`` and sent one Message object."""
        data = await self._whole_body(response)
        if data.get("type") == "error" or data.get("error"):
            raise answer.stream_error(data)
        if not isinstance(data.get("content"), list):
            raise ProviderProtocolError(f"provider {self.name!r}: response has no content")
        answer.add_message(data)

    def _take_event(self, answer: _Assembly, event: str, payload: bytes) -> bool:
        try:
            data = jsontext.loads(payload)
        except (ValueError, RecursionError) as exc:
            shown = payload[:200].decode(errors="replace")
            raise ProviderProtocolError(
                f"provider {self.name!r}: stream event {event or '?'!r} is not JSON: {shown}"
            ) from exc
        answer.add_event(event, data)
        return answer.done

    def _finished(self, answer: _Assembly) -> bool:
        return bool(answer.done)

    def _check_complete(self, answer: _Assembly) -> None:
        if not answer.done:
            raise self._ended_early("message_stop")
