"""Text for people on chat platforms: replies split to a platform's message size, and
short notes about what happened to the conversation."""

from __future__ import annotations

from netclaw import outputs as out

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


def note_for(output: out.Output) -> str | None:
    """A short note for people about a lifecycle output, or None if it needs none."""
    match output:
        case out.HistoryTrimmed(dropped_turns=turns):
            return f"_(Earlier context was shortened: {turns} older turn(s) no longer fit in my context window.)_"
        case out.Compaction(summarized=True):
            return "_(I summarised our earlier conversation to make room; key facts were saved to memory.)_"
        case out.Error(message=message):
            return error_note(message)
        case out.Notice(text=text):
            return text
        case out.SessionReset():
            return "_(This conversation starts afresh from here.)_"
        case out.InputRequested():
            return question_note(output)
        case out.InputAnswered(action=action, by=by):
            return f"_(Question answered: {action} by {by}.)_"
        case _:
            return None


def question_note(asked: out.InputRequested) -> str:
    """A tool's question as a chat message, with how to answer it (from the shell or the
    API for now: buttons and forms in the thread are not built yet)."""
    lines = [f":question: {asked.source} asks: {asked.message}"]
    if asked.url:
        lines.append(f"Open {asked.url}, then: `netclaw questions accept {asked.question_id}`")
    elif asked.schema is not None:
        fields = " ".join(f"{name}=…" for name in (asked.schema.get("properties") or {}))
        lines.append(f"Answer: `netclaw questions answer {asked.question_id} {fields}`")
    else:
        lines.append(f"Allow: `netclaw questions accept {asked.question_id}` (or `decline`)")
    return "\n".join(lines)


def error_note(message: str) -> str:
    return f":warning: Sorry, that did not work: {message}"
