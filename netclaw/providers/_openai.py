"""OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, ...).

Streams ``POST {base_url}/chat/completions`` and parses the server-sent events
by hand: the servers differ in small ways (where reasoning arrives, whether
``[DONE]`` comes, errors inside the stream) and a small parser tolerates them
all. Transient failures are retried only while nothing has been streamed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from netclaw import jsontext
from netclaw.errors import ProviderProtocolError
from netclaw.messages import ChatMessage, MessageKind, ToolCall, images_of, model_text, new_id
from netclaw.providers._base import (
    Completion,
    Delta,
    ProviderRequest,
    ToolSchema,
    Usage,
)
from netclaw.providers._classify import classify_http_error
from netclaw.providers._http import (
    HttpStreamingProvider,
    StreamAssembly,
    WireCache,
    _int,
    _plain,
    plain_schema,
    to_json,
)
from netclaw.providers._http import _Progress as _Progress  # for code assembling answers by hand
from netclaw.providers._images import image_base64, missing_note
from netclaw.security.redact import KNOWN, Scrubber

log = logging.getLogger("netclaw.providers")


# --------------------------------------------------------------------------- wire format


def message_to_wire(msg: ChatMessage, *, vision: bool = False) -> dict[str, Any]:
    """One :class:`ChatMessage` as an OpenAI chat message.

    ``thinking`` is never sent: servers reject or re-bill it. Markers
    (breadcrumbs, summaries) go out as ordinary messages of their role. A user
    message's speaker, earlier thread and files are in its text (:func:`model_text`);
    with ``vision`` its images follow as ``image_url`` parts.
    """
    if msg.role == "assistant":
        out: dict[str, Any] = {"role": "assistant"}
        if msg.tool_calls:
            out["content"] = msg.content or None
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or "{}"},
                }
                for call in msg.tool_calls
            ]
        else:
            # Without tool_calls OpenAI requires content; null is rejected.
            out["content"] = msg.content
        return out
    if msg.role == "tool":
        # Tool messages carry text only here: their images follow in a user message
        # (tool_images_message) after the round's results.
        return {
            "role": "tool",
            "tool_call_id": msg.tool_call_id or "",
            "content": model_text(msg, vision=vision),
        }
    if msg.role != "user":
        return {"role": msg.role, "content": msg.content}
    text = model_text(msg, vision=vision)
    images = images_of(msg) if vision else ()
    if not images:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for image in images:
        data = image_base64(image)
        if data is None:
            parts.append({"type": "text", "text": missing_note(image)})
        else:
            url = f"data:{image.mime_type};base64,{data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def tool_images_message(results: Sequence[ChatMessage]) -> dict[str, Any]:
    """The images some tool results returned, as the user message that follows the round's
    results (chat completions take images in user messages only)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": "[the images returned by the tool calls above]"}]
    for msg in results:
        for image in images_of(msg):
            data = image_base64(image)
            if data is None:
                parts.append({"type": "text", "text": missing_note(image)})
            else:
                parts.append({"type": "text", "text": f"[{image.name} from {msg.name or 'a tool'}]"})
                parts.append(
                    {"type": "image_url", "image_url": {"url": f"data:{image.mime_type};base64,{data}"}}
                )
    return {"role": "user", "content": parts}


def _image_rounds(messages: Sequence[ChatMessage], start: int = 0) -> dict[int, list[ChatMessage]]:
    """Index of the last tool result of each run of results → the results of that run
    with images (where their images message goes, after it); from ``start`` on (a run of
    results never starts before a user message there)."""
    found: dict[int, list[ChatMessage]] = {}
    run: list[ChatMessage] = []
    for i in range(start, len(messages)):
        m = messages[i]
        if m.role != "tool":
            continue
        if m.files and images_of(m):
            run.append(m)
        last = i + 1 == len(messages) or messages[i + 1].role != "tool"
        if last and run:
            found[i] = run
            run = []
    return found


def wire_messages(messages: Sequence[ChatMessage], vision: bool) -> list[dict[str, Any]]:
    """Every message as it goes on the wire: a turn's tail inside its user message
    (:func:`wire_groups`), and after a run of tool results with images, those images."""
    rounds = _image_rounds(messages) if vision else {}
    out = []
    end = 0
    for group in wire_groups(messages):
        end += len(group)
        out.append(group_to_wire(group, vision=vision))
        if end - 1 in rounds:
            out.append(tool_images_message(rounds[end - 1]))
    return out


def with_note(message: dict[str, Any], note: ChatMessage) -> dict[str, Any]:
    """A user message with its turn's volatile tail in it (after what was said): one user
    message, so servers whose chat templates insist on alternating roles accept it."""
    content = message["content"]
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": note.content}]}
    return {**message, "content": f"{content}\n\n{note.content}" if content else note.content}


def wire_groups(messages: Sequence[ChatMessage]) -> list[tuple[ChatMessage, ...]]:
    """The messages as they go on the wire: each alone, except a turn's tail (a ``context``
    note) right after a user message, which travels in it (a second note — a restart's —
    too)."""
    groups: list[tuple[ChatMessage, ...]] = []
    for m in messages:
        last = groups[-1] if groups else None
        if m.kind is MessageKind.CONTEXT and last is not None and last[0].role == "user":
            groups[-1] = (*last, m)
        else:
            groups.append((m,))
    return groups


def group_to_wire(group: tuple[ChatMessage, ...], *, vision: bool = False) -> dict[str, Any]:
    wire = message_to_wire(group[0], vision=vision)
    for note in group[1:]:
        wire = with_note(wire, note)
    return wire


def tool_to_wire(tool: ToolSchema) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": plain_schema(tool.parameters),
        },
    }


def request_body(request: ProviderRequest, *, cache: bool = False) -> dict[str, Any]:
    """The chat-completions body; with ``cache`` and a request ``cache_key`` it carries the
    session's ``prompt_cache_key`` (the server keeps a session's prefixes together)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": wire_messages(request.messages, request.vision),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": request.max_output_tokens,
    }
    if cache and request.cache_key:
        body["prompt_cache_key"] = request.cache_key
    if request.tools:
        body["tools"] = [tool_to_wire(t) for t in request.tools]
    return body


def encode_request(
    request: ProviderRequest, wire: WireCache, *, cache: bool = False, scrubber: Scrubber | None = None
) -> bytes:
    """The JSON of :func:`request_body`, with every message and the tool set taken from
    ``wire`` (a message object never changes; one with images inline is encoded afresh,
    not kept) and joined once. A session's messages up to its newest turn are kept joined
    (:meth:`WireCache.prefix`): the next call that begins with the same objects (the
    cache-stable layout makes it the rule) walks only what came after them.

    With ``scrubber``, the body as sent: its known secrets replaced (``scrub_bytes``). A
    kept prefix found clean under the same secrets is not searched again, only the bytes
    around it, so the search too does not grow with the history."""
    vision = request.vision
    messages = request.messages
    cached = wire.message_json
    context = MessageKind.CONTEXT
    parts: list[bytes | memoryview] = []
    memo_key = ("prefix", request.cache_key, vision) if request.cache_key else None
    start = 0
    clean_prefix = False  # parts[0] is a kept prefix known to hold none of scrubber's secrets
    if memo_key is not None and (memo := wire.prefix(memo_key)) is not None:
        held, data, clean_under = memo
        n = len(held)
        # The same messages in the same places: start after them. A tuple comparison is a
        # C loop that takes the very same objects as equal without looking into them.
        if len(messages) > n and tuple(messages[:n]) == held:
            start = n
            parts.append(data)
            clean_prefix = scrubber is not None and clean_under is scrubber
    # Where the newest turn starts (its user message): the prefix kept for the next call.
    chat = MessageKind.CHAT
    boundary = next(
        (
            i
            for i in range(len(messages) - 1, start, -1)
            if messages[i].role == "user" and messages[i].kind is chat
        ),
        None,
    )
    boundary_part = 0
    # One pass over what is new, nothing made per message: a note (a turn's tail) replaces
    # the part of the user message before it by the two together (the groups of
    # wire_groups). A kept prefix ends before a user message, so no group crosses it.
    lead: ChatMessage | None = None
    notes: tuple[ChatMessage, ...] = ()
    rounds = _image_rounds(messages, start) if vision else {}
    for i in range(start, len(messages)):
        m = messages[i]
        if m.kind is context and lead is not None and lead.role == "user":
            notes = (*notes, m)
            group = (lead, *notes)
            if vision and lead.files and images_of(lead):
                parts[-1] = to_json(group_to_wire(group, vision=True))
            else:
                key = ("notes", *map(id, group), vision)
                parts[-1] = wire.part_json(key, partial(group_to_wire, group, vision=vision), holds=group)
            continue
        if i == boundary:
            boundary_part = len(parts)
        lead, notes = m, ()
        if vision and m.role == "user" and m.files and images_of(m):
            parts.append(to_json(message_to_wire(m, vision=True)))
        else:
            parts.append(cached(m, vision, partial(message_to_wire, m, vision=vision)))
        if i in rounds:  # a run of tool results with images: the images follow it
            parts.append(to_json(tool_images_message(rounds[i])))
    head: dict[str, Any] = {
        "model": request.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": request.max_output_tokens,
    }
    if cache and request.cache_key:
        head["prompt_cache_key"] = request.cache_key
    lead_in = to_json(head)[:-1] + b',"messages":['
    tail = [b"]"]
    if request.tools:
        tools = tuple(request.tools)
        key = ("tools", *((t.name, t.description, id(t.parameters)) for t in tools))
        tail += [b',"tools":', wire.part_json(key, lambda: [tool_to_wire(t) for t in tools], holds=tools)]
    tail.append(b"}")
    body = _joined(lead_in, parts, tail)
    # The prefix kept for the next call is a view into this body, not a copy of its bytes.
    kept: tuple[int, int] | None = None
    if memo_key is not None and boundary is not None:
        kept_end = len(lead_in) + sum(map(len, parts[:boundary_part])) + max(0, boundary_part - 1)
        kept = (len(lead_in), kept_end)
    clean: Scrubber | None = None  # the secrets the prefix kept from this body holds none of
    sent = body
    if scrubber is not None:
        known = (len(lead_in), len(lead_in) + len(parts[0])) if clean_prefix else None
        sent, clean = _scrubbed(body, scrubber, known, kept)
    if kept is not None:
        wire.keep_prefix(memo_key, tuple(messages[:boundary]), memoryview(body)[kept[0] : kept[1]], clean)
    return sent


def _joined(lead_in: bytes, parts: Sequence[bytes | memoryview], tail: Sequence[bytes]) -> bytes:
    """``lead_in``, the parts with commas between them, and ``tail``, in one copy (a session's
    body is mostly its kept prefix: hundreds of kB late in a long session)."""
    pieces: list[bytes | memoryview] = [lead_in]
    for part in parts:
        pieces += (part, b",")
    if parts:
        pieces.pop()
    pieces += tail
    return b"".join(pieces)


def _scrubbed(
    body: bytes, scrubber: Scrubber, known: tuple[int, int] | None, kept: tuple[int, int] | None
) -> tuple[bytes, Scrubber | None]:
    """``body`` with ``scrubber``'s secrets replaced, and the scrubber if the prefix kept
    from it (``kept``: where in ``body`` it lies) holds none of them (else None). ``known``:
    where in ``body`` a prefix already found clean under the same secrets lies; only around
    it is searched (a secret may begin or end in it)."""
    if known is not None:
        reach = scrubber.longest - 1
        start, end = known
        found = scrubber.occurs(body, 0, start + reach) or scrubber.occurs(body, end - reach)
    else:
        found = scrubber.occurs(body)
    if not found:
        return body, scrubber
    clean = scrubber if kept is not None and not scrubber.occurs(body, *kept) else None
    return scrubber.scrub_bytes(body), clean


def usage_from_wire(data: Mapping[str, Any]) -> Usage:
    # prompt_tokens already includes cached tokens on OpenAI-style APIs, which is
    # what context accounting wants (the whole prompt's size).
    details = data.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    if not cached:
        cached = _int(data.get("prompt_cache_hit_tokens"))  # DeepSeek
    return Usage(
        input_tokens=_int(data.get("prompt_tokens")),
        output_tokens=_int(data.get("completion_tokens")),
        cache_read_tokens=cached,
    )


# --------------------------------------------------------------------------- assembly


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly(StreamAssembly):
    """One attempt's answer as it arrives."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False

    def emit(self, kind: str, piece: Any) -> None:
        if not isinstance(piece, str) or not piece:
            return
        self.progress.streamed = True
        if kind == "text":
            self.text.append(piece)
            if self.on_delta is not None:
                self.on_delta(Delta("text", piece))
        else:
            self.thinking.append(piece)
            if self.on_delta is not None:
                self.on_delta(Delta("thinking", piece))

    def add_call_piece(self, position: int, piece: Mapping[str, Any]) -> None:
        index = piece.get("index")
        piece_id = piece.get("id") if isinstance(piece.get("id"), str) else None
        if not isinstance(index, int):
            # No index (some servers send whole calls): match by id, else by position.
            known = [i for i, c in self.calls.items() if piece_id and c.id == piece_id]
            if known:
                index = known[0]
            elif piece_id:
                index = len(self.calls)
            else:
                index = position
        call = self.calls.setdefault(index, _PartialCall())
        if piece_id and not call.id:
            call.id = piece_id
        fn = piece.get("function")
        if isinstance(fn, Mapping):
            name = fn.get("name")
            # Some servers repeat the full name in every piece; others split it.
            if isinstance(name, str) and name and name != call.name:
                call.name += name
            args = fn.get("arguments")
            if isinstance(args, str):
                call.arguments.append(args)
            elif isinstance(args, Mapping):  # already-parsed arguments
                call.arguments.append(json.dumps(_plain(args)))

    # A chunk is what json.loads made: its objects are dicts. Checked as dict, not as the
    # Mapping ABC, whose check took a third of the time each delta spent here.

    def add_choice(self, choice: Mapping[str, Any], *, whole: bool = False) -> None:
        delta = choice.get("message" if whole else "delta")
        if not isinstance(delta, dict):
            delta = {}
        # Each is looked at only when there: most deltas carry a few characters of text.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.emit("thinking", reasoning)
        content = delta.get("content")
        if content:
            self.emit("text", content)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, piece in enumerate(calls):
                if isinstance(piece, Mapping):
                    self.add_call_piece(position, piece)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish

    def add_chunk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            raise ProviderProtocolError(
                f"provider {self.provider!r}: stream chunk is not a JSON object: {str(chunk)[:200]}"
            )
        if chunk.get("error"):
            # Some servers report failures inside a 200 stream.
            raise classify_http_error(500, json.dumps(_plain(chunk)), {}, self.provider)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                # n=1: everything is choice 0; servers omitting the index mean it too.
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self.add_choice(choice)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from_wire(usage)

    def completion(self) -> Completion:
        calls = tuple(
            ToolCall(
                id=c.id or new_id("call"),
                name=c.name,
                arguments="".join(c.arguments).strip() or "{}",
            )
            for _, c in sorted(self.calls.items())
        )
        return Completion(
            text="".join(self.text),
            tool_calls=calls,
            thinking="".join(self.thinking),
            usage=self.usage,
            finish_reason=self.finish_reason,
        )


# --------------------------------------------------------------------------- SSE


def _decode_event(payload: bytes) -> list[Any]:
    """JSON chunks in one event; tolerates servers that pack one chunk per data line."""
    try:
        return [jsontext.loads(payload)]
    except ValueError:
        if b"\n" not in payload:
            raise
        return [json.loads(line) for line in payload.split(b"\n") if line.strip()]


# --------------------------------------------------------------------------- provider


class OpenAIProvider(HttpStreamingProvider[_Assembly]):
    """A :class:`~netclaw.providers.Provider` for OpenAI-compatible servers."""

    assembly_type = _Assembly
    MODEL_LIST_KEYS = ("data", "models")  # "models": Ollama-native

    @property
    def wire(self) -> WireCache:
        """Each message's and tool set's JSON, encoded once (made on first use)."""
        cache: WireCache | None = self.__dict__.get("_wire")
        if cache is None:
            cache = self.__dict__["_wire"] = WireCache()
        return cache

    def _endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _models_url(self) -> str:
        return f"{self.base_url}/models"

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream, application/json"}
        key = self.config.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _request_body(self, request: ProviderRequest) -> dict[str, Any]:
        return request_body(request, cache=self.config.prompt_cache == "auto")

    def _request_content(self, request: ProviderRequest) -> bytes:
        """:func:`request_body`, assembled from each part's cached JSON text: a turn encodes
        its new messages, not the whole transcript again."""
        return encode_request(request, self.wire, cache=self.config.prompt_cache == "auto")

    def _scrubbed_content(self, request: ProviderRequest) -> bytes:
        cache = self.config.prompt_cache == "auto"
        return encode_request(request, self.wire, cache=cache, scrubber=KNOWN.scrubber)

    async def _read_whole(self, response: httpx.Response, answer: _Assembly) -> None:
        data = await self._whole_body(response)
        if data.get("error"):
            raise classify_http_error(500, json.dumps(_plain(data)), {}, self.name)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise ProviderProtocolError(f"provider {self.name!r}: response has no choices")
        answer.add_choice(choices[0], whole=True)
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            answer.usage = usage_from_wire(usage)
        answer.done = True

    def _take_event(self, answer: _Assembly, event: str, payload: bytes) -> bool:
        if not payload.startswith(b"{") and payload.strip() == b"[DONE]":
            answer.done = True
            return True
        try:
            chunks = _decode_event(payload)
        except (ValueError, RecursionError) as exc:
            raise ProviderProtocolError(
                f"provider {self.name!r}: stream event is not JSON: {payload[:200].decode(errors='replace')}"
            ) from exc
        for chunk in chunks:
            answer.add_chunk(chunk)
        return False

    def _finished(self, answer: _Assembly) -> bool:
        # [DONE], or a finish_reason: what may still come is the usage chunk.
        return answer.done or answer.finish_reason is not None

    def _check_complete(self, answer: _Assembly) -> None:
        if not answer.done and answer.finish_reason is None:
            raise self._ended_early("the answer was complete")
