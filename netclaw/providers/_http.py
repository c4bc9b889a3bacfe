"""What the HTTP providers share: one streamed POST per attempt, retried while nothing was shown.

:class:`HttpStreamingProvider` owns the HTTP client, the error translation, the
retry loop and the reading of a server-sent event stream (stray non-SSE text,
stalls, broken connections). A subclass supplies the wire format through small
hooks: where to POST, which headers, the request body, the per-attempt answer
assembly, a whole (non-streamed) JSON answer, and each streamed event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

import httpx

from netclaw import __version__, jsontext
from netclaw.config import ProviderConfig
from netclaw.errors import (
    ModelNotServed,
    ProviderError,
    ProviderProtocolError,
    ProviderUnavailable,
)
from netclaw.process import traces
from netclaw.providers._base import Completion, OnDelta, ProviderRequest
from netclaw.providers._classify import (
    PROVIDER_MAX_RETRY_AFTER_S,
    classify_http_error,
    classify_transport_error,
    retry_verdict,
)
from netclaw.providers._images import read_all, uncached
from netclaw.providers._transport import PooledTransport
from netclaw.retry import RetryPolicy, with_retries
from netclaw.security.redact import Scrubber, scrub_bytes

log = logging.getLogger("netclaw.providers")

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a stream or a whole answer; past it, a protocol error
MAX_ERROR_BODY_BYTES = 64 * 1024  # an error body is read this far, never whole
TAIL_S = 1.0  # after the answer is complete: how long to wait for the rest (usage, [DONE], EOF)

# --------------------------------------------------------------------------- wire helpers


def _plain(value: Any) -> Any:
    """Deep-copy mappings/sequences into dicts/lists so ``json`` can encode them."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


_SCHEMAS: dict[int, tuple[Any, Any]] = {}  # id(parameters) -> (parameters, plain copy)


def plain_schema(parameters: Mapping[str, Any]) -> Any:
    """A tool's parameter schema as plain JSON values, converted once per schema object (a
    registered tool's schema is the same object every turn; the copy was a tenth of the
    I/O loop's time)."""
    hit = _SCHEMAS.get(id(parameters))
    if hit is not None and hit[0] is parameters:  # the reference held below keeps the id unique
        return hit[1]
    plain = _plain(parameters)
    if len(_SCHEMAS) >= 4096:
        _SCHEMAS.clear()
    _SCHEMAS[id(parameters)] = (parameters, plain)
    return plain


class Prefix(NamedTuple):
    """A session's kept request prefix (:meth:`WireCache.prefix`)."""

    messages: tuple[object, ...]  # the message objects it encodes
    data: bytes | memoryview  # their JSON, joined (a view into the body they went out in)
    clean: Scrubber | None  # the known secrets none of which it holds (None: not looked at)


class WireCache:
    """The JSON of request parts that do not change between a session's requests — each
    message (a transcript only grows) and each tool set — encoded to UTF-8 bytes once, not
    on every turn, so a request body is one ``bytes.join``. Bounded by bytes held: past
    ``limit`` the oldest half of the parts is dropped (an active session's parts come
    back on its next request).

    Each session's last request prefix is kept too (:meth:`prefix`): the messages before
    its newest turn, joined. The next request whose messages begin with those very
    objects starts from the joined bytes, so a session's own work per call does not grow
    with its history. At most ``prefixes`` sessions, the least recently used dropped."""

    def __init__(self, limit: int = 16_000_000, prefixes: int = 256) -> None:
        self.limit = limit
        self.size = 0  # bytes held
        self._parts: dict[Hashable, tuple[Any, bytes]] = {}
        self._prefixes: OrderedDict[Hashable, Prefix] = OrderedDict()
        self._prefix_limit = prefixes
        self.prefix_size = 0  # bytes held in prefixes (bounded by ``limit`` as well)

    def prefix(self, key: Hashable) -> Prefix | None:
        """``key``'s last kept prefix."""
        hit = self._prefixes.get(key)
        if hit is not None:
            self._prefixes.move_to_end(key)
        return hit

    def keep_prefix(
        self,
        key: Hashable,
        messages: tuple[object, ...],
        data: bytes | memoryview,
        clean: Scrubber | None = None,
    ) -> None:
        old = self._prefixes.pop(key, None)
        if old is not None:
            self.prefix_size -= _held(old.data)
        self._prefixes[key] = Prefix(messages, data, clean)
        self.prefix_size += _held(data)
        while self._prefixes and (len(self._prefixes) > self._prefix_limit or self.prefix_size > self.limit):
            _, dropped = self._prefixes.popitem(last=False)
            self.prefix_size -= _held(dropped.data)

    def message_json(self, message: object, vision: bool, make: Callable[[], Any]) -> bytes:
        """The JSON of one message object (a transcript hands the same objects every turn;
        a changed message — a cleared result — is a new object). Keyed by ``id()`` and
        checked against the object held, so a recycled id never matches: one dict lookup
        per message, no key to build or hash."""
        hit = self._parts.get(id(message))
        if hit is not None and hit[0][0] is message and hit[0][1] is vision:
            return hit[1]
        return self._put(id(message), make, (message, vision))

    def part_json(self, key: Hashable, make: Callable[[], Any], *, holds: Any = None) -> bytes:
        """The JSON of ``make()``, cached under ``key``; ``holds`` is kept alive with it (so
        an ``id()`` in the key cannot be reused by another object meanwhile)."""
        hit = self._parts.get(key)
        if hit is not None:
            return hit[1]
        return self._put(key, make, holds)

    def _put(self, key: Hashable, make: Callable[[], Any], holds: Any) -> bytes:
        data = to_json(make())
        replaced = self._parts.pop(key, None)
        if replaced is not None:
            self.size -= len(replaced[1])
        if self.size + len(data) > self.limit:
            for oldest in list(self._parts)[: len(self._parts) // 2 + 1]:
                self.size -= len(self._parts.pop(oldest)[1])
        self._parts[key] = (holds, data)
        self.size += len(data)
        return data

    def __len__(self) -> int:
        return len(self._parts)


def _held(data: bytes | memoryview) -> int:
    """The bytes ``data`` keeps alive: a view keeps the whole body it looks into."""
    return memoryview(data.obj).nbytes if isinstance(data, memoryview) else len(data)


def to_json(value: Any) -> bytes:
    """Compact JSON as UTF-8, as every request body is sent."""
    return jsontext.dumps_bytes(value)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --------------------------------------------------------------------------- SSE


_SSE_FIELDS = (b"data", b":", b"event", b"id", b"retry")


class SseReader:
    """Server-sent events from the raw bytes of a stream, in one pass: no text decoding of
    the stream, no line objects for the parts an event is not made of. Each event is
    ``(event name or "", data bytes)`` (data lines joined by ``\\n``); comments and other
    fields are dropped; ``\\r\\n``, ``\\r`` and ``\\n`` all end a line, also when a chunk
    splits them; a final event without its blank line still counts (:meth:`end`).
    ``stray`` keeps the first few hundred characters of lines that are not SSE at all (to
    report a body that is no event stream)."""

    __slots__ = ("_buffer", "_cr", "stray")

    def __init__(self) -> None:
        self._buffer = b""
        self._cr = False  # the last chunk ended in "\r": its "\n" may come next
        self.stray: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if self._cr:
            chunk = b"\r" + chunk
        self._cr = chunk.endswith(b"\r")
        if self._cr:
            chunk = chunk[:-1]
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[tuple[str, bytes]] = []
        start = 0
        while (end := buffer.find(b"\n\n", start)) != -1:
            self._event(buffer[start:end], events)
            start = end + 2
        self._buffer = buffer[start:]
        return events

    def end(self) -> list[tuple[str, bytes]]:
        events: list[tuple[str, bytes]] = []
        self._event(self._buffer, events)
        self._buffer = b""
        return events

    def _event(self, block: bytes, into: list[tuple[str, bytes]]) -> None:
        if block.startswith(b"data: ") and b"\n" not in block:  # the usual case: one data line
            into.append(("", block[6:]))
            return
        name = ""
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if not line or line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                data.append(value)
            elif field == b"event":
                name = value.decode("utf-8", errors="replace")
            elif not line.startswith(_SSE_FIELDS) and sum(map(len, self.stray)) < 300:
                self.stray.append(line.decode("utf-8", errors="replace"))
        if data:
            into.append((name, b"\n".join(data)))


def _arriving(response: httpx.Response) -> AsyncIterator[bytes]:
    """A streamed body's bytes as they arrive. A plain body is read from the transport's
    stream itself: httpx's two iterators around it (raw bytes, then decoded bytes) only
    handed each chunk on, a few microseconds apiece for every delta of every answer. An
    encoded one (gzip, ...) goes through httpx's decoders."""
    encoding = response.headers.get("content-encoding")
    if encoding and encoding.strip().lower() != "identity":
        return response.aiter_bytes()
    if not isinstance(response.stream, httpx.AsyncByteStream) or response.is_stream_consumed:
        return response.aiter_bytes()  # httpx says what is wrong
    response.is_stream_consumed = True  # as httpx's own iterators mark it
    return aiter(response.stream)


# --------------------------------------------------------------------------- the client


class _NoCookies(httpx.Cookies):
    """Provider APIs authenticate with keys; parsing each response's cookies into a jar
    nobody reads was a tenth of httpx's own cost per call."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class _Client(httpx.AsyncClient):
    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, value: object) -> None:
        return None


_NO_COOKIES = _NoCookies()


class _PreparedPost:
    """The parts of a provider's POST that stay the same between calls, parsed once: httpx's
    ``build_request`` re-parsed the URL and merged every header set on each call (a fifth of
    the client's cost per call). Headers are rebuilt only when their values change (a key
    rotated in the environment, a call's trace context)."""

    __slots__ = ("_extensions", "_headers", "_made_from", "_plain", "_template", "_url")

    def __init__(self, url: str, timeout: httpx.Timeout) -> None:
        self._url = httpx.URL(url)
        self._extensions = {"timeout": timeout.as_dict()}
        self._made_from: dict[str, str] | None = None
        self._headers = httpx.Headers()
        self._plain: dict[str, str] = {}
        self._template: httpx.Request | None = None

    def _update(self, headers: dict[str, str]) -> None:
        if headers != self._made_from:
            self._made_from = headers
            self._plain = {"User-Agent": f"netclaw/{__version__}", **headers}
            self._headers = httpx.Headers(self._plain)
            self._template = None

    def request(self, headers: dict[str, str], body: bytes) -> httpx.Request:
        """The whole request, for any httpx transport."""
        self._update(headers)
        return httpx.Request(
            "POST", self._url, headers=self._headers, content=body, extensions=self._extensions
        )

    def parts(self, headers: dict[str, str]) -> tuple[httpx.Request, dict[str, str]]:
        """For :meth:`PooledTransport.post`: the request without its body (what the response
        names as its request), and the headers as a plain dict."""
        self._update(headers)
        if self._template is None:
            self._template = httpx.Request(
                "POST", self._url, headers=self._headers, extensions=self._extensions
            )
        return self._template, self._plain


# --------------------------------------------------------------------------- provider


@dataclass
class _Progress:
    """Shared across attempts: once anything was shown, no more retries."""

    streamed: bool = False


@dataclass
class StreamAssembly(ABC):
    """One attempt's answer as it arrives; each provider adds the state its wire format needs."""

    provider: str
    on_delta: OnDelta | None
    progress: _Progress

    @abstractmethod
    def completion(self) -> Completion:
        """The answer assembled so far."""


AnswerT = TypeVar("AnswerT", bound=StreamAssembly)


class HttpStreamingProvider(ABC, Generic[AnswerT]):
    """A :class:`~netclaw.providers.Provider` that streams one HTTP POST per attempt.

    Transient failures are retried only while nothing has been streamed.
    """

    #: The provider's :class:`StreamAssembly`, made afresh for each attempt.
    assembly_type: type[AnswerT]
    #: The path shown when the models listing answers 404/405.
    MODELS_LABEL: ClassVar[str] = "/models"
    #: Keys of the models listing's JSON object tried in turn for the list of models.
    MODEL_LIST_KEYS: ClassVar[tuple[str, ...]] = ("data",)

    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        self.name = name
        self._retry_base_delay = retry_base_delay  # tests shrink the backoff
        self.config = config
        self.base_url = self._configured_base_url(config).rstrip("/")
        # One keep-alive connection per concurrently talking session, within reason
        # (httpx keeps only 20 by default, so busy daemons reconnected every turn).
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=128)
        self._transport = transport or PooledTransport(limits=limits)  # see _transport.py
        self._client = _Client(
            timeout=httpx.Timeout(config.timeout_s, connect=min(10.0, config.timeout_s)),
            transport=self._transport,
            limits=limits,
        )
        self._post: _PreparedPost | None = None  # made on first use (the endpoint is a hook)

    # ----- hooks

    def _configured_base_url(self, config: ProviderConfig) -> str:
        """The base URL before its trailing slash is dropped."""
        return config.base_url

    @abstractmethod
    def _endpoint(self) -> str:
        """The URL each attempt POSTs to."""

    @abstractmethod
    def _models_url(self) -> str:
        """The URL :meth:`check` GETs."""

    @abstractmethod
    def _headers(self) -> dict[str, str]: ...

    @abstractmethod
    def _request_body(self, request: ProviderRequest) -> dict[str, Any]: ...

    def _request_content(self, request: ProviderRequest) -> bytes:
        """The body (a provider may assemble it from cached parts)."""
        return to_json(self._request_body(request))

    def _scrubbed_content(self, request: ProviderRequest) -> bytes:
        """The body as sent. The last line of defence: whatever slipped past redaction, the
        daemon's own secrets (the control token, the config's secrets) never reach a
        provider (netclaw/security/redact.py). A provider that knows which bytes it looked
        at before may look at only the rest."""
        return scrub_bytes(self._request_content(request))

    def _new_assembly(self, on_delta: OnDelta | None, progress: _Progress) -> AnswerT:
        return self.assembly_type(self.name, on_delta, progress)

    @abstractmethod
    async def _read_whole(self, response: httpx.Response, answer: AnswerT) -> None:
        """A server that ignored ``stream: true`` and answered with one JSON object."""

    @abstractmethod
    def _take_event(self, answer: AnswerT, event: str, payload: bytes) -> bool:
        """Add one server-sent event to ``answer``; True when the answer is complete."""

    @abstractmethod
    def _check_complete(self, answer: AnswerT) -> None:
        """Raise (see :meth:`_ended_early`) when the stream ended before the answer did."""

    def _finished(self, answer: AnswerT) -> bool:
        """The answer is whole (what follows is bookkeeping: usage, an end marker)."""
        return False

    # ----- shared pieces

    def _http_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        return classify_http_error(
            response.status_code,
            body.decode("utf-8", errors="replace"),
            response.headers,
            self.name,
            api_key_env=self.config.api_key_env,
        )

    def _transport_error(self, exc: httpx.HTTPError) -> ProviderError:
        return classify_transport_error(exc, self.name, self.base_url, timeout_s=self.config.timeout_s)

    async def _whole_body(self, response: httpx.Response) -> Mapping[str, Any]:
        """A non-streamed answer, read within MAX_ANSWER_BYTES, as a JSON object."""
        raw = await read_capped(response, MAX_ANSWER_BYTES + 1)
        if len(raw) > MAX_ANSWER_BYTES:
            raise self._too_large()
        return self._parse_json_object(raw)

    def _too_large(self) -> ProviderProtocolError:
        return ProviderProtocolError(
            f"provider {self.name!r}: the answer is larger than {MAX_ANSWER_BYTES // (1024 * 1024)} MB; "
            "refused (is max_output_tokens honoured by the server?)"
        )

    def _parse_json_object(self, raw: bytes) -> Mapping[str, Any]:
        """A whole answer's body as a JSON object, or :class:`ProviderProtocolError`."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ProviderProtocolError(
                f"provider {self.name!r}: response is not valid JSON: "
                f"{raw[:200].decode('utf-8', errors='replace')}"
            ) from exc
        if not isinstance(data, Mapping):
            raise ProviderProtocolError(f"provider {self.name!r}: response is not a JSON object")
        return data

    def _ended_early(self, before: str) -> ProviderUnavailable:
        return ProviderUnavailable(
            f"provider {self.name!r}: stream ended early: the connection to "
            f"{self.base_url} closed before {before}"
        )

    # ----- the Provider protocol

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        if request.vision:
            images = uncached(request.messages)
            if images:  # file reads and base64 are no work for the I/O loop
                await asyncio.to_thread(read_all, images)
        body = self._scrubbed_content(request)  # the daemon's own secrets out: see there
        headers = {**self._headers(), "Content-Type": "application/json"}
        traces.inject(headers)  # the model call's span (telemetry.traces): the provider may continue it
        progress = _Progress()
        if self._post is None:
            self._post = _PreparedPost(self._endpoint(), self._client.timeout)
        post = self._post

        async def attempt() -> Completion:
            answer = self._new_assembly(on_delta, progress)
            try:
                response = await self._send(post, headers, body)
                try:
                    if not response.is_success:
                        raise self._http_error(response, await read_capped(response, MAX_ERROR_BODY_BYTES))
                    ctype = response.headers.get("content-type", "").lower()
                    if "json" in ctype and "event-stream" not in ctype:
                        # The server ignored stream=true.
                        await self._read_whole(response, answer)
                    else:
                        await self._read_stream(response, answer)
                finally:
                    await response.aclose()
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            return answer.completion()

        policy = RetryPolicy(
            max_retries=self.config.max_retries,
            base_delay_s=self._retry_base_delay,
            max_retry_after_s=PROVIDER_MAX_RETRY_AFTER_S,
        )
        return await with_retries(
            attempt,
            classify=retry_verdict,
            policy=policy,
            what=f"provider {self.name!r}",
            # A retry after the user saw part of an answer would show (and record) it twice.
            can_retry=lambda: not progress.streamed,
            logger=log,
        )

    async def _send(self, post: _PreparedPost, headers: dict[str, str], body: bytes) -> httpx.Response:
        """The model call's response, its body still to stream (closed by ``aclose``). Sent
        by the transport itself: the client's layers around it (auth, redirects, cookies, a
        log line) do nothing for a model call and cost about 120 us of CPU each (a twentieth
        of a turn's). The client routed nothing else either: with a transport of its own it
        reads no proxy from the environment. The pooled transport takes the body as it is,
        without an httpx request around it per call (see :meth:`PooledTransport.post`)."""
        transport = self._transport
        if isinstance(transport, PooledTransport):
            template, plain = post.parts(headers)
            return await transport.post(template, plain, body)
        request = post.request(headers, body)
        response = await transport.handle_async_request(request)
        response.request = request
        return response

    async def _read_stream(self, response: httpx.Response, answer: AnswerT) -> None:
        saw_data = False
        reader = SseReader()
        chunks = _arriving(response)
        size = 0
        done = ended = False
        try:
            while not ended:
                finished = self._finished(answer)
                try:
                    if finished:
                        # Complete: read what follows (usage, the end marker, EOF) so the
                        # connection can be reused, but never wait on a server that holds
                        # the connection open after the answer.
                        async with asyncio.timeout(TAIL_S):
                            chunk = await anext(chunks)
                    else:
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    events, ended = reader.end(), True
                except TimeoutError:
                    if finished:
                        break
                    raise
                else:
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise self._too_large()
                    # Every event that arrived together, in one go: an answer streams
                    # dozens, and a step of the loop above for each cost each a few us.
                    events = reader.feed(chunk)
                for event, payload in events:
                    saw_data = True
                    if not done:
                        done = self._take_event(answer, event, payload)
        except httpx.TimeoutException as exc:
            raise ProviderUnavailable(
                f"provider {self.name!r}: stream stalled: no data from {self.base_url} for "
                f"{self.config.timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            if self._finished(answer):
                return  # the connection broke after the answer was whole: nothing is missing
            # The connection broke under an answer that was under way.
            raise ProviderUnavailable(
                f"provider {self.name!r}: stream ended early: connection to {self.base_url} "
                f"lost ({str(exc) or type(exc).__name__})"
            ) from exc
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
        if not saw_data and reader.stray:
            ctype = response.headers.get("content-type", "?")
            raise ProviderProtocolError(
                f"provider {self.name!r}: answer is not an event stream ({ctype}): {' '.join(reader.stray)[:300]}"
            )
        self._check_complete(answer)

    async def check(self, model: str | None = None) -> str:
        """Reachability (and, where the server lists its models, that ``model`` is one of
        them). Raises ProviderError naming what is wrong (:class:`ModelNotServed` with the
        models it has when the server is up but lacks ``model``)."""
        answered, names = await self._listing()
        if names is None:
            return answered
        if model is not None and names and model not in names:
            shown = ", ".join(names[:10]) + (", …" if len(names) > 10 else "")
            raise ModelNotServed(
                f"the server at {self.base_url} does not have the model {model!r} (it has: {shown}); "
                "fix models.main.model, or pull the model (ollama pull NAME)",
                names,
            )
        return f"reachable, {len(names)} model{'' if len(names) == 1 else 's'}"

    async def served_models(self) -> list[str] | None:
        """The models the server lists (sorted), or None when it does not list them.
        Raises ProviderError when it cannot be reached."""
        return (await self._listing())[1]

    async def _listing(self) -> tuple[str, list[str] | None]:
        """(what the server answered, the model names it lists or None)."""
        try:
            response = await self._client.get(self._models_url(), headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        if response.status_code in (404, 405):
            # Not every server (or proxy) lists models; it answered, which is the point.
            return f"reachable, GET {self.MODELS_LABEL} answered HTTP {response.status_code}", None
        if not response.is_success:
            raise self._http_error(response, response.content)
        try:
            data = response.json()
        except ValueError:
            return f"reachable (HTTP {response.status_code})", None
        models = None
        for key in self.MODEL_LIST_KEYS:
            models = data.get(key) if isinstance(data, Mapping) else None
            if isinstance(models, list):
                break
        if not isinstance(models, list):
            return f"reachable (HTTP {response.status_code})", None
        names = sorted(
            {str(m.get("id") or m.get("name")) for m in models if isinstance(m, Mapping)} - {"None"}
        )
        return f"reachable (HTTP {response.status_code})", names

    async def aclose(self) -> None:
        await self._client.aclose()


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of a body (an error page, a whole answer); the rest is left
    unread and the connection closed with the response."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)[:limit]
