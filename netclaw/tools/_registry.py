"""The tool registry: what the model may call, and running a batch of calls."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace

from netclaw.errors import ToolError
from netclaw.llm import ToolSchema
from netclaw.messages import ToolCall
from netclaw.policy import tool_matches
from netclaw.toolspec import (
    DEFAULT_CONTEXT,
    Tool,
    ToolContext,
    ToolHandler,
    ToolReply,
    ToolResult,
    ToolSource,
)

__all__ = [
    "DEFAULT_CONTEXT",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "ToolRegistry",
    "ToolReply",
    "ToolResult",
    "ToolSource",
]

log = logging.getLogger(__name__)


class ToolRegistry:
    """Registered tools plus the current tools of each source. ``allowed`` arguments are
    tool-name patterns (``*`` globs, e.g. ``issues__*``); None allows every tool."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def add_source(self, source: ToolSource) -> None:
        self._sources.append(source)

    def _current(self) -> dict[str, Tool]:
        if not self._sources:
            return self._tools
        found = dict(self._tools)
        for source in self._sources:
            for tool in source.tools():
                found.setdefault(tool.name, tool)  # a registered tool keeps its name
        return found

    def get(self, name: str) -> Tool | None:
        return self._current().get(name)

    def names(self) -> list[str]:
        return sorted(self._current())

    def schemas(self, allowed: Iterable[str] | None = None) -> list[ToolSchema]:
        patterns = None if allowed is None else list(allowed)
        return [
            t.schema
            for n, t in sorted(self._current().items())
            if patterns is None or tool_matches(n, patterns)
        ]

    async def run(
        self,
        call: ToolCall,
        timeout_s: float,
        allowed: Iterable[str] | None = None,
        context: ToolContext | None = None,
    ) -> ToolResult:
        """Run one call. Never raises: every failure becomes an error result the model sees."""
        tool = self.get(call.name)
        if tool is None:
            return ToolResult(call, f"error: there is no tool named {call.name!r}", True)
        if allowed is not None and not tool_matches(call.name, allowed):
            audience = (context or DEFAULT_CONTEXT).audience
            return ToolResult(
                call, f"error: tool {call.name!r} is not available to {audience} sessions", True
            )
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolResult(call, f"error: arguments are not valid JSON: {exc.msg}", True)
        if not isinstance(args, dict):
            return ToolResult(call, "error: arguments must be a JSON object", True)
        context = replace(context or DEFAULT_CONTEXT, call_id=call.id)  # a tool may key its work on it
        try:
            async with asyncio.timeout(timeout_s) as deadline:
                content = await tool.handler(args, context)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own timeout (e.g. an upstream call), not ours
                return ToolResult(call, f"error: tool {call.name} failed: TimeoutError: {exc}", True)
            return ToolResult(call, f"error: tool {call.name} timed out after {timeout_s:g}s", True)
        except ToolError as exc:
            return ToolResult(call, f"error: {exc}", True)
        except Exception as exc:  # a broken tool must not break the turn
            log.exception("tool %s failed", call.name)
            return ToolResult(call, f"error: tool {call.name} failed: {type(exc).__name__}: {exc}", True)
        if isinstance(content, ToolReply):
            return ToolResult(call, content.content, files=content.files)
        return ToolResult(call, content)

    async def run_batch(
        self,
        calls: Sequence[ToolCall],
        timeout_s: float,
        allowed: Iterable[str] | None = None,
        context: ToolContext | None = None,
    ) -> list[ToolResult]:
        """All calls concurrently; results in call order."""
        allowed_list = None if allowed is None else list(allowed)
        return list(await asyncio.gather(*(self.run(c, timeout_s, allowed_list, context) for c in calls)))
