"""netclaw.process.traces and its running tracer (netclaw.process.otel): W3C headers in and
out, spans only under a running tracer's span, the bounded export queue and its counts,
and log lines inside a span carrying its ids."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from netclaw.process import traces
from netclaw.process.logs import configure_logging
from netclaw.process.otel import Running
from tests.conftest import wait_until

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Kept(SpanExporter):
    """Keeps what it is given; ``gate`` (when set) holds each export until it opens."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.spans: list[ReadableSpan] = []
        self.gate = gate

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.gate is not None:
            self.gate.wait(10)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def test_traceparent_is_read_as_w3c_writes_it() -> None:
    assert traces.parse_traceparent(PARENT) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        1,
    )
    for bad in (
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the forbidden version
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx: y",
    ):
        assert traces.parse_traceparent(bad) is None, bad


def test_a_request_carries_its_trace_only_while_handled_and_only_if_well_formed() -> None:
    assert traces.carrier() == ()
    with traces.received({"traceparent": PARENT, "tracestate": "vendor=1"}):
        assert traces.carrier() == (("traceparent", PARENT), ("tracestate", "vendor=1"))
    assert traces.carrier() == ()
    with traces.received({"traceparent": "00-not-a-trace"}):
        assert traces.carrier() == ()


def test_with_traces_off_nothing_is_made_or_sent() -> None:
    root = traces.OFF.root("invoke_agent netclaw", parent=(("traceparent", PARENT),))
    assert root is traces.NO_SPAN and not root.recording
    with root.current(), traces.span("execute_tool x") as child:
        assert child is traces.NO_SPAN
        headers: dict[str, str] = {}
        traces.inject(headers)
        assert headers == {} and traces.current_ids() is None


def test_spans_nest_under_the_current_one_and_continue_the_callers_trace() -> None:
    kept = Kept()
    tracing = Running(exporter=kept, schedule_delay_ms=10)
    try:
        root = tracing.root("invoke_agent netclaw", parent=(("traceparent", PARENT),))
        with root.current():
            with traces.span("execute_tool lookup", {"gen_ai.tool.name": "lookup"}) as tool:
                headers: dict[str, str] = {}
                traces.inject(headers)
            try:
                with traces.span("execute_tool broken"):
                    raise RuntimeError("no")
            except RuntimeError:
                pass
        root.end()
        assert tracing.flush()
    finally:
        tracing.shutdown()
    by_name = {s.name: s for s in kept.spans}
    top = by_name["invoke_agent netclaw"]
    assert top.parent is not None and f"{top.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert f"{top.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    looked = by_name["execute_tool lookup"]
    assert looked.parent is not None and looked.parent.span_id == top.context.span_id
    assert headers == {"traceparent": f"00-{top.context.trace_id:032x}-{looked.context.span_id:016x}-01"}
    assert tool.ids == (f"{top.context.trace_id:032x}", f"{looked.context.span_id:016x}")
    broken = by_name["execute_tool broken"]
    assert broken.status.status_code.name == "ERROR" and broken.attributes["error.type"] == "RuntimeError"
    assert tracing.exported() == 3 and tracing.dropped() == {"queue_full": 0, "export_failed": 0}


def test_a_caller_that_does_not_sample_is_followed_and_its_trace_still_travels() -> None:
    kept = Kept()
    tracing = Running(exporter=kept, schedule_delay_ms=10)
    unsampled = PARENT[:-2] + "00"
    try:
        root = tracing.root("invoke_agent netclaw", parent=(("traceparent", unsampled),))
        with root.current(), traces.span("execute_tool lookup") as tool:
            headers: dict[str, str] = {}
            traces.inject(headers)
        root.end()
        root.end()  # a second end does nothing
        sampled = tracing.root("invoke_agent netclaw", trace_id=0xABC)
        sampled.event("compacted", {"tiers": ("trim",)})
        sampled.end()
        assert tracing.flush()
    finally:
        tracing.shutdown()
    assert tool.recording and headers["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert headers["traceparent"].endswith("-00")
    assert [s.name for s in kept.spans] == ["invoke_agent netclaw"]  # only the sampled one
    (exported,) = kept.spans
    assert exported.context.trace_id == 0xABC and exported.parent is None
    assert [(e.name, dict(e.attributes or {})) for e in exported.events] == [
        ("compacted", {"tiers": ("trim",)})
    ]
    assert tracing.exported() == 1


def test_a_value_otlp_cannot_carry_goes_as_text_and_never_costs_the_batch() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    class Encoding(Kept):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            encode_spans(spans)  # what the OTLP exporter does first: one bad value fails it all
            return super().export(spans)

    kept = Encoding()
    tracing = Running(exporter=kept, schedule_delay_ms=10)
    try:
        odd = tracing.root("odd", {"netclaw.weird": {"a": 1}})  # type: ignore[dict-item]
        odd.set("netclaw.list", ["x", None, 3])  # type: ignore[list-item]
        odd.event("noted", {"what": object()})  # type: ignore[dict-item]
        odd.end()
        tracing.root("plain", {"netclaw.turn": 1}).end()
        assert tracing.flush()
    finally:
        tracing.shutdown()
    by_name = {s.name: s for s in kept.spans}
    assert set(by_name) == {"odd", "plain"}
    odd_attributes = by_name["odd"].attributes or {}
    assert odd_attributes["netclaw.weird"] == "{'a': 1}"
    assert odd_attributes["netclaw.list"] == ("x", "None", 3)
    assert tracing.exported() == 2 and tracing.dropped()["export_failed"] == 0


def test_a_full_queue_drops_spans_and_counts_them() -> None:
    gate = threading.Event()
    kept = Kept(gate)
    tracing = Running(exporter=kept, max_queue=3, schedule_delay_ms=10)
    try:
        for n in range(8):  # the exporter is stuck: three wait, the rest find the queue full
            tracing.root(f"turn {n}").end()
        assert tracing.dropped()["queue_full"] == 5
        gate.set()
        wait_until(lambda: tracing.exported() == 3, what="the queued spans exported")
        tracing.root("after").end()  # room again
        assert tracing.flush() and tracing.dropped()["queue_full"] == 5
    finally:
        gate.set()
        tracing.shutdown()
    assert sorted(s.name for s in kept.spans) == ["after", "turn 0", "turn 1", "turn 2"]


def test_a_log_line_inside_a_span_carries_its_ids() -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    tracing = Running(exporter=Kept())
    try:
        log = logging.getLogger("netclaw.test")
        root = tracing.root("invoke_agent netclaw")
        with root.current():
            log.info("inside")
        log.info("outside")
        root.end()
    finally:
        tracing.shutdown()
        configure_logging("warning", "text")
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    assert (inside["trace_id"], inside["span_id"]) == root.ids
    assert "trace_id" not in outside


def test_a_turns_own_trace_is_derived_from_its_message_so_a_resumed_turn_finds_it() -> None:
    tracing = Running(exporter=Kept())
    try:
        own = traces.turn_trace_id("cli:a", "u_1")
        assert own == traces.turn_trace_id("cli:a", "u_1") != traces.turn_trace_id("cli:a", "u_2")
        first = tracing.root("invoke_agent netclaw", trace_id=own)
        again = tracing.root("invoke_agent netclaw", trace_id=own)  # after a restart
        assert first.ids is not None and again.ids is not None
        assert first.ids[0] == again.ids[0] == f"{own:032x}" and first.ids[1] != again.ids[1]
        called = tracing.root("invoke_agent netclaw", parent=(("traceparent", PARENT),), trace_id=own)
        assert called.ids is not None and called.ids[0] == "4bf92f3577b34da6a3ce929d0e0e4736"  # the caller's
        assert tracing.root("other").ids != first.ids  # no preset left behind
        for span in (first, again, called):
            span.end()
    finally:
        tracing.shutdown()
