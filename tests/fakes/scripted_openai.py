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

import argparse
import asyncio
import collections
import contextlib
import inspect
import itertools
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

from aiohttp import web

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

log = logging.getLogger(__name__)

MODEL_ID = "scripted"


# --------------------------------------------------------------------------- script steps


@dataclass
class ToolCallSpec:
    """One tool call in a scripted reply; dict ``arguments`` are JSON-encoded."""

    name: str
    arguments: str | dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # auto "call_<n>" (unique per server) when None

    def arguments_json(self) -> str:
        """The arguments as the JSON string sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


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
        retry = data.get("retry_after")
        return ErrorReply(
            status=int(data["error"]),
            message=str(data.get("message", "scripted error")),
            code=data.get("code"),
            type=str(data.get("type", "invalid_request_error")),
            retry_after=None if retry is None else float(retry),
            body=data.get("body"),
            delay_s=float(data.get("delay_s", 0.0)),
        )
    usage = data.get("usage")
    drop = data.get("drop_after_chunks")
    return Reply(
        text=str(data.get("text", "")),
        tool_calls=[
            ToolCallSpec(name=tc["name"], arguments=tc.get("arguments", {}), id=tc.get("id"))
            for tc in data.get("tool_calls", [])
        ],
        thinking=str(data.get("thinking", "")),
        usage=None if usage is None else (int(usage[0]), int(usage[1])),
        delay_s=float(data.get("delay_s", 0.0)),
        chunk_delay_s=float(data.get("chunk_delay_s", 0.0)),
        chunk_size=int(data.get("chunk_size", 8)),
        finish_reason=data.get("finish_reason"),
        drop_after_chunks=None if drop is None else int(drop),
        hang=bool(data.get("hang", False)),
    )


def load_script(path: str | Path) -> list[Step]:
    """Read a JSON list of step objects from ``path``."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: a script must be a JSON list of steps")
    return [step_from_dict(item) for item in raw]


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


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = request.get("messages")
    if not isinstance(msgs, list):
        return []
    return [m for m in msgs if isinstance(m, dict)]


def estimate_prompt_tokens(request: dict[str, Any]) -> int:
    """Rough prompt size: chars of all message contents and tool-call arguments, // 4."""
    chars = 0
    for msg in _messages(request):
        chars += len(_content_text(msg.get("content")))
        for tc in msg.get("tool_calls") or []:
            if isinstance(tc, dict):
                fn = tc.get("function")
                if isinstance(fn, dict):
                    chars += len(str(fn.get("arguments") or ""))
    return chars // 4


def _last_user_text(request: dict[str, Any]) -> str:
    for msg in reversed(_messages(request)):
        if msg.get("role") == "user":
            return _content_text(msg.get("content"))
    return ""


def _echo(request: dict[str, Any]) -> Step:
    return Reply(text=f"echo: {_last_user_text(request)}")


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _error_json(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _bad_request(message: str) -> web.Response:
    return web.json_response(_error_json(message, "invalid_request_error", None), status=400)


# --------------------------------------------------------------------------- the server


class ScriptedOpenAI:
    """The scripted server; use ``async with ScriptedOpenAI() as fake: fake.base_url``."""

    def __init__(
        self,
        *,
        default: Responder | None = None,
        context_window: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.context_window = context_window
        self.host = host
        self.requests: list[dict[str, Any]] = []  # every valid request body, in arrival order
        self.errors: list[BaseException] = []  # exceptions raised by responders
        self._port = port
        self._default = default
        self._queue: collections.deque[Step] = collections.deque()
        self._routes: list[tuple[str, Responder]] = []
        self._lock = threading.Lock()  # guards queue/routes/default (ScriptedOpenAIThread)
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    # ----- scripting

    def enqueue(self, *steps: Step) -> None:
        """Append steps to the FIFO queue; each request consumes one."""
        with self._lock:
            self._queue.extend(steps)

    def set_responder(self, fn: Responder | None) -> None:
        """Responder used when the queue is empty (None restores the echo default)."""
        with self._lock:
            self._default = fn

    def route(self, marker: str, fn: Responder) -> None:
        """Send requests with ``marker`` in any message content to ``fn``, before the queue."""
        with self._lock:
            self._routes.append((marker, fn))

    def pending(self) -> int:
        """Steps left in the queue."""
        with self._lock:
            return len(self._queue)

    # ----- lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``; valid after :meth:`start`."""
        if self._base_url is None:
            raise RuntimeError("ScriptedOpenAI is not started")
        return self._base_url

    @property
    def port(self) -> int:
        """The bound port; valid after :meth:`start`."""
        self.base_url  # noqa: B018  (raises when not started)
        return self._port

    async def start(self) -> str:
        """Bind and serve; returns :attr:`base_url`."""
        if self._runner is not None:
            return self.base_url
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_get("/v1/models", self._handle_models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        self._base_url = f"http://{self.host}:{self._port}/v1"
        return self._base_url

    async def stop(self) -> None:
        """Stop serving; cancels in-flight (hanging, delayed, streaming) requests."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        await runner.cleanup()

    async def __aenter__(self) -> ScriptedOpenAI:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ----- request handling

    async def _handle_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            return await self._chat(request)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
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

        self.requests.append(body)
        try:
            step = await self._pick_step(body)
        except Exception as exc:
            log.exception("scripted responder failed")
            self.errors.append(exc)
            return web.json_response(
                _error_json(f"scripted responder raised {exc!r}", "server_error", None),
                status=500,
            )

        if isinstance(step, ErrorReply):
            return await self._send_error(step)
        if step.hang:
            await asyncio.get_running_loop().create_future()  # until cancelled by stop()
        if step.delay_s > 0:
            await asyncio.sleep(step.delay_s)
        if body.get("stream"):
            return await self._send_stream(request, body, step)
        return self._send_json(request, body, step)

    async def _pick_step(self, body: dict[str, Any]) -> Step:
        if self.context_window is not None and estimate_prompt_tokens(body) > self.context_window:
            return overflow(
                f"This model's maximum context length is {self.context_window} tokens. "
                f"However, your messages resulted in {estimate_prompt_tokens(body)} tokens."
            )
        texts = [_content_text(m.get("content")) for m in _messages(body)]
        fn: Responder | None = None
        with self._lock:
            for marker, route_fn in self._routes:
                if any(marker in t for t in texts):
                    fn = route_fn
                    break
            if fn is None:
                if self._queue:
                    return self._queue.popleft()
                fn = self._default or _echo
        result = fn(body)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, Reply | ErrorReply):
            raise TypeError(f"responder returned {type(result).__name__}, not a Reply/ErrorReply")
        return result

    async def _send_error(self, step: ErrorReply) -> web.Response:
        if step.delay_s > 0:
            await asyncio.sleep(step.delay_s)
        headers: dict[str, str] = {}
        if step.retry_after is not None:
            ra = step.retry_after
            headers["Retry-After"] = str(int(ra)) if float(ra).is_integer() else str(ra)
        if step.body is not None:
            return web.Response(
                status=step.status, text=step.body, content_type="text/plain", headers=headers
            )
        return web.json_response(
            _error_json(step.message, step.type, step.code), status=step.status, headers=headers
        )

    def _usage(self, body: dict[str, Any], step: Reply, args: list[str]) -> dict[str, int]:
        if step.usage is not None:
            prompt, completion = step.usage
        else:
            prompt = estimate_prompt_tokens(body)
            out_chars = len(step.text) + len(step.thinking) + sum(len(a) for a in args)
            completion = out_chars // 4 + 1
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _resolve_calls(self, step: Reply) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) per tool call, allocating ids."""
        return [
            (tc.id or f"call_{next(self._call_ids)}", tc.name, tc.arguments_json()) for tc in step.tool_calls
        ]

    @staticmethod
    def _finish_reason(step: Reply) -> str:
        if step.finish_reason is not None:
            return step.finish_reason
        return "tool_calls" if step.tool_calls else "stop"

    @staticmethod
    def _drop(request: web.Request) -> None:
        """Close the TCP connection under the response (flushing what was written)."""
        if request.transport is not None:
            request.transport.close()

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
        events += [chunk({"reasoning_content": p}) for p in _pieces(step.thinking, step.chunk_size)]
        events += [chunk({"content": p}) for p in _pieces(step.text, step.chunk_size)]
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
                for p in _pieces(args, step.chunk_size)
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

        resp = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await resp.prepare(request)
        drop = step.drop_after_chunks
        for i, event in enumerate(events):
            if drop is not None and i >= drop:
                break
            if i > 0 and step.chunk_delay_s > 0:
                await asyncio.sleep(step.chunk_delay_s)
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        if drop is not None:
            self._drop(request)  # no [DONE], no terminating chunk: an incomplete stream
            return resp
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# --------------------------------------------------------------------------- threaded variant


class ScriptedOpenAIThread:
    """A :class:`ScriptedOpenAI` on its own event loop in a daemon thread, for sync code.

    Responders run on the server thread.
    """

    def __init__(
        self,
        *,
        default: Responder | None = None,
        context_window: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.server = ScriptedOpenAI(default=default, context_window=context_window, host=host, port=port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``; valid after :meth:`start`."""
        return self.server.base_url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of the request bodies received so far."""
        return list(self.server.requests)

    def enqueue(self, *steps: Step) -> None:
        """See :meth:`ScriptedOpenAI.enqueue`."""
        self.server.enqueue(*steps)

    def set_responder(self, fn: Responder | None) -> None:
        """See :meth:`ScriptedOpenAI.set_responder`."""
        self.server.set_responder(fn)

    def route(self, marker: str, fn: Responder) -> None:
        """See :meth:`ScriptedOpenAI.route`."""
        self.server.route(marker, fn)

    def pending(self) -> int:
        """See :meth:`ScriptedOpenAI.pending`."""
        return self.server.pending()

    def start(self, timeout: float = 10.0) -> str:
        """Start the loop thread and the server; returns the base URL."""
        if self._loop is not None:
            return self.base_url
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="scripted-openai", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        return asyncio.run_coroutine_threadsafe(self.server.start(), loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server, the loop and the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            if not thread.is_alive():
                loop.close()

    def __enter__(self) -> ScriptedOpenAIThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- CLI


async def _serve(port: int, steps: Iterable[Step], context_window: int | None) -> None:
    server = ScriptedOpenAI(context_window=context_window, port=port)
    server.enqueue(*steps)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    url = await server.start()
    print(f"LISTENING {url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tests.fakes.scripted_openai``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: a free one)")
    parser.add_argument("--script", type=Path, help="JSON list of steps to enqueue")
    parser.add_argument("--context-window", type=int, default=None, help="overflow above N")
    args = parser.parse_args(argv)
    steps = load_script(args.script) if args.script else []
    asyncio.run(_serve(args.port, steps, args.context_window))
    return 0


if __name__ == "__main__":
    sys.exit(main())
