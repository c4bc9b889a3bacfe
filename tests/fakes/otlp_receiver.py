"""An OTLP/HTTP trace receiver: what a collector (Jaeger, Tempo, the OpenTelemetry
Collector) is to netclaw, on 127.0.0.1, decoding each ``POST /v1/traces`` body as an
``ExportTraceServiceRequest`` protobuf with ``opentelemetry-proto`` — the wire format, not
the SDK's objects. ``refuse``: answer 503 to every export (a collector that is up but
failing). Use through :class:`OtlpReceiverThread` (its own loop in a daemon thread), or
as a process of its own (the benchmarks: its CPU off the daemon's)::

    python -m tests.fakes.otlp_receiver

which prints ``LISTENING http://127.0.0.1:PORT`` and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes._loop_thread import LoopThread


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector got it (ids in lower-case hex, as W3C headers write them)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: tuple[str, ...]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        events=tuple(e.name for e in span.events),
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        resource=resource,
                    )
                )
    return spans


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.exports = 0  # POSTs received (refused ones included)
        self.refuse = False
        self._runner: web.AppRunner | None = None
        self._lock = threading.Lock()

    async def start(self) -> str:
        app = web.Application(client_max_size=32 * 1024**2)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _traces(self, request: web.Request) -> web.Response:
        self.exports += 1
        if request.content_type != "application/x-protobuf":
            return web.Response(
                status=415, text=f"expected application/x-protobuf, got {request.content_type}"
            )
        body = await request.read()
        if self.refuse:
            return web.Response(status=503, text="collector overloaded")
        spans = decode(body)  # a malformed body raises: the test sees a 500 and no spans
        with self._lock:
            self.spans.extend(spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


class OtlpReceiverThread(LoopThread[OtlpReceiver]):
    def __init__(self) -> None:
        super().__init__(OtlpReceiver(), "otlp-receiver")
        self.base_url = ""

    def start(self) -> str:
        self.base_url = super().start()
        return self.base_url

    @property
    def spans(self) -> list[ReceivedSpan]:
        return self.read(lambda server: list(server.spans))

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def refuse(self, value: bool = True) -> None:
        def set_refuse(server: OtlpReceiver) -> None:
            server.refuse = value

        self.read(set_refuse)


async def _serve() -> None:
    receiver = OtlpReceiver()
    url = await receiver.start()
    print(f"LISTENING {url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    print(f"received {len(receiver.spans)} spans in {receiver.exports} exports", file=sys.stderr, flush=True)
    await receiver.stop()


if __name__ == "__main__":
    asyncio.run(_serve())
