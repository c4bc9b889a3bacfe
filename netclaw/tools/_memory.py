"""The memory tools: ``remember`` a fact (or a change to one: ``replaces``), ``search_memory``
for earlier ones (by meaning and words, numbered so a change can name what it replaces).

Both act in the calling session's audience, so a team channel neither sees nor
writes personal memories; public sessions get neither. Within the audience, a memory
belongs where it was made (``ToolContext.scope``) and search keeps to that place unless
the audience's ``memory_scope`` says otherwise (``ToolContext.recall_scope``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from netclaw.errors import JournalError, ToolError
from netclaw.history import MEMORY_KINDS
from netclaw.persistence import MAX_MEMORY_CHARS, Memory, MemoryStore, NewMemory
from netclaw.tools._registry import Tool, ToolContext

SEARCH_DEFAULT_LIMIT = 5
SEARCH_MAX_LIMIT = 10


def memory_tools(store: MemoryStore) -> list[Tool]:
    """``remember`` and ``search_memory`` on ``store``."""

    async def remember(args: Mapping[str, Any], ctx: ToolContext) -> str:
        _refuse_public(ctx)
        text = args.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ToolError("'text' is required: the fact to remember, as a short sentence")
        kind = args.get("kind", "fact")
        if kind not in MEMORY_KINDS:
            raise ToolError(f"'kind' must be one of {', '.join(MEMORY_KINDS)} (got {kind!r})")
        replaces = args.get("replaces")
        if replaces is not None and (
            isinstance(replaces, bool) or not isinstance(replaces, int) or replaces < 1
        ):
            raise ToolError(
                f"'replaces' must be the number of a memory (from search_memory), got {replaces!r}"
            )
        try:
            stored = await store.add(
                [NewMemory(text, kind, replaces)],
                session_id=ctx.session_id,
                audience=ctx.audience,
                turn=ctx.turn,
                scope=ctx.scope,
            )
        except JournalError as exc:
            raise ToolError(f"memory is unavailable right now: {exc}") from exc
        if not stored:
            return "already remembered"
        memory = stored[0]
        if replaces is not None and memory.replaces != replaces:
            # Never another audience's memory, nor one already replaced: say so, plainly.
            return f"remembered as #{memory.id}; #{replaces} was not replaced (no such current memory here)"
        if memory.replaces is not None:
            # A changed fact: the older memory it updates is kept but no longer recalled.
            return f"remembered as #{memory.id}; it updates #{memory.replaces}, which is no longer recalled"
        return "remembered"

    async def search_memory(args: Mapping[str, Any], ctx: ToolContext) -> str:
        _refuse_public(ctx)
        if not ctx.recall:
            raise ToolError("memory search is off here (memory_scope is none for this audience)")
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' is required: words to look for in saved memories")
        limit = args.get("limit", SEARCH_DEFAULT_LIMIT)
        # bool is an int subclass; `true` is not a limit.
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_MAX_LIMIT:
            raise ToolError(f"'limit' must be an integer from 1 to {SEARCH_MAX_LIMIT} (got {limit!r})")
        try:
            found = await store.search(
                query, audience=ctx.audience, scope=ctx.recall_scope, limit=limit, used=True
            )
        except JournalError as exc:
            raise ToolError(f"memory is unavailable right now: {exc}") from exc
        return "\n".join(_line(m) for m in found) if found else "no memories match"

    return [
        Tool(
            name="remember",
            description=(
                "Save a fact, decision, action item or user preference to long-term memory so it "
                "can be recalled in later conversations. One self-contained sentence per call."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "text": {
                        "type": "string",
                        "description": "What to remember, as a self-contained sentence.",
                        "maxLength": MAX_MEMORY_CHARS,
                    },
                    "kind": {
                        "type": "string",
                        "enum": list(MEMORY_KINDS),
                        "default": "fact",
                        "description": "What sort of memory this is.",
                    },
                    "replaces": {
                        "type": "integer",
                        "minimum": 1,
                        "description": (
                            "When this changes a fact already remembered: that memory's number "
                            "(#N from search_memory). It is then no longer recalled."
                        ),
                    },
                },
                "required": ["text"],
                "additionalProperties": False,
            },
            handler=remember,
        ),
        Tool(
            name="search_memory",
            description=(
                "Search long-term memory from earlier conversations by meaning and words; the most "
                "relevant first, each with its number (#N)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for, in any words."},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": SEARCH_MAX_LIMIT,
                        "default": SEARCH_DEFAULT_LIMIT,
                        "description": "How many memories to return at most.",
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            handler=search_memory,
        ),
    ]


def _refuse_public(ctx: ToolContext) -> None:
    # Anyone can talk to a public session: it must neither read nor plant memories.
    if ctx.audience == "public":
        raise ToolError("memory is not available in public sessions")


def _line(memory: Memory) -> str:
    day = dt.datetime.fromtimestamp(memory.created, dt.UTC).date().isoformat()
    return f"- #{memory.id} [{memory.kind}] {' '.join(memory.text.split())} (saved {day})"
