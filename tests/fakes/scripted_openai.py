"""A scripted OpenAI-compatible chat-completions server for tests and benchmarks.

A real aiohttp server on 127.0.0.1 speaking ``POST /v1/chat/completions`` (SSE when
``stream: true``, JSON otherwise) and ``GET /v1/models``. Each request consumes one scripted
step (a :class:`Reply` or an :class:`ErrorReply`) from a FIFO queue; marker routes are checked
before the queue, and a default responder (echo unless replaced) answers when it is empty.

Run standalone (used by end-to-end tests)::

    python -m tests.fakes.scripted_openai --port 0 [--script FILE.json] [--context-window N]

which prints ``LISTENING http://127.0.0.1:PORT/v1`` on one line and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import json
import sys
import time
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
    load_steps,
    pieces,
    reply_fields,
    request_messages,
    run_cli,
    said,
    without_speaker,
)

__all__ = [
    "ErrorReply",
    "Reply",
    "Responder",
    "ScriptedOpenAI",
    "ScriptedOpenAIThread",
    "Step",
    "ToolCallSpec",
    "estimate_prompt_tokens",
    "load_script",
    "overflow",
    "rate_limited",
    "server_error",
    "step_from_dict",
]

MODEL_ID = "scripted"


# --------------------------------------------------------------------------- script steps


@dataclass
class Reply:
    """One scripted successful completion."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    thinking: str = ""  # streamed as delta.reasoning_content before the text
    usage: tuple[int, int] | None = None  # (prompt, completion); None -> rough estimate
    delay_s: float = 0.0  # wait before the response headers
    chunk_delay_s: float = 0.0  # wait between SSE chunks
    chunk_size: int = 8  # characters per text / reasoning / tool-argument delta
    finish_reason: str | None = None  # default "tool_calls" if tool_calls else "stop"
    drop_after_chunks: int | None = None  # close the connection after N chunks, no [DONE]
    hang: bool = False  # accept the request, never answer (cancelled by stop())
    hold_open_s: float = 0.0  # after the answer, keep the body open this long before it ends
    omit_end: bool = False  # no [DONE] (the finish_reason chunk still comes)


@dataclass
class ErrorReply:
    """An HTTP error answer: ``{"error": {"message", "type", "param", "code"}}`` or raw ``body``."""

    status: int
    message: str = "scripted error"
    code: str | None = None
    type: str = "invalid_request_error"
    retry_after: float | None = None  # sets the Retry-After header
    body: str | None = None  # raw body overriding the JSON
    delay_s: float = 0.0  # wait before answering


Step: TypeAlias = Reply | ErrorReply
Responder: TypeAlias = Callable[[dict[str, Any]], Step | Awaitable[Step]]

DEFAULT_OVERFLOW_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
)


def overflow(message: str = DEFAULT_OVERFLOW_MESSAGE) -> ErrorReply:
    """A 400 context-length error, as OpenAI sends it."""
    return ErrorReply(
        status=400,
        message=message,
        code="context_length_exceeded",
        type="invalid_request_error",
    )


def rate_limited(retry_after: float = 1.0) -> ErrorReply:
    """A 429 rate-limit error with a Retry-After header."""
    return ErrorReply(
        status=429,
        message="Rate limit reached for requests. Please try again later.",
        code="rate_limit_exceeded",
        type="requests",
        retry_after=retry_after,
    )


def server_error(status: int = 503) -> ErrorReply:
    """A 5xx server error."""
    return ErrorReply(
        status=status,
        message="The server is overloaded or not ready yet.",
        code=None,
        type="server_error",
    )


def step_from_dict(data: dict[str, Any]) -> Step:
    """Build a step from its JSON script form (see the module docstring of the CLI)."""
    if data.get("overflow"):
        return overflow(str(data.get("message", DEFAULT_OVERFLOW_MESSAGE)))
    if "error" in data:
        return ErrorReply(**error_fields(data), code=data.get("code"))
    return Reply(**reply_fields(data), finish_reason=data.get("finish_reason"))


def load_script(path: str | Path) -> list[Step]:
    """Read a JSON list of step objects from ``path``."""
    return load_steps(path, step_from_dict)


# --------------------------------------------------------------------------- request helpers


def _content_text(content: Any) -> str:
    """Plain text of a message ``content`` (a string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def estimate_prompt_tokens(request: dict[str, Any]) -> int:
    """Rough prompt size: chars of all message contents and tool-call arguments, // 4."""
    chars = 0
    for msg in request_messages(request):
        chars += len(_content_text(msg.get("content")))
        for tc in msg.get("tool_calls") or []:
            if isinstance(tc, dict):
                fn = tc.get("function")
                if isinstance(fn, dict):
                    chars += len(str(fn.get("arguments") or ""))
    return chars // 4


def _last_user_text(request: dict[str, Any]) -> str:
    for msg in reversed(request_messages(request)):
        text = said(_content_text(msg.get("content")))
        if msg.get("role") == "user" and text:
            return text
    return ""


def _error_json(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _bad_request(message: str) -> web.Response:
    return web.json_response(_error_json(message, "invalid_request_error", None), status=400)


# --------------------------------------------------------------------------- the server


class ScriptedOpenAI(ScriptedServer[Reply, ErrorReply]):
    """The scripted server; use ``async with ScriptedOpenAI() as fake: fake.base_url``.

    :attr:`base_url` is ``http://127.0.0.1:PORT/v1``.
    """

    reply_type = Reply
    error_type = ErrorReply
    POST_PATH = "/v1/chat/completions"
    URL_PATH = "/v1"
    CALL_ID_FORMAT = "call_{}"

    # ----- protocol hooks

    async def _handle_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            return _bad_request(
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly.)"
            )
        if not isinstance(body, dict):
            return _bad_request("The request body must be a JSON object.")
        if not isinstance(body.get("model"), str):
            return _bad_request("you must provide a model parameter")
        if not isinstance(body.get("messages"), list):
            return _bad_request("'messages' is a required property")
        return await self._respond(request, body)

    def _estimate_prompt_tokens(self, body: dict[str, Any]) -> int:
        return estimate_prompt_tokens(body)

    def _overflow(self, prompt_tokens: int) -> ErrorReply:
        return overflow(
            f"This model's maximum context length is {self.context_window} tokens. "
            f"However, your messages resulted in {prompt_tokens} tokens."
        )

    def _texts(self, body: dict[str, Any]) -> list[str]:
        return [_content_text(m.get("content")) for m in request_messages(body)]

    def _echo(self, body: dict[str, Any]) -> Reply:
        return Reply(text=f"echo: {without_speaker(_last_user_text(body))}")

    def _responder_failed(self, exc: Exception) -> web.Response:
        return web.json_response(
            _error_json(f"scripted responder raised {exc!r}", "server_error", None),
            status=500,
        )

    def _error_body(self, step: ErrorReply) -> dict[str, Any]:
        return _error_json(step.message, step.type, step.code)

    # ----- answers

    def _cached_tokens(self, body: dict[str, Any]) -> int:
        """What an OpenAI-style automatic prefix cache would have read of this prompt: the
        longest prefix (tool set, then whole messages) of an earlier request under the same
        ``prompt_cache_key``; every prefix of this one is held from now on."""
        parts: list[tuple[Any, int]] = [(body.get("tools") or [], 0)]
        for msg in request_messages(body):
            chars = len(_content_text(msg.get("content")))
            chars += sum(
                len(str((tc.get("function") or {}).get("arguments") or ""))
                for tc in msg.get("tool_calls") or []
            )
            parts.append((msg, chars // 4))
        hashes, tokens = PrefixCache.prefixes(str(body.get("prompt_cache_key") or ""), parts)
        cache = self.prompt_cache
        cached = cache.read(hashes, tokens, range(len(hashes) - 1))  # a whole prompt is never all cache
        cache.hold(hashes, range(len(hashes)))
        return cached

    def _usage(self, body: dict[str, Any], step: Reply, args: list[str]) -> dict[str, Any]:
        cached = self._cached_tokens(body)
        if step.usage is not None:
            prompt, completion = step.usage
            cached = 0  # a scripted count says nothing about the cache
        else:
            prompt = estimate_prompt_tokens(body)
            out_chars = len(step.text) + len(step.thinking) + sum(len(a) for a in args)
            completion = out_chars // 4 + 1
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt)}
        return usage

    @staticmethod
    def _finish_reason(step: Reply) -> str:
        if step.finish_reason is not None:
            return step.finish_reason
        return "tool_calls" if step.tool_calls else "stop"

    def _send_json(self, request: web.Request, body: dict[str, Any], step: Reply) -> web.Response:
        calls = self._resolve_calls(step)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": step.text if (step.text or not calls) else None,
        }
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ]
        if step.thinking:
            message["reasoning_content"] = step.thinking
        payload = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason(step)}],
            "usage": self._usage(body, step, [a for _, _, a in calls]),
        }
        if step.drop_after_chunks is not None:
            self._drop(request)  # no response at all; aiohttp sees a reset and stays quiet
        return web.json_response(payload)

    async def _send_stream(
        self, request: web.Request, body: dict[str, Any], step: Reply
    ) -> web.StreamResponse:
        calls = self._resolve_calls(step)
        stream_options = body.get("stream_options")
        include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
        cid = f"chatcmpl-{next(self._ids)}"
        created = int(time.time())
        model = body["model"]

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if include_usage:
                out["usage"] = None
            return out

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"reasoning_content": p}) for p in pieces(step.thinking, step.chunk_size)]
        events += [chunk({"content": p}) for p in pieces(step.text, step.chunk_size)]
        for index, (call_id, name, args) in enumerate(calls):
            head = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                for p in pieces(args, step.chunk_size)
            ]
        events.append(chunk({}, self._finish_reason(step)))
        if include_usage:
            events.append(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": self._usage(body, step, [a for _, _, a in calls]),
                }
            )

        # Dropped after N chunks: no [DONE], no terminating chunk, an incomplete stream.
        return await self._stream(
            request,
            step,
            {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            [f"data: {json.dumps(event)}\n\n".encode() for event in events],
            trailer=b"data: [DONE]\n\n",
        )


# --------------------------------------------------------------------------- threaded variant


class ScriptedOpenAIThread(ScriptedServerThread[Reply, ErrorReply]):
    """A :class:`ScriptedOpenAI` on its own event loop in a daemon thread, for sync code.

    Responders run on the server thread.
    """

    server: ScriptedOpenAI

    def __init__(
        self,
        *,
        default: Responder | None = None,
        context_window: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(
            ScriptedOpenAI(default=default, context_window=context_window, host=host, port=port),
            "scripted-openai",
        )


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tests.fakes.scripted_openai``."""
    return run_cli(
        argv,
        doc=__doc__,
        make_server=lambda port, window: ScriptedOpenAI(context_window=window, port=port),
        load_script=load_script,
    )


if __name__ == "__main__":
    sys.exit(main())
