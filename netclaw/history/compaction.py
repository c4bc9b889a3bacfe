"""Tiered compaction: the pure parts (no I/O, no LLM calls).

Phase 1 clears old tool results: the most recent tool interactions stay in
full, older results become a short placeholder that keeps the call id and the
tool name, so call/result pairs stay intact. Phase 2 (memory flush) and phase 3
(structured summary) are LLM calls run elsewhere; this module builds their
requests, parses and checks their answers, chooses the summary boundary and
builds the summary message that replaces the summarised part.

The boundary is always a real user message (a turn start), so no tool call is
separated from its results, and the newest turn is never summarised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from itertools import accumulate
from typing import Any, Final

from netclaw.messages import ChatMessage, MessageKind, model_text, turn_starts

SUMMARY_MARKER: Final = "[netclaw:compaction-summary]"
FLUSH_MARKER: Final = "[netclaw:memory-flush]"

REQUIRED_SECTIONS: Final[tuple[str, ...]] = (
    "Primary request and intent",
    "Key decisions",
    "Exact identifiers",
    "Work completed",
    "Pending tasks and open questions",
    "Current work and next step",
)
# Every kind a durable memory may have (the memory store checks it; defined once, here).
MEMORY_KINDS: Final[tuple[str, ...]] = ("fact", "decision", "action_item", "preference", "note")
# What the memory flush asks the model to extract; "note" is the `remember` tool's.
FLUSH_KINDS: Final[tuple[str, ...]] = ("fact", "decision", "action_item", "preference")
SUMMARY_MAX_CHARS: Final = 6000

SUMMARY_PREFIX: Final = "Summary of the earlier conversation (compacted):\n\n"
CLEARED_ID_PREFIX: Final = "cleared:"
TRIMMED_NOTE: Final = "[… trimmed to fit]"

MAX_MEMORIES: Final = 20
MEMORY_MAX_CHARS: Final = 500
RENDER_MAX_CHARS: Final = 2000  # per message content / tool arguments in the transcript

_REQUEST_ID_PREFIX = "compaction"


# --------------------------------------------------------------------------- phase 1


def is_cleared(message: ChatMessage) -> bool:
    """A tool result already replaced by :func:`placeholder`."""
    return message.role == "tool" and message.id.startswith(CLEARED_ID_PREFIX)


def clearable_results(
    messages: Sequence[ChatMessage], keep_recent: int, already_cleared: Collection[str]
) -> list[str]:
    """Tool-call ids of the tool results to clear, oldest first.

    An interaction is one assistant message with tool calls plus its results.
    The results of the ``keep_recent`` most recent interactions are kept; every
    other tool result is clearable unless its id is in ``already_cleared`` (or
    it already is a placeholder). Each id appears once.
    """
    interactions = [m for m in messages if m.role == "assistant" and m.tool_calls]
    recent = interactions[max(0, len(interactions) - keep_recent) :] if keep_recent > 0 else []
    kept = {call.id for m in recent for call in m.tool_calls}
    out: list[str] = []
    seen: set[str] = set()
    for m in messages:
        cid = m.tool_call_id
        if m.role != "tool" or cid is None or is_cleared(m):
            continue
        if cid in kept or cid in seen or cid in already_cleared:
            continue
        seen.add(cid)
        out.append(cid)
    return out


def placeholder(result: ChatMessage) -> ChatMessage:
    """The stand-in for a cleared tool result: same call id and tool, new message id.

    The new id means a token cache keyed by id never serves the old count.
    """
    name = result.name or "unknown tool"
    return ChatMessage(
        id=f"{CLEARED_ID_PREFIX}{result.id}",
        role="tool",
        content=f"[tool result cleared by compaction: {name} (call {result.tool_call_id})]",
        ts=result.ts,
        tool_call_id=result.tool_call_id,
        name=result.name,
        is_error=result.is_error,
    )


def apply_clearing(messages: Sequence[ChatMessage], cleared: Collection[str]) -> list[ChatMessage]:
    """Replace each tool result whose call id is in ``cleared`` by its placeholder.

    Everything else is returned as the same objects; applying twice is a no-op.
    """
    if not cleared:
        return list(messages)
    return [
        placeholder(m) if m.role == "tool" and m.tool_call_id in cleared and not is_cleared(m) else m
        for m in messages
    ]


# --------------------------------------------------------------------------- boundary


def summary_boundary(
    messages: Sequence[ChatMessage], keep_tokens: int, count_message: Callable[[ChatMessage], int]
) -> int | None:
    """Index of the first message kept after a summary; everything before is summarised.

    ``messages`` is the visible conversation (no system prompt, no prior
    summary). The boundary is a real user message: the newest turns whose
    tokens fit ``keep_tokens`` are kept, and always at least the newest turn.
    A turn start that would separate a tool result from its call (a drifted
    result in a malformed history) is never chosen. ``None`` when nothing older
    than the kept part exists: no or one turn, or all turns fit.
    """
    starts = turn_starts(messages)
    if len(starts) < 2:
        return None

    # A boundary b splits a pair when its call is before b and its result at or after b.
    owner: dict[str, int] = {}
    straddle = [0] * (len(messages) + 2)  # difference array over boundary positions
    for i, m in enumerate(messages):
        if m.role == "assistant":
            for call in m.tool_calls:
                owner.setdefault(call.id, i)
        elif m.role == "tool" and m.tool_call_id is not None:
            o = owner.get(m.tool_call_id)
            if o is not None and o < i:
                straddle[o + 1] += 1
                straddle[i + 1] -= 1
    blocked = list(accumulate(straddle))
    candidates = [s for s in starts[1:] if blocked[s] == 0]
    if not candidates:
        return None

    suffix = [0] * (len(messages) + 1)  # suffix[i] = tokens of messages[i:]
    for i in range(len(messages) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + count_message(messages[i])
    if suffix[starts[0]] <= keep_tokens:
        return None  # every turn fits: nothing to summarise
    for s in candidates:  # oldest first: the first that fits keeps the most
        if suffix[s] <= keep_tokens:
            return s
    return candidates[-1]  # the newest turn (or the smallest valid tail) is always kept


# --------------------------------------------------------------------------- transcript


def _truncate_middle(text: str, limit: int = RENDER_MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} chars omitted …]\n{text[-tail:]}"


def render_for_summary(messages: Sequence[ChatMessage]) -> str:
    """A compact plain-text transcript of ``messages`` for the summariser / flush model.

    Breadcrumbs and prior summaries are skipped (the prior summary is passed on
    its own); cleared tool results are noted in one short line.
    """
    lines: list[str] = []
    for m in messages:
        if m.kind is not MessageKind.CHAT:
            continue
        content = m.content.strip()
        if m.role == "user":
            who = (
                f"User {m.user_name} ({m.user})" if m.user_name else f"User ({m.user})" if m.user else "User"
            )
            if m.prior or m.files:  # the earlier thread and attached files, as the model read them
                content = model_text(replace(m, user_name=None)).strip()
            lines.append(f"{who}: {_truncate_middle(content)}")
        elif m.role == "assistant":
            if content:
                lines.append(f"Assistant: {_truncate_middle(content)}")
            for call in m.tool_calls:
                lines.append(f"Assistant called tool {call.name}({_truncate_middle(call.arguments.strip())})")
        elif m.role == "tool":
            name = m.name or "unknown tool"
            if is_cleared(m):
                lines.append(f"Tool {name} (call {m.tool_call_id}) returned: [result cleared earlier]")
                continue
            verb = "failed with" if m.is_error else "returned"
            lines.append(f"Tool {name} (call {m.tool_call_id}) {verb}: {_truncate_middle(content)}")
        elif content:  # a system note inside the conversation
            lines.append(f"System note: {_truncate_middle(content)}")
    return "\n\n".join(lines)


def _request_ts(messages: Sequence[ChatMessage]) -> float:
    return messages[-1].ts if messages else 0.0


# --------------------------------------------------------------------------- phase 2


def flush_request(
    messages_to_summarise: Sequence[ChatMessage], known: Sequence[tuple[int, str]] = ()
) -> list[ChatMessage]:
    """The memory-flush LLM request: extract durable memories as a JSON array. ``known``:
    memories already saved that relate to the conversation (number, text), shown so the
    model says which one an item changes instead of adding a contradiction beside it."""
    kinds = ", ".join(f'"{k}"' for k in FLUSH_KINDS)
    instructions = (
        f"{FLUSH_MARKER}\n"
        "You extract durable memories from a conversation between a user and an AI assistant, "
        "before the conversation is summarised and its details are lost.\n\n"
        "From the transcript in the next message, extract what would be worth knowing in a later, "
        "separate conversation: key facts (about the user, their projects, systems and environment), "
        "decisions that were made, action items still to do, and the user's preferences.\n\n"
        "Rules:\n"
        f'- Answer ONLY with a JSON array of objects {{"text": "...", "kind": ...}} where kind is one of {kinds}.\n'
        f"- At most {MAX_MEMORIES} items; prefer the most important and durable ones.\n"
        "- Each text is one self-contained sentence that makes sense without the conversation: "
        "spell out names, file paths, ids and numbers exactly; never write 'this', 'the file' or 'it'.\n"
        "- Skip small talk, transient tool output and anything only relevant to this moment.\n"
        "- If an item changes or corrects one of the memories already saved (listed after the "
        'transcript, if any), add "replaces": its number. If the conversation shows that a saved '
        'memory is simply no longer true, write what is true now ("The user no longer has a cat.") '
        'with "replaces": its number: the old one is then no longer recalled. Leave out what is '
        "already saved unchanged.\n"
        "- If there is nothing worth remembering, answer with [].\n"
        "- No prose, no explanations, no markdown: only the JSON array."
    )
    ts = _request_ts(messages_to_summarise)
    return [
        ChatMessage(id=f"{_REQUEST_ID_PREFIX}:flush:system", role="system", content=instructions, ts=ts),
        ChatMessage(
            id=f"{_REQUEST_ID_PREFIX}:flush:transcript",
            role="user",
            content="Conversation transcript:\n\n"
            + render_for_summary(messages_to_summarise)
            + _known_memories(known),
            ts=ts,
        ),
    ]


def _known_memories(known: Sequence[tuple[int, str]]) -> str:
    if not known:
        return ""
    lines = "\n".join(f"{number}: {' '.join(text.split())}" for number, text in known)
    return "\n\nMemories already saved (number: text):\n" + lines


# One extracted memory: (text, kind), or (text, kind, the number of the memory it replaces).
Flushed = tuple[str, str] | tuple[str, str, int]


_MAX_ARRAY_ATTEMPTS = 200


def _first_memory_array(text: str) -> list[Any] | None:
    """The first top-level JSON array in ``text`` that looks like a memory list.

    Arrays of non-objects (``[1]`` in prose, a nested string list) are passed over.
    """
    decoder = json.JSONDecoder()
    pos = text.find("[")
    attempts = 0
    while pos != -1 and attempts < _MAX_ARRAY_ATTEMPTS:
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("[", pos + 1)
            continue
        if isinstance(value, list) and (not value or any(isinstance(v, dict) for v in value)):
            return value
        pos = text.find("[", end)  # skip arrays nested in the one just decoded
    return None


def _memory_kind(raw: object) -> str:
    if not isinstance(raw, str):
        return "fact"
    kind = re.sub(r"[\s\-]+", "_", raw.strip().lower())
    if kind in MEMORY_KINDS:
        return kind
    if kind.endswith("s") and kind[:-1] in MEMORY_KINDS:  # "preferences", "action_items"
        return kind[:-1]
    return "fact"


def parse_flush(text: str, replaceable: Collection[int] = ()) -> list[Flushed]:
    """Parse the memory-flush answer into ``(text, kind)`` pairs; never raises.

    Accepts the array alone, in a code fence, or with prose around it. Items
    without text are skipped, unknown kinds become ``"fact"``, texts are
    whitespace-collapsed and cut to 500 chars, duplicates (case-insensitive)
    dropped, and at most 20 items returned. Anything unparseable gives ``[]``.
    An item whose ``"replaces"`` is one of ``replaceable`` (the numbers the request
    showed) is a triple with it; any other ``replaces`` is ignored.
    """
    try:
        items = _first_memory_array(text) if isinstance(text, str) else None
        if items is None:
            return []
        out: list[Flushed] = []
        seen: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                continue
            raw = item.get("text")
            if not isinstance(raw, str):
                continue
            body = " ".join(raw.split())
            if not body:
                continue
            if len(body) > MEMORY_MAX_CHARS:
                body = body[: MEMORY_MAX_CHARS - 1].rstrip() + "…"
            key = body.casefold()
            if key in seen:
                continue
            seen.add(key)
            replaces = item.get("replaces")
            if type(replaces) is int and replaces in replaceable:  # not a bool, not a guess
                out.append((body, _memory_kind(item.get("kind")), replaces))
            else:
                out.append((body, _memory_kind(item.get("kind"))))
            if len(out) >= MAX_MEMORIES:
                break
        return out
    except Exception:  # noqa: BLE001 - tolerant by contract: a bad answer only means no memories
        return []


# --------------------------------------------------------------------------- phase 3


def summary_request(
    messages_to_summarise: Sequence[ChatMessage],
    prior_summary: str | None,
    max_chars: int = SUMMARY_MAX_CHARS,
    missing: Sequence[str] = (),
) -> list[ChatMessage]:
    """The structured-summary LLM request (``missing``: sections a failed attempt lacked)."""
    headings = "\n".join(f"## {s}" for s in REQUIRED_SECTIONS)
    parts = [
        f"{SUMMARY_MARKER}\n"
        "You compact a long conversation between a user and an AI assistant that uses tools. "
        "Your summary replaces the older messages: the assistant will continue the work from it "
        "without seeing them again, so everything needed to carry on must be in it.\n\n"
        "Write a structured summary with exactly these sections, as markdown headings, in this order:\n\n"
        f"{headings}\n\n"
        "Rules:\n"
        '- Under each heading write concise bullet points ("- ..."). If a section has nothing, '
        'write "- None"; never leave a section empty or leave one out.\n'
        "- Copy exact identifiers verbatim: file paths, URLs, ids, names, numbers, commands, error "
        'messages. Never paraphrase or shorten them; list the ones that must survive under "Exact identifiers".\n'
        '- "Current work and next step" says precisely what was being done last and what comes next.\n'
        "- Only state what the conversation (or the prior summary) says; do not invent anything.\n"
        f"- Keep the whole summary under {max_chars} characters.\n"
        "- Answer with the summary only: no preamble, no closing remarks."
    ]
    if prior_summary:
        parts.append(
            "A summary of the conversation before this transcript already exists; it is given in the "
            "next message. MERGE it with the new transcript into one summary: keep every item of the "
            "prior summary unless the new conversation supersedes it, and then state the update "
            "(what changed, and what it was before when that matters). Never drop prior items just "
            "because they are old."
        )
    if missing:
        parts.append(
            "Your previous attempt was missing these required sections (or left them empty): "
            + ", ".join(f'"{s}"' for s in missing)
            + ". Include every required section this time, each with at least one bullet."
        )
    transcript = render_for_summary(messages_to_summarise)
    if prior_summary:
        user = (
            f"Prior summary:\n\n{prior_summary.strip()}\n\n---\n\nNew conversation to merge:\n\n{transcript}"
        )
    else:
        user = f"Conversation transcript:\n\n{transcript}"
    ts = _request_ts(messages_to_summarise)
    return [
        ChatMessage(
            id=f"{_REQUEST_ID_PREFIX}:summary:system", role="system", content="\n\n".join(parts), ts=ts
        ),
        ChatMessage(id=f"{_REQUEST_ID_PREFIX}:summary:transcript", role="user", content=user, ts=ts),
    ]


_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]*(.*?)[ \t]*#*[ \t]*$")
_NUMBERING = re.compile(r"^\d+[.)]\s*")


def _heading_title(line: str) -> str | None:
    """The normalised title of a markdown heading line, or None if not a heading."""
    match = _HEADING.match(line)
    if match is None:
        return None
    title = match.group(2).strip().strip("*_").strip()
    title = _NUMBERING.sub("", title).rstrip(":").strip().strip("*_").rstrip(":").strip()
    return " ".join(title.split()).casefold()


_REQUIRED_KEYS: Final = {s.casefold(): s for s in REQUIRED_SECTIONS}


def _section_bodies(summary: str) -> dict[str, list[str]]:
    """Required section -> bodies found under its heading(s).

    A body runs up to the next required-section heading; other headings inside it
    (sub-headings) count as content.
    """
    bodies: dict[str, list[str]] = {}
    current: str | None = None
    lines: list[str] = []
    for line in summary.splitlines():
        title = _heading_title(line)
        if title is not None and title in _REQUIRED_KEYS:
            if current is not None:
                bodies.setdefault(current, []).append("\n".join(lines))
            current, lines = _REQUIRED_KEYS[title], []
        elif current is not None:
            lines.append(line)
    if current is not None:
        bodies.setdefault(current, []).append("\n".join(lines))
    return bodies


def _has_content(body: str) -> bool:
    # A lone bullet marker is not content; "None" / "- none" is.
    return any(line.strip().lstrip("-*+•").strip() for line in body.splitlines())


def missing_sections(summary: str) -> list[str]:
    """Required sections without a heading, or whose body is empty; in section order."""
    bodies = _section_bodies(summary)
    return [s for s in REQUIRED_SECTIONS if not any(_has_content(b) for b in bodies.get(s, ()))]


def _cut(body: str, keep: int) -> str:
    """``body`` cut to at most ``keep`` chars plus a trim note (one separator char)."""
    if keep <= 0:
        return TRIMMED_NOTE
    head = body[:keep]
    newline = head.rfind("\n")
    if newline >= keep // 2:
        return head[:newline].rstrip() + "\n" + TRIMMED_NOTE
    space = head.rfind(" ")
    if space >= keep // 2:
        head = head[:space]
    return head.rstrip() + " " + TRIMMED_NOTE


_SMALL_BODY = 80  # bodies this short ("- None", one bullet) are never cut


def bound_summary(summary: str, max_chars: int = SUMMARY_MAX_CHARS) -> str:
    """Fit ``summary`` into ``max_chars``, cutting each section's body proportionally.

    Every heading is kept; a cut body ends with ``[… trimmed to fit]``. Short
    bodies are kept whole. Only if the headings alone cannot fit is the text
    cut hard.
    """
    if len(summary) <= max_chars:
        return summary
    # Blocks: (heading line or None for a preamble, body text).
    blocks: list[tuple[str | None, str]] = []
    heading: str | None = None
    lines: list[str] = []
    for line in summary.strip().splitlines():
        if _HEADING.match(line) is not None:
            if heading is not None or any(x.strip() for x in lines):
                blocks.append((heading, "\n".join(lines).strip()))
            heading, lines = line.rstrip(), []
        else:
            lines.append(line)
    blocks.append((heading, "\n".join(lines).strip()))

    def render(parts: Sequence[tuple[str | None, str]]) -> str:
        rendered = ["\n".join(x for x in (h, b) if x) for h, b in parts]
        return "\n\n".join(r for r in rendered if r)

    compact = render(blocks)
    if len(compact) <= max_chars:
        return compact

    def attempt(big: set[int]) -> str | None:
        # Cut the bodies in ``big`` to the same fraction of their length. Each one
        # costs at most its share, a separator and a note, plus up to two chars
        # of block separator when its block rendered empty without it (a preamble).
        skeleton = render([(h, "" if i in big else b) for i, (h, b) in enumerate(blocks)])
        available = max_chars - len(skeleton) - len(big) * (len(TRIMMED_NOTE) + 3)
        total = sum(len(blocks[i][1]) for i in big)
        if not big or available < 10 * len(big):
            return None
        text = render(
            [(h, _cut(b, len(b) * available // total) if i in big else b) for i, (h, b) in enumerate(blocks)]
        )
        return text if len(text) <= max_chars else None

    nonempty = {i for i, (_, b) in enumerate(blocks) if b}
    long_bodies = {i for i in nonempty if len(blocks[i][1]) > _SMALL_BODY}
    for big in (long_bodies, nonempty):
        fitted = attempt(big)
        if fitted is not None:
            return fitted
    for fallback in (
        [(h, TRIMMED_NOTE if b else "") for h, b in blocks],
        [(h, "") for h, _ in blocks],
    ):
        text = render(fallback)
        if len(text) <= max_chars:
            return text
    return text[:max_chars]


def summary_message(summary: str, *, id: str, ts: float) -> ChatMessage:
    """The pinned message that stands in for the summarised part."""
    return ChatMessage(
        id=id,
        role="system",
        content=SUMMARY_PREFIX + summary,
        ts=ts,
        kind=MessageKind.COMPACTION_SUMMARY,
    )
