"""What the pages show, computed from the gateway's reads (pure: no I/O, no aiohttp).

- :func:`page_window` pages the session listing (the journal filters and pages it: a page
  of 10,000 sessions reads 50 rows).
- :func:`transcript_entries` turns a session's recorded messages into what a person
  reads: messages, tool calls with their results (collapsed), failed turns, and a
  marker where the model's view begins (after a trim, a compaction or a reset).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

from netclaw.messages import ChatMessage, MessageKind, unmarked

PER_PAGE = 50
PHASES = ("recovering", "ready", "processing", "compacting", "passivating", "passivated")


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of the sessions page."""

    id: str
    channel: str
    title: str | None
    phase: str
    turns: int
    last_activity: float
    resident: bool
    pending: int = 0
    model: str | None = None  # resident sessions: the model it calls
    context_tokens: int | None = None  # resident sessions: the model-visible context now
    context_window: int | None = None
    tokens_today: int = 0
    cost_today: float | None = None  # recorded money, when prices are configured


@dataclass(frozen=True, slots=True)
class Page:
    rows: tuple[Listed, ...]
    total: int  # sessions matching the filter
    page: int  # 1-based
    pages: int
    q: str = ""
    channel: str = ""
    phase: str = ""
    channels: tuple[str, ...] = ()  # every channel present, for the filter's choices


def page_window(total: int, page: int, per_page: int = PER_PAGE) -> tuple[int, int, int]:
    """(the page, clamped to 1..pages; how many pages; the offset of its first row)."""
    pages = max(1, math.ceil(total / per_page))
    page = min(max(page, 1), pages)
    return page, pages, (page - 1) * per_page


# -- one session's transcript -------------------------------------------------------------------

EntryKind = Literal["user", "assistant", "tool", "failure", "marker", "queued"]


@dataclass(frozen=True, slots=True)
class ToolEntry:
    id: str
    name: str
    arguments: str
    result: str | None = None  # None: no result recorded (yet)
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class SpeechEntry:
    """A voice note of a user message: what was heard in it (``text``, ``language``), or
    why nothing was (``error``), or neither while it waits for its turn."""

    name: str
    text: str | None = None
    language: str | None = None
    error: str | None = None


def speech_of(message: ChatMessage) -> tuple[SpeechEntry, ...]:
    return tuple(
        SpeechEntry(f.name, f.transcript.text, f.transcript.language, f.transcript.error)
        if f.transcript is not None
        else SpeechEntry(f.name)
        for f in message.files
        if f.kind == "audio"
    )


@dataclass(frozen=True, slots=True)
class Entry:
    kind: EntryKind
    text: str = ""
    ts: float = 0.0
    who: str | None = None  # user: the sender as people call them
    thinking: str | None = None
    tools: tuple[ToolEntry, ...] = ()
    id: str = ""
    speech: tuple[SpeechEntry, ...] = ()  # user: its voice notes, as transcribed


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where the model's view of a session begins, and why earlier turns are out of it."""

    kept_from: int  # index into the transcript
    compactions: int = 0
    trimmed: bool = False
    summarized: bool = False
    resets: int = 0

    def text(self) -> str:
        reasons = []
        if self.summarized:
            reasons.append(f"summarised by compaction (compactions so far: {self.compactions})")
        if self.trimmed:
            reasons.append("trimmed to fit the window")
        if self.resets:
            reasons.append(f"reset ({self.resets} time(s))")
        why = "; ".join(reasons) or "out of the window"
        return f"The model no longer sees the messages above: {why}."


def pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def transcript_entries(
    messages: Sequence[ChatMessage],
    *,
    failures: Mapping[str, str] | None = None,
    boundary: Boundary | None = None,
    queued: Sequence[ChatMessage] = (),
) -> list[Entry]:
    """Messages as people read them. ``failures`` maps a user message id to what became
    of its turn when it ended without an answer; ``boundary`` places the marker."""
    entries: list[Entry] = []
    results = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
    failures = failures or {}
    open_failure: str | None = None
    for index, m in enumerate(messages):
        if boundary is not None and index == boundary.kept_from and index > 0:
            entries.append(Entry("marker", boundary.text()))
        if m.kind is not MessageKind.CHAT or m.role in ("system", "tool"):
            continue  # markers of the model's view, and results shown with their call
        if m.role == "user":
            if open_failure is not None:
                entries.append(Entry("failure", open_failure))
            open_failure = failures.get(m.id)
            who = m.user_name or m.user
            entries.append(Entry("user", unmarked(m.content), m.ts, who, id=m.id, speech=speech_of(m)))
            continue
        tools = tuple(
            ToolEntry(
                c.id,
                c.name,
                pretty_arguments(c.arguments),
                results[c.id].content if c.id in results else None,
                results[c.id].is_error if c.id in results else False,
            )
            for c in m.tool_calls
        )
        entries.append(Entry("assistant", m.content, m.ts, thinking=m.thinking, tools=tools, id=m.id))
    if open_failure is not None:
        entries.append(Entry("failure", open_failure))
    entries += [
        Entry("queued", unmarked(m.content), m.ts, m.user_name or m.user, id=m.id, speech=speech_of(m))
        for m in queued
    ]
    return entries


@dataclass(frozen=True, slots=True)
class ContextLine:
    role: str
    kind: str
    text: str
    tools: tuple[ToolEntry, ...] = field(default_factory=tuple)


def context_lines(messages: Sequence[ChatMessage]) -> list[ContextLine]:
    """What the model sees, message by message (system prompt, summary, breadcrumb, the rest)."""
    return [
        ContextLine(
            m.role,
            m.kind.value,
            m.content,
            tuple(ToolEntry(c.id, c.name, pretty_arguments(c.arguments)) for c in m.tool_calls),
        )
        for m in messages
    ]


def when(ts: float, now: float) -> str:
    """A time as people scan a list: "12 s ago", "3 min ago", "5 h ago", else the UTC date."""
    if ts <= 0:
        return "never"
    age = now - ts
    if age < 0:
        return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if age < 60:
        return f"{age:.0f} s ago"
    if age < 3600:
        return f"{age / 60:.0f} min ago"
    if age < 86400:
        return f"{age / 3600:.0f} h ago"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def path_id(session_id: str) -> str:
    """A session id as one segment of a URL path: a sub-agent's ``agent:cli:c1/1`` keeps
    its ``/`` as ``%2F`` (raw, it would be two segments, and no page)."""
    return quote(session_id, safe=":")


def utc(ts: float | None) -> str:
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
