"""The running tracer: OpenTelemetry's SDK behind :class:`netclaw.process.traces.Tracing`.

Imported only when ``telemetry.traces`` is on (:func:`netclaw.daemon` starts it), so a
daemon without the ``telemetry`` extra installed runs as long as traces stay off.

Export: the OTLP/HTTP exporter (protobuf) on the SDK's batching processor, whose thread
does every export: a turn only appends its ended spans to a queue. The queue is bounded
here (``max_queue``): a span that finds it full is dropped and counted, as are the spans
of an export the collector refused or never answered (:meth:`Running.dropped`, shown
on ``/metrics``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
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


class LiveSpan(Span):
    """A span of a running tracer."""

    __slots__ = ("_span", "_tracing")

    recording = True

    def __init__(self, tracing: Running, span: trace.Span) -> None:
        self._tracing = tracing
        self._span = span

    @property
    def captures(self) -> bool:  # type: ignore[override]  # the tracer's setting, read-only
        return self._tracing.capture_content

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def update(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, attributes=attributes)

    def fail(self, error: BaseException | str, description: str | None = None) -> None:
        if isinstance(error, BaseException):
            kind = getattr(error, "code", None)
            self._span.set_attribute("error.type", kind if isinstance(kind, str) else type(error).__name__)
            description = description or f"{type(error).__name__}: {error}"
        else:
            self._span.set_attribute("error.type", error)
        self._span.set_status(Status(StatusCode.ERROR, (description or str(error))[:500]))

    def end(self) -> None:
        self._span.end()  # the SDK ignores a second end

    def child(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        client: bool = False,
        start_ns: int | None = None,
    ) -> Span:
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        context = trace.set_span_in_context(self._span)
        started = self._tracing.tracer.start_span(
            name, context=context, attributes=attributes, kind=kind, start_time=start_ns
        )
        return LiveSpan(self._tracing, started)

    def headers(self) -> Carrier:
        context = self._span.get_span_context()
        flags = int(context.trace_flags)
        parent = f"00-{format_trace_id(context.trace_id)}-{format_span_id(context.span_id)}-{flags:02x}"
        state = context.trace_state.to_header()
        return (("traceparent", parent), ("tracestate", state)) if state else (("traceparent", parent),)

    def current(self) -> contextlib.AbstractContextManager[Span]:
        return _Current(self)

    @property
    def ids(self) -> tuple[str, str] | None:
        context = self._span.get_span_context()
        return format_trace_id(context.trace_id), format_span_id(context.span_id)


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
        # Not the global provider: two daemons in one process (the tests) keep theirs apart.
        self._ids = _Ids()
        self._provider = TracerProvider(resource=resource, id_generator=self._ids)
        self._batcher = BatchSpanProcessor(
            _Counting(exporter, self._export_done),
            max_queue_size=max_queue,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(MAX_BATCH, max_queue),
        )
        self._provider.add_span_processor(_Bounded(self, self._batcher))
        self.tracer = self._provider.get_tracer("netclaw", __version__)

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
        context = Context()  # never whatever span is current here: a root starts afresh
        remote = _remote(parent)
        if remote is not None:
            context = trace.set_span_in_context(NonRecordingSpan(remote), context)
        linked = _remote(link)
        links = [Link(linked)] if linked is not None else None
        self._ids.preset.trace_id = trace_id if remote is None else None
        try:
            span = self.tracer.start_span(
                name, context=context, attributes=attributes, links=links, start_time=start_ns
            )
        finally:
            self._ids.preset.trace_id = None
        return LiveSpan(self, span)

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
        return self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        # The SDK's shutdown waits for a last export: a collector that is down must not hold
        # the daemon's stop for the exporter's whole timeout.
        stopping = threading.Thread(target=self._provider.shutdown, name="netclaw-traces-stop", daemon=True)
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

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other)


class _Preset(threading.local):
    trace_id: int | None = None


class _Ids(RandomIdGenerator):
    """Random ids, but the trace id a root is given (:meth:`Running.root`), on its thread."""

    def __init__(self) -> None:
        self.preset = _Preset()

    def generate_trace_id(self) -> int:
        preset = self.preset.trace_id
        return preset if preset is not None else super().generate_trace_id()


class _Bounded(SpanProcessor):
    """The batching processor behind our own bound: a span that finds ``max_queue`` spans
    waiting is dropped here, and counted (the SDK's queue drops the oldest, uncounted)."""

    def __init__(self, tracing: Running, batcher: BatchSpanProcessor) -> None:
        self._tracing = tracing
        self._batcher = batcher

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled and self._tracing.admit():
            self._batcher.on_end(span)

    def shutdown(self) -> None:
        self._batcher.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batcher.force_flush(timeout_millis)


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
