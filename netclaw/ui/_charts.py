"""Charts as SVG drawn on the server (pure): no chart library, no script, readable without
JavaScript. Every chart comes with its numbers as a table beside it (screen readers, no
CSS), and each bar segment carries a ``<title>`` (a tooltip naming the value).

:func:`usage_view` turns the journal's usage rows (per UTC day, model and session) into
the charts of the usage page: tokens (uncached input, cache reads, output) and the share
of input read from the provider's cache; and, once prices are configured for the models
(``models.<name>.price``), what the calls cost (each row's ``cost``). Without prices the
page says money is not counted, rather than draw charts of zeros.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

WIDTH = 640
ROW_HEIGHT = 26
BAR_AREA = 180  # height of a vertical chart's bars
LABEL_WIDTH = 170  # horizontal charts: the labels' column


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    css: str  # the class that colours it (ui.css)


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    values: tuple[float, ...]  # one per series, stacked in series order

    @property
    def total(self) -> float:
        return sum(self.values)


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    unit: str  # "tokens", "%", "cost"
    series: tuple[Series, ...]
    bars: tuple[Bar, ...]
    horizontal: bool = False
    max_value: float | None = None  # fixed scale (percentages); None: the largest bar

    def svg(self) -> Markup:
        return _horizontal(self) if self.horizontal else _vertical(self)


TOKEN_SERIES = (
    Series("uncached input", "s-input"),
    Series("cache reads", "s-cache"),
    Series("output", "s-output"),
)
CACHE_SERIES = (Series("read from cache", "s-cache"),)
COST_SERIES = (Series("cost", "s-cost"),)


def fmt(value: float, unit: str = "tokens") -> str:
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "cost":
        return f"{value:,.4f}" if value < 1 else f"{value:,.2f}"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:,.0f}"


def _tip(chart: Chart, bar: Bar, index: int) -> str:
    series = chart.series[index]
    return f"{bar.label} · {series.name}: {fmt(bar.values[index], chart.unit)} {'' if chart.unit == '%' else chart.unit}".strip()


def _scale(chart: Chart) -> float:
    top = chart.max_value or max((b.total for b in chart.bars), default=0.0)
    return top if top > 0 else 1.0


def _open(chart: Chart, height: int) -> list[str]:
    return [
        f'<svg class="chart" id="{escape(chart.id)}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-labelledby="{escape(chart.id)}-t" preserveAspectRatio="xMinYMin meet">',
        f'<title id="{escape(chart.id)}-t">{escape(chart.title)}</title>',
    ]


def _vertical(chart: Chart) -> Markup:
    top, bottom = 16, 36
    height = top + BAR_AREA + bottom
    parts = _open(chart, height)
    scale = _scale(chart)
    n = max(len(chart.bars), 1)
    slot = (WIDTH - 50) / n
    width = max(min(slot * 0.7, 60), 2)
    parts.append(f'<text class="axis" x="0" y="{top + 4}">{escape(fmt(scale, chart.unit))}</text>')
    parts.append(
        f'<line class="base" x1="46" x2="{WIDTH}" y1="{top + BAR_AREA}" y2="{top + BAR_AREA}"></line>'
    )
    every = max(1, n // 10)  # at most ~10 labels under the bars
    for i, bar in enumerate(chart.bars):
        x = 50 + i * slot + (slot - width) / 2
        y = float(top + BAR_AREA)
        for k, value in enumerate(bar.values):
            h = BAR_AREA * value / scale
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect class="{chart.series[k].css}" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                f'height="{h:.1f}"><title>{escape(_tip(chart, bar, k))}</title></rect>'
            )
        if i % every == 0:
            parts.append(
                f'<text class="label" x="{x + width / 2:.1f}" y="{top + BAR_AREA + 16}" '
                f'text-anchor="middle">{escape(bar.label[-5:])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _horizontal(chart: Chart) -> Markup:
    height = max(len(chart.bars), 1) * ROW_HEIGHT + 8
    parts = _open(chart, height)
    scale = _scale(chart)
    room = WIDTH - LABEL_WIDTH - 70
    for i, bar in enumerate(chart.bars):
        y = 4 + i * ROW_HEIGHT
        label = bar.label if len(bar.label) <= 26 else bar.label[:25] + "…"
        parts.append(f'<text class="label" x="0" y="{y + 15}">{escape(label)}</text>')
        x = float(LABEL_WIDTH)
        for k, value in enumerate(bar.values):
            w = room * value / scale
            if w <= 0:
                continue
            parts.append(
                f'<rect class="{chart.series[k].css}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                f'height="{ROW_HEIGHT - 8}"><title>{escape(_tip(chart, bar, k))}</title></rect>'
            )
            x += w
        parts.append(
            f'<text class="value" x="{x + 6:.1f}" y="{y + 15}">{escape(fmt(bar.total, chart.unit))}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


# -- the usage page -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageView:
    days: int
    total_input: int
    total_output: int
    total_cache_read: int
    turns: int
    charts: tuple[Chart, ...]
    cost_recorded: bool  # prices are configured: the rows' cost is money spent
    total_cost: float | None = None
    currency: str = "USD"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cache_share(self) -> float:
        return 100 * self.total_cache_read / self.total_input if self.total_input else 0.0


def _token_bar(label: str, row: Mapping[str, Any]) -> Bar:
    inp, cached, out = int(row["input_tokens"]), int(row["cache_read_tokens"]), int(row["output_tokens"])
    return Bar(label, (float(max(inp - cached, 0)), float(cached), float(out)))


def _cost(row: Mapping[str, Any]) -> float | None:
    value = row.get("cost")
    return float(value) if isinstance(value, int | float) else None


def day_range(today: dt.date, days: int) -> list[str]:
    return [(today - dt.timedelta(days=days - 1 - i)).isoformat() for i in range(days)]


def usage_view(
    by_day: Sequence[Mapping[str, Any]],
    by_model: Sequence[Mapping[str, Any]],
    by_session: Sequence[Mapping[str, Any]],
    *,
    today: dt.date,
    days: int,
    top_sessions: int = 10,
    priced: bool = True,
    currency: str = "USD",
) -> UsageView:
    """The usage page's charts from the rows of ``GET /api/usage`` (``to_json`` form), each
    list already limited to the period; days without turns are drawn as empty."""
    known = {str(r["key"]): r for r in by_day}
    zero = {"input_tokens": 0, "cache_read_tokens": 0, "output_tokens": 0}
    day_rows = [(d, known.get(d, zero)) for d in day_range(today, days)]
    sessions = sorted(by_session, key=lambda r: -(int(r["input_tokens"]) + int(r["output_tokens"])))
    charts = [
        Chart(
            "tokens-by-day",
            "Tokens by day (UTC)",
            "tokens",
            TOKEN_SERIES,
            tuple(_token_bar(d, r) for d, r in day_rows),
        ),
        Chart(
            "cache-by-day",
            "Share of input read from the provider's cache, by day",
            "%",
            CACHE_SERIES,
            tuple(
                Bar(
                    d,
                    (
                        100 * int(r["cache_read_tokens"]) / int(r["input_tokens"])
                        if int(r["input_tokens"])
                        else 0.0,
                    ),
                )
                for d, r in day_rows
            ),
            max_value=100.0,
        ),
        Chart(
            "tokens-by-model",
            "Tokens by model",
            "tokens",
            TOKEN_SERIES,
            tuple(_token_bar(str(r["key"]), r) for r in by_model),
            horizontal=True,
        ),
        Chart(
            "tokens-by-session",
            f"Tokens by session (the {top_sessions} largest)",
            "tokens",
            TOKEN_SERIES,
            tuple(_token_bar(str(r["key"]), r) for r in sessions[:top_sessions]),
            horizontal=True,
        ),
    ]
    costs = [c for c in (_cost(r) for r in by_day) if c is not None]
    cost_recorded = priced and bool(costs)
    if cost_recorded:
        day_costs = {str(r["key"]): _cost(r) or 0.0 for r in by_day}
        charts += [
            Chart(
                "cost-by-day",
                "Cost by day (UTC)",
                "cost",
                COST_SERIES,
                tuple(Bar(d, (day_costs.get(d, 0.0),)) for d in day_range(today, days)),
            ),
            Chart(
                "cost-by-model",
                "Cost by model",
                "cost",
                COST_SERIES,
                tuple(Bar(str(r["key"]), (_cost(r) or 0.0,)) for r in by_model),
                horizontal=True,
            ),
            Chart(
                "cost-by-session",
                f"Cost by session (the {top_sessions} largest)",
                "cost",
                COST_SERIES,
                tuple(
                    Bar(str(r["key"]), (_cost(r) or 0.0,))
                    for r in sorted(by_session, key=lambda r: -(_cost(r) or 0.0))[:top_sessions]
                ),
                horizontal=True,
            ),
        ]
    return UsageView(
        days=days,
        total_input=sum(int(r["input_tokens"]) for r in by_day),
        total_output=sum(int(r["output_tokens"]) for r in by_day),
        total_cache_read=sum(int(r["cache_read_tokens"]) for r in by_day),
        turns=sum(int(r["turns"]) for r in by_day),
        charts=tuple(charts),
        cost_recorded=cost_recorded,
        total_cost=sum(costs) if cost_recorded else None,
        currency=currency,
    )
