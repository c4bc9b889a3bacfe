"""What a session tells its subscribers: output events and the filter bit mask (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntFlag
from typing import Any


class OutputFilter(IntFlag):
    NONE = 0
    TEXT = 1
    TEXT_STREAMING = 2
    THINKING = 4
    TOOL_CALLS = 8
    USAGE = 16
    FILES = 32
    ALL = TEXT | TEXT_STREAMING | THINKING | TOOL_CALLS | USAGE | FILES

    @classmethod
    def parse(cls, spec: str | None) -> OutputFilter:
        """``"text,usage"`` → TEXT|USAGE. Empty or None → TEXT (the assembled reply)."""
        if spec is None or not spec.strip():
            return cls.TEXT
        result = cls.NONE
        for raw in spec.split(","):
            name = raw.strip().upper()
            if not name:
                continue
            if name not in _FILTER_NAMES:
                known = ", ".join(n.lower() for n in _FILTER_NAMES)
                raise ValueError(f"unknown output filter {raw.strip()!r} (known: {known})")
            result |= cls[name]
        return result


_FILTER_NAMES = ("TEXT", "TEXT_STREAMING", "THINKING", "TOOL_CALLS", "USAGE", "FILES", "ALL")

# Events gated by a filter bit; every other event is lifecycle and goes to everyone.
EVENT_FILTER: Mapping[str, OutputFilter] = {
    "text": OutputFilter.TEXT,
    "text_delta": OutputFilter.TEXT_STREAMING,
    "thinking": OutputFilter.THINKING,
    "tool_call": OutputFilter.TOOL_CALLS,
    "tool_result": OutputFilter.TOOL_CALLS,
    "usage": OutputFilter.USAGE,
    "file": OutputFilter.FILES,
}

LIFECYCLE_EVENTS = frozenset(
    {"joined", "turn_completed", "title", "error", "compaction", "history_trimmed", "phase"}
)

# A slow subscriber may lose (after coalescing) only these; never text or lifecycle.
DROPPABLE_EVENTS = frozenset({"text_delta", "usage"})


@dataclass(frozen=True, slots=True)
class Output:
    event: str
    data: Mapping[str, Any]  # always carries "session_id"

    def wanted_by(self, mask: OutputFilter) -> bool:
        bit = EVENT_FILTER.get(self.event)
        return bit is None or bool(mask & bit)
