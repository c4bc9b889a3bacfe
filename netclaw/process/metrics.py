"""What ``/metrics`` counts (Prometheus text format, prometheus-client), in one place.

One :class:`Metrics` per daemon, with its own registry (so two daemons in one process, as
in the tests, never share counts). Sessions and the journal update counters and
histograms as things happen, from whichever thread they run on (prometheus-client is
thread-safe); the daemon supplies families that are read at scrape time (resident
sessions, channels, MCP servers, the cluster's counters). Only counts: no content, no
ids. A node of a cluster labels every series with ``node``, so the nodes' series stay
apart wherever they are gathered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from netclaw.process.traces import Tracing

__all__ = ["CONTENT_TYPE", "GaugeMetricFamily", "Metrics", "gauge"]

disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series are only noise here

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
WAIT_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600)


class Metrics:
    def __init__(self) -> None:
        self.node: str | None = None  # set on a node of a cluster: every series gets node="..."
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter("netclaw_turns", "Turns ended, by outcome", ["outcome"], registry=r)
        self.turn_seconds = Histogram(
            "netclaw_turn_seconds",
            "Turn duration, from start to its record",
            buckets=TURN_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "netclaw_provider_tokens", "Tokens the provider reported, by kind", ["kind"], registry=r
        )
        self.cost = Counter(
            "netclaw_cost",
            "What model calls cost at the configured prices (spend.currency), by model",
            ["model"],
            registry=r,
        )
        self.compactions = Counter(
            "netclaw_compactions", "Compactions, by the tiers that ran", ["tiers"], registry=r
        )
        self.trims = Counter(
            "netclaw_history_trims", "Whole-turn trims of the model-visible history", registry=r
        )
        self.commit_seconds = Histogram(
            "netclaw_journal_commit_seconds", "One journal group commit", buckets=COMMIT_BUCKETS, registry=r
        )
        self.model_seconds = Histogram(
            "netclaw_model_seconds",
            "One model call, from the request to the whole answer (retries included), by model",
            ["model"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.first_token_seconds = Histogram(
            "netclaw_model_first_token_seconds",
            "From a model call's request to the first text it streamed, by model",
            ["model"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.tool_seconds = Histogram(
            "netclaw_tool_seconds",
            "One tool call that ran, by tool",
            ["tool"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "netclaw_queue_wait_seconds",
            "From a message's arrival to the start of its turn (queued behind another)",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.approvals_pending = Gauge(
            "netclaw_approvals_pending", "Tool calls waiting for a person", registry=r
        )
        self.reminders_fired = Counter("netclaw_reminders_fired", "Reminder fires admitted", registry=r)
        self.speech_seconds = Histogram(
            "netclaw_speech_seconds",
            "One speech call, retries included: transcription (a voice note heard) or synthesis "
            "(a reply spoken), by direction and model",
            ["direction", "model"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.speech_audio_seconds = Counter(
            "netclaw_speech_audio_seconds",
            "Seconds of audio transcribed, by direction (transcription)",
            ["direction"],
            registry=r,
        )

    def watch(self, families: Callable[[], Iterable[Metric]]) -> None:
        """Families read at scrape time (resident sessions, adapters, MCP servers, cluster)."""
        self.registry.register(_Scraped(families))

    def watch_traces(self, tracing: Tracing) -> None:
        """What the tracer exported and lost (telemetry.traces), read at scrape time."""

        def families() -> Iterable[Metric]:
            dropped = CounterMetricFamily(
                "netclaw_trace_spans_dropped",
                "Spans lost: the export queue was full, or the collector refused or never answered",
                labels=["reason"],
            )
            for reason, count in sorted(tracing.dropped().items()):
                dropped.add_metric([reason], count)
            exported = CounterMetricFamily("netclaw_trace_spans_exported", "Spans the collector took")
            exported.add_metric([], tracing.exported())
            return [dropped, exported]

        self.watch(families)

    def render(self) -> bytes:
        if self.node is None:
            return generate_latest(self.registry)
        return generate_latest(_Labelled(self.registry, "node", self.node))


def gauge(
    name: str, documentation: str, values: Mapping[tuple[str, ...], float], labels: tuple[str, ...] = ()
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(labels) if labels else None)
    for label_values, value in values.items():
        family.add_metric(list(label_values), value)
    return family


class _Scraped(Collector):
    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())

    def describe(self) -> Iterable[Metric]:
        return []  # names are only known at scrape time


class _Labelled:
    """A registry's families with one more label on every sample (what ``render`` writes)."""

    def __init__(self, registry: CollectorRegistry, name: str, value: str) -> None:
        self._registry = registry
        self._label = (name, value)

    def collect(self) -> Iterable[Metric]:
        name, value = self._label
        for family in self._registry.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                Sample(
                    s.name, {**s.labels, name: value}, s.value, s.timestamp, s.exemplar, s.native_histogram
                )
                for s in family.samples
            ]
            yield labelled
