"""Pure functions over chat messages: token accounting, trimming, orphan sweep.

No I/O and no actor or network imports: everything here is testable in isolation.
"""

from netclaw.history.compaction import (
    FLUSH_KINDS,
    FLUSH_MARKER,
    MEMORY_KINDS,
    REQUIRED_SECTIONS,
    SUMMARY_MARKER,
    SUMMARY_MAX_CHARS,
    apply_clearing,
    bound_summary,
    clearable_results,
    flush_request,
    missing_sections,
    parse_flush,
    placeholder,
    render_for_summary,
    summary_boundary,
    summary_message,
    summary_request,
)
from netclaw.history.sweep import INTERRUPTED_TEXT, SweepResult, sweep_orphans, synthetic_result
from netclaw.history.tokens import (
    FALLBACK_ENCODING,
    OFFLINE_ENCODING,
    BudgetCalibration,
    TokenCounter,
    fallback_count,
    preload_encoding,
)
from netclaw.history.trim import (
    BREADCRUMB_TEXT,
    TrimResult,
    is_breadcrumb,
    is_pinned,
    make_breadcrumb,
    trim_fraction_target,
    trim_to_budget,
)

__all__ = [
    "BREADCRUMB_TEXT",
    "FALLBACK_ENCODING",
    "FLUSH_KINDS",
    "FLUSH_MARKER",
    "INTERRUPTED_TEXT",
    "MEMORY_KINDS",
    "OFFLINE_ENCODING",
    "REQUIRED_SECTIONS",
    "SUMMARY_MARKER",
    "SUMMARY_MAX_CHARS",
    "BudgetCalibration",
    "SweepResult",
    "TokenCounter",
    "TrimResult",
    "apply_clearing",
    "bound_summary",
    "clearable_results",
    "fallback_count",
    "flush_request",
    "is_breadcrumb",
    "is_pinned",
    "make_breadcrumb",
    "missing_sections",
    "parse_flush",
    "placeholder",
    "preload_encoding",
    "render_for_summary",
    "summary_boundary",
    "summary_message",
    "summary_request",
    "sweep_orphans",
    "synthetic_result",
    "trim_fraction_target",
    "trim_to_budget",
]
