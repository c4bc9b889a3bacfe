"""Traces: what a turn did and where its time went, as OpenTelemetry spans, in one place.

Off by default (``telemetry.traces``). When off nothing of OpenTelemetry is imported and
every call here is a no-op costing an attribute read: :data:`OFF` is the daemon's
:class:`Tracing`, its spans are :data:`NO_SPAN`. When on, the daemon imports
:mod:`netclaw.process.otel` (the ``telemetry`` extra), whose tracer is the SDK's provider with the OTLP/HTTP exporter behind a bounded queue: spans are
exported by the SDK's own thread, so a collector that is slow or down never blocks a turn;
a span that finds the queue full is dropped and counted (``/metrics``:
``netclaw_trace_spans_dropped``), and so are the spans of an export the collector refused.

Who makes spans (never the pure session core, which has no clock): the session's shell
starts a turn's root span and the spans it waits in on its own thread (queue, approvals,
the journal), handing the turn's span to the work it starts on the I/O loop; there
:meth:`Span.current` makes it the task's current span, so :func:`span` (a tool call, a
model call) nests under it and :func:`inject` puts its W3C ``traceparent`` on outgoing
requests. A span's children are made only under a span of a running tracer: code below
the shell (tools, providers) needs no tracer of its own, and in a daemon with traces off
never makes one.

Context in: :func:`received` holds the ``traceparent`` (and ``tracestate``) an HTTP request
came with, for the duration of its handling; whatever that request
admits carries it (:func:`carrier`) to the turn, whose root span then continues that trace.

The GenAI semantic conventions' names are used as such (``gen_ai.*``); netclaw's own
attributes are ``netclaw.*``. See docs/telemetry.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextvars import ContextVar

__all__ = [
    "INSTALL_HINT",
    "NO_SPAN",
    "OFF",
    "AttributeValue",
    "Attributes",
    "Carrier",
    "Span",
    "Tracing",
    "active",
    "carrier",
    "current_ids",
    "current_span",
    "inject",
    "outgoing",
    "parse_traceparent",
    "received",
    "span",
    "turn_trace_id",
]

# What to install when traces are on without OpenTelemetry (start-up and `netclaw doctor` say it).
INSTALL_HINT = "pip install 'netclaw[telemetry]' (in a checkout: pip install '.[telemetry]')"

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue]
# W3C trace context as headers: (("traceparent", "00-…"), ("tracestate", "…")?). A pure value:
# commands carry it from a request to the turn it admitted.
Carrier = tuple[tuple[str, str], ...]

# version-traceid-parentid-flags; all-zero ids are invalid (W3C trace context §3.2).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_MAX_TRACESTATE = 512


class Span:
    """A span that records nothing: what every call makes while traces are off, and what a
    running tracer's span (:class:`_LiveSpan`) refines. Safe from any thread."""

    __slots__ = ()

    recording = False
    captures = False  # telemetry.capture_content: message and tool text may go on it (redacted)

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute (None: left unset)."""

    def update(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        for key, value in attributes.items():
            self.set(key, value)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Something that happened at one moment of the span."""

    def fail(self, error: BaseException | str, description: str | None = None) -> None:
        """The span's work failed: its status ERROR, ``error.type`` the exception's type (or
        its ``code``) or the string given, a short kind such as ``timeout``."""

    def end(self) -> None:
        """Done (a second call does nothing)."""

    def child(
        self,
        name: str,
        attributes: Attributes | None = None,
        *,
        client: bool = False,
        start_ns: int | None = None,
    ) -> Span:
        """A span under this one, started now (or at ``start_ns``, ``time.time_ns()``), ended
        by whoever holds it; ``client``: a call to another service."""
        return self

    def headers(self) -> Carrier:
        """This span's W3C context, for what it starts elsewhere (a sub-agent's turn)."""
        return ()

    def current(self) -> contextlib.AbstractContextManager[Span]:
        """This span is the current one for the block (in this task or thread): :func:`span`
        nests under it, :func:`inject` sends its context. (Here: nothing to do.)"""
        return _UNCHANGED

    @property
    def ids(self) -> tuple[str, str] | None:
        """(trace id, span id) in hex, as logs and the W3C header write them."""
        return None


NO_SPAN = Span()
_UNCHANGED = contextlib.nullcontext(NO_SPAN)  # stateless and reentrant: one for every caller
current_span: ContextVar[Span] = ContextVar("netclaw_span", default=NO_SPAN)
_inbound: ContextVar[Carrier] = ContextVar("netclaw_inbound_trace", default=())


class Tracing:
    """A daemon's tracer: :data:`OFF`, or a running one from :meth:`start`."""

    enabled = False
    capture_content = False

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
        """A span that starts a trace, or continues the one ``parent`` names (W3C headers);
        ``link``: a trace it is related to (a sub-agent's parent turn). ``start_ns``: when
        it began (``time.time_ns()``), if before now. ``trace_id``: the trace a new one
        starts (a turn's, derived from what the journal holds, so the turn resumed after a
        restart goes on in it); None: a random one."""
        return NO_SPAN

    def dropped(self) -> Mapping[str, int]:
        """Spans lost, by why: ``queue_full``, ``export_failed``."""
        return {"queue_full": 0, "export_failed": 0}

    def exported(self) -> int:
        return 0

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now; False if that took longer than ``timeout_s``."""
        return True

    def shutdown(self) -> None:
        """Export what is queued (for a few seconds at most), then stop."""


OFF = Tracing()


def turn_trace_id(session_id: str, message_id: str) -> int:
    """The trace a turn that continues no caller's trace runs in: derived from its message's
    id (random, and in the journal), so the same turn resumed after a restart, or on another
    node, lands in the same trace."""
    digest = hashlib.sha256(f"netclaw turn {session_id} {message_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a W3C ``traceparent``; None if malformed."""
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None or match.group(1) == "ff":
        return None
    trace_id, span_id = int(match.group(2), 16), int(match.group(3), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, int(match.group(4), 16)


# -- the current span, for code below the shell -----------------------------------------------


def active() -> bool:
    """Whether a span is current here (so :func:`span` makes one): callers skip building
    names and attributes when not."""
    return current_span.get().recording


@contextlib.contextmanager
def span(name: str, attributes: Attributes | None = None, *, client: bool = False) -> Iterator[Span]:
    """A child of the current span, current itself for the block, ended after it (failed if
    the block raises). :data:`NO_SPAN` when there is no current span (traces off, or work no
    turn started)."""
    parent = current_span.get()
    if not parent.recording:
        yield NO_SPAN
        return
    child = parent.child(name, attributes, client=client)
    try:
        with child.current():
            yield child
    except BaseException as exc:
        child.fail(exc)
        raise
    finally:
        child.end()


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current span's W3C context on an outgoing request's headers (none: unchanged)."""
    here = current_span.get()
    if here.recording:
        headers.update(here.headers())


def outgoing() -> Carrier:
    """The current span's W3C context, for a request that carries it in its own way (an MCP
    call's ``_meta``); empty outside a span."""
    return current_span.get().headers()


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span, for log lines; None outside one."""
    here = current_span.get()
    return here.ids if here.recording else None


@contextlib.contextmanager
def received(headers: Mapping[str, str]) -> Iterator[None]:
    """While an HTTP request is handled: the W3C context it came with (if well-formed)."""
    parent = headers.get("traceparent")
    if parent is None or parse_traceparent(parent) is None:
        yield
        return
    found: Carrier = (("traceparent", parent.strip()),)
    state = headers.get("tracestate")
    if state and len(state) <= _MAX_TRACESTATE:
        found += (("tracestate", state.strip()),)
    token = _inbound.set(found)
    try:
        yield
    finally:
        _inbound.reset(token)


def carrier() -> Carrier:
    """What whatever is admitted now continues: the trace an HTTP request came with, else the
    current span (a tool's, spawning a sub-agent), else nothing."""
    return _inbound.get() or current_span.get().headers()
