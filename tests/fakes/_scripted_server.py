"""Plumbing shared by the scripted fake LLM servers (:mod:`tests.fakes.scripted_openai`,
:mod:`tests.fakes.scripted_anthropic`).

:class:`ScriptedServer` is a real aiohttp server on 127.0.0.1 answering one POST route
and ``GET /v1/models``. Each request consumes one scripted step (a reply or an error reply)
from a FIFO queue; marker routes are checked before the queue, and a default responder
(echo unless replaced) answers when it is empty. A subclass brings the protocol: request
validation, the error body, the whole and the streamed answer.
:class:`ScriptedServerThread` runs a server on its own loop for sync code, and
:func:`run_cli` is the standalone entry point both fakes share.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import inspect
import itertools
import json
import logging
import re
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, Self, TypeAlias, TypedDict, TypeVar, cast

from aiohttp import web

from netclaw.messages import CONTEXT_OPEN
from tests.fakes._loop_thread import run_until_stopped

# --------------------------------------------------------------------------- script steps


_SPEAKER = re.compile(r"^\[[^\]\n]{1,80}\] ")


def is_context(text: str) -> bool:
    """A volatile tail netclaw added to the newest turn (the time, memories): not what the
    user said, so the echo and the routes look past it."""
    return text.startswith(CONTEXT_OPEN)


def said(text: str) -> str:
    """What a user message says without the tail an OpenAI-compatible request carries in
    it (after a blank line); a whole tail says nothing."""
    return "" if is_context(text) else text.split("\n\n" + CONTEXT_OPEN, 1)[0]


def as_sent(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, content) of messages as the API's context view shows them, the way an
    OpenAI-compatible request carries them: a ``context`` note inside the user message
    before it."""
    found: list[tuple[str, str]] = []
    for m in messages:
        content = m.get("content") or ""
        if m.get("kind") == "context" and found and found[-1][0] == "user":
            found[-1] = ("user", f"{found[-1][1]}\n\n{content}")
        else:
            found.append((m["role"], content))
    return found


def without_speaker(text: str) -> str:
    """A user text without a leading ``[Alice] `` speaker tag: the echo answers with what
    was said, so chat tests read the same whatever the platform calls the sender (the
    tag itself is checked where it matters, on the recorded requests)."""
    return _SPEAKER.sub("", text, count=1)


@dataclass
class ToolCallSpec:
    """One tool call in a scripted reply; dict ``arguments`` are JSON-encoded, strings sent as-is."""

    name: str
    arguments: str | dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # auto (unique per server, see ScriptedServer.CALL_ID_FORMAT) when None

    def arguments_json(self) -> str:
        """The arguments as the JSON text sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class PrefixCache:
    """The prompt cache a provider keeps, as both fakes simulate it: the prefixes of the
    requests it saw, held by a hash of their parts (a tool set, a message or a content
    block, serialised without cache markers). A request reads the longest prefix it shares
    with what is held; the OpenAI fake looks at every position (automatic prefix caching),
    the Anthropic fake at its ``cache_control`` breakpoints and up to 20 parts before each,
    and holds only the prefixes its breakpoints close."""

    LOOKBACK = 20

    def __init__(self, limit: int = 200_000) -> None:
        self._held: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    @staticmethod
    def prefixes(namespace: str, parts: list[tuple[Any, int]]) -> tuple[list[bytes], list[int]]:
        """Each prefix's hash and tokens: ``parts`` are (JSON-able part, its tokens)."""
        hashes: list[bytes] = []
        tokens: list[int] = []
        digest = hashlib.sha256(namespace.encode())
        total = 0
        for part, count in parts:
            digest.update(json.dumps(part, sort_keys=True, separators=(",", ":")).encode())
            total += count
            hashes.append(digest.copy().digest())
            tokens.append(total)
        return hashes, tokens

    def read(self, hashes: list[bytes], tokens: list[int], positions: Iterable[int]) -> int:
        """Tokens of the longest held prefix among ``positions`` (indexes into the parts)."""
        with self._lock:
            hits = [tokens[i] for i in positions if 0 <= i < len(hashes) and hashes[i] in self._held]
        return max(hits, default=0)

    def hold(self, hashes: list[bytes], positions: Iterable[int]) -> None:
        with self._lock:
            for i in positions:
                if 0 <= i < len(hashes):
                    self._held[hashes[i]] = None
                    self._held.move_to_end(hashes[i])
            while len(self._held) > self._limit:
                self._held.popitem(last=False)


def without_cache_marks(part: Any) -> Any:
    """A content block (or tool) as the cache compares it: its ``cache_control`` left out."""
    if isinstance(part, dict) and "cache_control" in part:
        return {k: v for k, v in part.items() if k != "cache_control"}
    return part


class ReplyLike(Protocol):
    """What the shared plumbing reads of a scripted successful reply."""

    tool_calls: list[ToolCallSpec]
    delay_s: float
    chunk_delay_s: float
    drop_after_chunks: int | None
    hang: bool
    hold_open_s: float
    omit_end: bool


class ErrorLike(Protocol):
    """What the shared plumbing reads of a scripted error reply."""

    status: int
    retry_after: float | None
    body: str | None
    delay_s: float


R = TypeVar("R", bound=ReplyLike)
E = TypeVar("E", bound=ErrorLike)
StepT = TypeVar("StepT")

ResponderOf: TypeAlias = Callable[[dict[str, Any]], R | E | Awaitable[R | E]]


class ReplyFields(TypedDict):
    """The fields every protocol's scripted reply has."""

    text: str
    tool_calls: list[ToolCallSpec]
    thinking: str
    usage: tuple[int, int] | None
    delay_s: float
    chunk_delay_s: float
    chunk_size: int
    drop_after_chunks: int | None
    hang: bool


class ErrorFields(TypedDict):
    """The fields every protocol's scripted error reply has."""

    status: int
    message: str
    type: str
    retry_after: float | None
    body: str | None
    delay_s: float


def reply_fields(data: dict[str, Any]) -> ReplyFields:
    """:class:`ReplyFields` from a reply's JSON script form (keys as the fields)."""
    usage = data.get("usage")
    drop = data.get("drop_after_chunks")
    return ReplyFields(
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
        drop_after_chunks=None if drop is None else int(drop),
        hang=bool(data.get("hang", False)),
    )


def error_fields(data: dict[str, Any]) -> ErrorFields:
    """:class:`ErrorFields` from an error's JSON script form (``error`` is the status)."""
    retry = data.get("retry_after")
    return ErrorFields(
        status=int(data["error"]),
        message=str(data.get("message", "scripted error")),
        type=str(data.get("type", "invalid_request_error")),
        retry_after=None if retry is None else float(retry),
        body=data.get("body"),
        delay_s=float(data.get("delay_s", 0.0)),
    )


def load_steps(path: str | Path, step_from_dict: Callable[[dict[str, Any]], StepT]) -> list[StepT]:
    """Read a JSON list of step objects from ``path``."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: a script must be a JSON list of steps")
    return [step_from_dict(item) for item in raw]


# --------------------------------------------------------------------------- request helpers


def request_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's ``messages`` that are objects (none when it has no list)."""
    msgs = request.get("messages")
    if not isinstance(msgs, list):
        return []
    return [m for m in msgs if isinstance(m, dict)]


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut into deltas of ``size`` characters (at least one)."""
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def retry_after_value(seconds: float) -> str:
    """A Retry-After header value: whole seconds without a decimal point."""
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


# --------------------------------------------------------------------------- the server


class ScriptedServer(ABC, Generic[R, E]):
    """The scripted server; use ``async with Server() as fake: fake.base_url``."""

    #: The classes of this protocol's steps.
    reply_type: type[R]
    error_type: type[E]
    #: The route answered by :meth:`_answer`.
    POST_PATH: ClassVar[str]
    #: Appended to ``http://HOST:PORT`` to make :attr:`base_url`.
    URL_PATH: ClassVar[str] = ""
    #: Tool call ids allocated for :class:`ToolCallSpec` without one (``.format(n)``).
    CALL_ID_FORMAT: ClassVar[str]
    RETRY_AFTER_HEADER: ClassVar[str] = "Retry-After"

    def __init__(
        self,
        *,
        default: ResponderOf[R, E] | None = None,
        context_window: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 1024**2,  # aiohttp's default; benchmarks send bigger prompts
    ) -> None:
        self.context_window = context_window
        self.max_body_bytes = max_body_bytes
        self.host = host
        self.requests: list[dict[str, Any]] = []  # every valid request body, in arrival order
        self.headers: list[dict[str, str]] = []  # the headers of each of them, in the same order
        self.errors: list[BaseException] = []  # exceptions raised by responders
        self.aborted = 0  # requests whose client went away before the answer was complete
        self.frames_sent = 0  # stream frames written, all requests together (a stream is under way)
        self.streaming = 0  # answers streaming right now (their first frame out, their end not yet)
        self.answered: list[dict[str, Any]] = []  # bodies whose reply (no error) went out, after its delay
        self._port = port
        self._default = default
        self._queue: collections.deque[R | E] = collections.deque()
        self._routes: list[tuple[str, ResponderOf[R, E]]] = []
        self._lock = threading.Lock()  # guards queue/routes/default (ScriptedServerThread)
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._log = logging.getLogger(type(self).__module__)
        self.prompt_cache = PrefixCache()  # what this server would have cached (usage reports it)
        # How long the echo default waits before answering, as a model thinks (benchmarks).
        self.echo_think_s = 0.0

    # ----- scripting

    def enqueue(self, *steps: R | E) -> None:
        """Append steps to the FIFO queue; each request consumes one."""
        with self._lock:
            self._queue.extend(steps)

    def set_responder(self, fn: ResponderOf[R, E] | None) -> None:
        """Responder used when the queue is empty (None restores the echo default)."""
        with self._lock:
            self._default = fn

    def route(self, marker: str, fn: ResponderOf[R, E]) -> None:
        """Send requests with ``marker`` in any message text to ``fn``, before the queue."""
        with self._lock:
            self._routes.append((marker, fn))

    def pending(self) -> int:
        """Steps left in the queue."""
        with self._lock:
            return len(self._queue)

    # ----- lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` plus :attr:`URL_PATH`; valid after :meth:`start`."""
        if self._base_url is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
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
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post(self.POST_PATH, self._handle_post)
        app.router.add_get("/v1/models", self._handle_models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        self._base_url = f"http://{self.host}:{self._port}{self.URL_PATH}"
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

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ----- protocol hooks

    @abstractmethod
    async def _handle_models(self, request: web.Request) -> web.Response: ...

    @abstractmethod
    async def _answer(self, request: web.Request) -> web.StreamResponse:
        """Validate the POST and, when acceptable, :meth:`_respond` to it."""

    @abstractmethod
    def _estimate_prompt_tokens(self, body: dict[str, Any]) -> int: ...

    @abstractmethod
    def _overflow(self, prompt_tokens: int) -> E:
        """The error for a prompt above :attr:`context_window`."""

    @abstractmethod
    def _texts(self, body: dict[str, Any]) -> list[str]:
        """The texts route markers are looked for in."""

    @abstractmethod
    def _echo(self, body: dict[str, Any]) -> R:
        """The answer when the queue is empty and no responder is set: ``echo: `` and the
        last user text, without the speaker tag netclaw puts in front (see
        :func:`without_speaker`)."""

    @abstractmethod
    def _responder_failed(self, exc: Exception) -> web.Response:
        """The 500 answer when a responder raised ``exc``."""

    @abstractmethod
    def _error_body(self, step: E) -> dict[str, Any]: ...

    def _record(self, request: web.Request, body: dict[str, Any]) -> None:
        """Keep a valid request."""
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})

    def _error_headers(self) -> dict[str, str]:
        return {}

    @abstractmethod
    def _send_json(self, request: web.Request, body: dict[str, Any], step: R) -> web.Response: ...

    @abstractmethod
    async def _send_stream(
        self, request: web.Request, body: dict[str, Any], step: R
    ) -> web.StreamResponse: ...

    # ----- request handling

    async def _handle_post(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            return await self._answer(request)
        except (ConnectionResetError, asyncio.CancelledError):
            self.aborted += 1  # the client closed the stream (a cancelled turn), or stop()
            raise
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _respond(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """Answer a valid request with the next step."""
        self._record(request, body)
        try:
            step = await self._pick_step(body)
        except Exception as exc:
            self._log.exception("scripted responder failed")
            self.errors.append(exc)
            return self._responder_failed(exc)

        if isinstance(step, self.error_type):
            return await self._send_error(step)
        reply = cast(R, step)
        if reply.hang:
            await asyncio.get_running_loop().create_future()  # until cancelled by stop()
        if reply.delay_s > 0:
            await asyncio.sleep(reply.delay_s)
        self.answered.append(body)
        if body.get("stream"):
            return await self._send_stream(request, body, reply)
        return self._send_json(request, body, reply)

    async def _pick_step(self, body: dict[str, Any]) -> R | E:
        if self.context_window is not None and self._estimate_prompt_tokens(body) > self.context_window:
            return self._overflow(self._estimate_prompt_tokens(body))
        texts = self._texts(body)
        fn: ResponderOf[R, E] | None = None
        with self._lock:
            for marker, route_fn in self._routes:
                if any(marker in t for t in texts):
                    fn = route_fn
                    break
            if fn is None:
                if self._queue:
                    return self._queue.popleft()
                fn = self._default or self._echo
        result = fn(body)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, (self.reply_type, self.error_type)):
            raise TypeError(f"responder returned {type(result).__name__}, not a Reply/ErrorReply")
        if fn == self._echo and self.echo_think_s > 0:
            result = dataclasses.replace(result, delay_s=self.echo_think_s)  # type: ignore[type-var]
        return result

    async def _send_error(self, step: E) -> web.Response:
        if step.delay_s > 0:
            await asyncio.sleep(step.delay_s)
        headers = self._error_headers()
        if step.retry_after is not None:
            headers[self.RETRY_AFTER_HEADER] = retry_after_value(step.retry_after)
        if step.body is not None:
            return web.Response(
                status=step.status, text=step.body, content_type="text/plain", headers=headers
            )
        return web.json_response(self._error_body(step), status=step.status, headers=headers)

    def _resolve_calls(self, step: R) -> list[tuple[str, str, str]]:
        """(id, name, arguments JSON) per tool call, allocating ids."""
        return [
            (tc.id or self.CALL_ID_FORMAT.format(next(self._call_ids)), tc.name, tc.arguments_json())
            for tc in step.tool_calls
        ]

    @staticmethod
    def _drop(request: web.Request) -> None:
        """Close the TCP connection under the response (flushing what was written)."""
        if request.transport is not None:
            request.transport.close()

    async def _stream(
        self,
        request: web.Request,
        step: R,
        headers: dict[str, str],
        frames: list[bytes],
        trailer: bytes = b"",
    ) -> web.StreamResponse:
        """Send ``frames`` as a 200 event stream, honouring the step's delays and drop."""
        resp = web.StreamResponse(status=200, headers=headers)
        await resp.prepare(request)
        drop = step.drop_after_chunks
        streaming = False
        try:
            for i, frame in enumerate(frames):
                if drop is not None and i >= drop:
                    break
                if i > 0 and step.chunk_delay_s > 0:
                    await asyncio.sleep(step.chunk_delay_s)
                await resp.write(frame)
                self.frames_sent += 1
                if not streaming:
                    streaming = True
                    self.streaming += 1
            if drop is not None:
                self._drop(request)  # no trailer, no end: an incomplete stream
                return resp
            if trailer and not step.omit_end:
                await resp.write(trailer)
            if step.hold_open_s > 0:  # the answer is complete, but the body does not end yet
                await asyncio.sleep(step.hold_open_s)
            await resp.write_eof()
            return resp
        finally:
            if streaming:
                self.streaming -= 1


# --------------------------------------------------------------------------- threaded variant


class ScriptedServerThread(Generic[R, E]):
    """A scripted server on its own event loop in a daemon thread, for sync code.

    Responders run on the server thread.
    """

    server: ScriptedServer[R, E]

    def __init__(self, server: ScriptedServer[R, E], thread_name: str) -> None:
        self.server = server
        self._thread_name = thread_name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The server's base URL; valid after :meth:`start`."""
        return self.server.base_url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of the request bodies received so far."""
        return list(self.server.requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers (lower-case names) of those requests, in the same order."""
        return list(self.server.headers)

    @property
    def aborted(self) -> int:
        """Requests whose client closed the connection before the answer was complete."""
        return self.server.aborted

    @property
    def answered(self) -> list[dict[str, Any]]:
        """The request bodies whose reply (not an error) went out so far, after its delay, in that order."""
        return list(self.server.answered)

    @property
    def streaming(self) -> int:
        """Answers streaming right now (first frame out, end not yet)."""
        return self.server.streaming

    @property
    def frames_sent(self) -> int:
        """Stream frames written so far, all requests together."""
        return self.server.frames_sent

    def enqueue(self, *steps: R | E) -> None:
        """See :meth:`ScriptedServer.enqueue`."""
        self.server.enqueue(*steps)

    def set_responder(self, fn: ResponderOf[R, E] | None) -> None:
        """See :meth:`ScriptedServer.set_responder`."""
        self.server.set_responder(fn)

    def route(self, marker: str, fn: ResponderOf[R, E]) -> None:
        """See :meth:`ScriptedServer.route`."""
        self.server.route(marker, fn)

    def pending(self) -> int:
        """See :meth:`ScriptedServer.pending`."""
        return self.server.pending()

    def start(self, timeout: float = 10.0) -> str:
        """Start the loop thread and the server; returns the base URL."""
        if self._loop is not None:
            return self.base_url
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=run_until_stopped, args=(loop,), name=self._thread_name, daemon=True)
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
            thread.join(timeout)  # the thread closes the loop

    def __enter__(self) -> Self:
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


async def serve(server: ScriptedServer[Any, Any], steps: Iterable[Any]) -> None:
    """Serve ``steps`` until SIGTERM/SIGINT, after printing ``LISTENING <base_url>``."""
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


def run_cli(
    argv: list[str] | None,
    *,
    doc: str | None,
    make_server: Callable[[int, int | None], ScriptedServer[Any, Any]],
    load_script: Callable[[Path], Iterable[Any]],
) -> int:
    """``--port N [--script FILE.json] [--context-window N] [--think S]``: build the server
    and :func:`serve`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: a free one)")
    parser.add_argument("--script", type=Path, help="JSON list of steps to enqueue")
    parser.add_argument("--context-window", type=int, default=None, help="overflow above N")
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        metavar="S",
        help="the echo default waits S seconds before it answers, as a model thinks",
    )
    args = parser.parse_args(argv)
    if args.think < 0:
        parser.error(f"--think must be 0 or more seconds, not {args.think:g}")
    steps = load_script(args.script) if args.script else []
    server = make_server(args.port, args.context_window)
    server.echo_think_s = args.think
    asyncio.run(serve(server, steps))
    return 0
