"""The running tracer: OpenTelemetry's SDK behind :class:`netclaw.process.traces.Tracing`.

Imported only when ``telemetry.traces`` is on (:func:`netclaw.daemon` starts it), so a
daemon without the ``telemetry`` extra installed runs as long as traces stay off.

Spans are netclaw's own light records (:class:`LiveSpan`), each made into the SDK's
``ReadableSpan`` as it ends. Export: the SDK's OTLP/HTTP exporter (protobuf) on its
batching processor, whose thread does every export: a turn only appends its ended spans
to a queue. The queue is bounded
here (``max_queue``): a span that finds it full is dropped and counted, as are the spans
of an export the collector refused or never answered (:meth:`Running.dropped`, shown
on ``/metrics``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    format_span_id,
    format_trace_id,
)

from netclaw import __version__
from netclaw.process.traces import (
    Attributes,
    AttributeValue,
    Carrier,
    Span,
    Tracing,
    current_span,
    parse_traceparent,
)

log = logging.getLogger(__name__)

DEFAULT_SERVICE = "netclaw"
MAX_BATCH = 512  # spans per export (the SDK's default)
SHUTDOWN_WAIT_S = 5.0  # a stop exports what it can this long, then leaves (a collector that is down)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class LiveSpan(Span):
    """A span of a running tracer: a plain record, made into the SDK's :class:`ReadableSpan`
    when it ends and handed to the exporter's queue. Not the SDK's own ``Span``: that one
    takes a sampler, a context and locks per span — six times the cost on the threads a
    turn runs on — for what this record does by itself (ids, times, attributes, events,
    status). Set from one thread at a time (a model call's span is made on the actor and
    ended on the loop); :meth:`end` counts once."""

    __slots__ = (
        "_attributes",
        "_events",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_start",
        "_status",
        "_tracing",
        "context",
        "ended",
    )

    recording = True

    def __init__(
        self,
        tracing: Running,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: Attributes | None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[Link] = (),
        start_ns: int | None = None,
    ) -> None:
        self._tracing = tracing
        self._name = name
        self.context = context
        self._parent = parent
        self._attributes: dict[str, AttributeValue] = (
            {key: _clean(value) for key, value in attributes.items()} if attributes else {}
        )
        self._events: list[Event] = []
        self._kind = kind
        self._links = links
        self._start = start_ns if start_ns is not None else time.time_ns()
        self._status = _UNSET
        self.ended = False

    @property
    def captures(self) -> bool:  # type: ignore[override]  # the tracer's setting, read-only
        return self._tracing.capture_content

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self._attributes[key] = _clean(value)

    def update(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        for key, value in attributes.items():
            if value is not None:
                self._attributes[key] = _clean(value)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        cleaned = {key: _clean(value) for key, value in attributes.items()} if attributes else None
        self._events.append(Event(name, cleaned, time.time_ns()))

    def fail(self, error: BaseException | str, description: str | None = None) -> None:
        if isinstance(error, BaseException):
            kind = getattr(error, "code", None)
            self._attributes["error.type"] = kind if isinstance(kind, str) else type(error).__name__
            description = description or f"{type(error).__name__}: {error}"
        else:
            self._attributes["error.type"] = error
        self._status = Status(StatusCode.ERROR, (description or str(error))[:500])

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        if self.context.trace_flags.sampled:
            self._tracing.finished(
                ReadableSpan(
                    self._name,
                    context=self.context,
                    parent=self._parent,
                    resource=self._tracing.resource,
                    attributes=self._attributes,
                    events=self._events,
                    links=self._links,
                    kind=self._kind,
                    status=self._status,
                    start_time=self._start,
                    end_time=time.time_ns(),
                    instrumentation_scope=self._tracing.scope,
                )
            )

    def child(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        client: bool = False,
        start_ns: int | None = None,
    ) -> Span:
        mine = self.context
        context = SpanContext(mine.trace_id, _span_id(), False, mine.trace_flags, mine.trace_state)
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        return LiveSpan(self._tracing, name, context, mine, attributes, kind=kind, start_ns=start_ns)

    def headers(self) -> Carrier:
        context = self.context
        flags = int(context.trace_flags)
        parent = f"00-{format_trace_id(context.trace_id)}-{format_span_id(context.span_id)}-{flags:02x}"
        state = context.trace_state.to_header() if context.trace_state else ""
        return (("traceparent", parent), ("tracestate", state)) if state else (("traceparent", parent),)

    def current(self) -> contextlib.AbstractContextManager[Span]:
        return _Current(self)

    @property
    def ids(self) -> tuple[str, str] | None:
        return format_trace_id(self.context.trace_id), format_span_id(self.context.span_id)


class _Current:
    """``with span.current():`` — the span is the current one for the block."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> Span:
        self._token = current_span.set(self._span)
        return self._span

    def __exit__(self, *exc: object) -> None:
        current_span.reset(self._token)


class Running(Tracing):
    enabled = True

    def __init__(
        self,
        *,
        capture_content: bool = False,
        endpoint: str | None = None,
        service_name: str | None = None,
        max_queue: int = 2048,
        exporter: SpanExporter | None = None,
        schedule_delay_ms: int | None = None,
    ) -> None:
        """``endpoint``: the collector's base URL (spans go to its ``/v1/traces``); None: the
        standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` decide
        (default ``http://localhost:4318``). ``exporter``: another exporter (tests)."""
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            url = endpoint.rstrip("/") + "/v1/traces" if endpoint else None
            exporter = OTLPSpanExporter(endpoint=url)
        self.capture_content = capture_content
        self._lock = threading.Lock()
        self._dropped = {"queue_full": 0, "export_failed": 0}
        self._exported = 0
        self._pending = 0  # ended and handed to the batcher, not yet exported or lost
        self._max_queue = max_queue
        # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; the config's
        # service name (or ours) only when the environment names none.
        own = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name or DEFAULT_SERVICE}
        resource = _Resource(Resource.create({"service.version": __version__, **own}))
        self.resource: Resource = resource
        self.scope = InstrumentationScope("netclaw", __version__)
        # No TracerProvider: spans are our records (LiveSpan), queued straight to the batcher,
        # so two daemons in one process (the tests) keep theirs apart as well.
        self._batcher = BatchSpanProcessor(
            _Counting(exporter, self._export_done),
            max_queue_size=max_queue,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(MAX_BATCH, max_queue),
        )

    def root(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        parent: Carrier = (),
        link: Carrier = (),
        start_ns: int | None = None,
        trace_id: int | None = None,
    ) -> Span:
        # A caller's trace goes on here; as the SDK's default sampler does, its "not sampled"
        # is followed (the span is made, so its context travels on, but never exported).
        remote = _remote(parent)
        if remote is not None:
            own = SpanContext(remote.trace_id, _span_id(), False, remote.trace_flags, remote.trace_state)
        else:
            own = SpanContext(trace_id or _trace_id(), _span_id(), False, _SAMPLED)
        linked = _remote(link)
        links = (Link(linked),) if linked is not None else ()
        return LiveSpan(self, name, own, remote, attributes, links=links, start_ns=start_ns)

    def finished(self, span: ReadableSpan) -> None:
        """An ended span, to the exporter's queue unless it is full (then counted)."""
        if self.admit():
            self._batcher.on_end(span)

    # -- the queue's bound and its counts

    def admit(self) -> bool:
        with self._lock:
            if self._pending >= self._max_queue:
                self._dropped["queue_full"] += 1
                return False
            self._pending += 1
            return True

    def _export_done(self, count: int, ok: bool) -> None:
        with self._lock:
            self._pending = max(0, self._pending - count)
            if ok:
                self._exported += count
            else:
                self._dropped["export_failed"] += count

    def dropped(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._dropped)

    def exported(self) -> int:
        with self._lock:
            return self._exported

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (tests, and a stop)."""
        return self._batcher.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        # The SDK's shutdown waits for a last export: a collector that is down must not hold
        # the daemon's stop for the exporter's whole timeout.
        stopping = threading.Thread(target=self._batcher.shutdown, name="netclaw-traces-stop", daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_WAIT_S)
        if stopping.is_alive():
            log.warning("traces: the collector did not take the last spans within %gs", SHUTDOWN_WAIT_S)


class _Resource(Resource):
    """The resource, its hash computed once: the exporter groups every span by its resource,
    and ``Resource.__hash__`` serialises the attributes to JSON each time (a tenth of the
    encoding's cost). A resource is immutable, so the hash cannot go stale."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def _clean(value: object) -> AttributeValue:
    """A value OTLP can carry. The exporter encodes a whole batch at once and drops all of it
    on one value it cannot encode (the SDK's own spans clean values as they are set), so a
    value of another type goes as its text, and a sequence as a tuple of such values."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return tuple(v if isinstance(v, str | bool | int | float) else str(v) for v in value)  # type: ignore[misc]
    return str(value)


def _span_id() -> int:
    """A random non-zero 64-bit span id (as the SDK makes them)."""
    return random.getrandbits(64) or 1


def _trace_id() -> int:
    return random.getrandbits(128) or 1


class _Counting(SpanExporter):
    """The exporter, counting what it exported and what it lost."""

    def __init__(self, inner: SpanExporter, done: Callable[[int, bool], None]) -> None:
        self._inner = inner
        self._done = done

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            self._done(len(spans), False)
            raise
        self._done(len(spans), result == SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _remote(headers: Carrier) -> SpanContext | None:
    """The span context W3C headers name, or None (absent or malformed)."""
    found = dict(headers)
    parsed = parse_traceparent(found.get("traceparent", ""))
    if parsed is None:
        return None
    trace_id, span_id, flags = parsed
    state: TraceState | None = None
    if "tracestate" in found:
        with contextlib.suppress(ValueError):
            state = TraceState.from_header([found["tracestate"]])
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags), trace_state=state)
