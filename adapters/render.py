"""Rendering session outputs for people on chat platforms (shared by the adapters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FENCE = "```"


def split_message(text: str, limit: int) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` characters, preferring paragraph
    breaks, then line breaks, then spaces. A code block cut in two is closed at the end
    of one piece and reopened at the start of the next, so both render as code."""
    if limit < 2 * len(FENCE) + 16:
        raise ValueError("limit too small to split code blocks safely")
    pieces: list[str] = []
    rest = text
    reopen = ""
    while rest:
        budget = limit - len(reopen)
        if len(rest) <= budget:
            pieces.append(reopen + rest)
            break
        # Leave room to close a code block this piece leaves open.
        window = rest[: budget - len(FENCE) - 1]
        cut = _best_cut(window)
        piece, rest = window[:cut].rstrip(), rest[cut:].lstrip("\n")
        piece = reopen + piece
        if piece.count(FENCE) % 2 == 1:  # a code block is open at the cut
            language = _open_fence_language(piece)
            pieces.append(piece + "\n" + FENCE)
            reopen = FENCE + language + "\n"
        else:
            pieces.append(piece)
            reopen = ""
    return [p for p in pieces if p.strip()]


def _best_cut(window: str) -> int:
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > len(window) // 3:  # not so early that pieces get tiny
            return at + len(sep)
    return len(window)


def _open_fence_language(piece: str) -> str:
    last = piece.rfind(FENCE)
    line_end = piece.find("\n", last)
    return piece[last + len(FENCE) : line_end if line_end != -1 else len(piece)].strip()


def lifecycle_note(event: str, data: Mapping[str, Any]) -> str | None:
    """A short note for people about a lifecycle output, or None if it needs none."""
    if event == "history_trimmed":
        turns = data.get("dropped_turns", 0)
        return f"_(Earlier context was shortened: {turns} older turn(s) no longer fit in my context window.)_"
    if event == "compaction" and data.get("summarized"):
        return "_(I summarised our earlier conversation to make room; key facts were saved to memory.)_"
    if event == "error":
        return f":warning: Sorry, that did not work: {data.get('message', 'unknown error')}"
    return None
