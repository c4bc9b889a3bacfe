"""Pure functions over chat messages: token accounting, trimming, orphan sweep.

No I/O and no actor or network imports: everything here is testable in isolation.
"""

from netclaw.history.sweep import INTERRUPTED_TEXT, SweepResult, sweep_orphans, synthetic_result
from netclaw.history.tokens import (
    FALLBACK_ENCODING,
    OFFLINE_ENCODING,
    BudgetCalibration,
    TokenCounter,
    fallback_count,
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
    "INTERRUPTED_TEXT",
    "OFFLINE_ENCODING",
    "BudgetCalibration",
    "SweepResult",
    "TokenCounter",
    "TrimResult",
    "fallback_count",
    "is_breadcrumb",
    "is_pinned",
    "make_breadcrumb",
    "sweep_orphans",
    "synthetic_result",
    "trim_fraction_target",
    "trim_to_budget",
]
