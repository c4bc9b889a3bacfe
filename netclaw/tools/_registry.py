"""The tool registry: what the model may call, and running a batch of calls."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from netclaw.errors import ToolError
from netclaw.llm import ToolSchema
from netclaw.messages import ToolCall
from netclaw.process import traces
from netclaw.security.policy import NO_HINTS, ToolHints, tool_matches
from netclaw.security.redact import redact
from netclaw.security.trust import label_result
from netclaw.tools._asks import deadline as running_until
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
        self._schemas: dict[tuple[str, ...] | None, tuple[tuple[Tool, ...], tuple[ToolSchema, ...]]] = {}
        # Told how long each call whose handler ran took (the daemon's /metrics): by a tool's
        # name only once it is known to exist, so a model's invented names make no series.
        self.timed: Callable[[str, float], None] | None = None
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

    def hints(self, name: str) -> ToolHints:
        tool = self.get(name)
        return tool.hints if tool is not None else NO_HINTS

    def schemas(self, allowed: Iterable[str] | None = None) -> list[ToolSchema]:
        # Asked for every model call, and the answer changes only with the tools (an MCP
        # server's list) or the patterns: kept per patterns while the same tools are current.
        current = self._current()
        patterns = None if allowed is None else tuple(allowed)
        tools = tuple(current.values())
        kept = self._schemas.get(patterns)
        if kept is not None and kept[0] == tools:
            return list(kept[1])
        found = [
            t.schema for n, t in sorted(current.items()) if patterns is None or tool_matches(n, patterns)
        ]
        if len(self._schemas) >= 64:  # a bound: patterns come from roles and sessions' configs
            self._schemas.clear()
        self._schemas[patterns] = (tools, tuple(found))
        return found

    async def run(
        self,
        call: ToolCall,
        timeout_s: float,
        allowed: Iterable[str] | None = None,
        context: ToolContext | None = None,
    ) -> ToolResult:
        """Run one call. Never raises: every failure becomes an error result the model sees.
        Secrets in what it returns are redacted here, before the result is journaled or
        shown to the model (:mod:`netclaw.security.redact`). What carries outside text — every result
        of an untrusted tool once its handler ran, errors included, and a reply that says it
        does — is labelled here too (:mod:`netclaw.security.trust`); a call refused before it ran
        (no such tool, not allowed, bad arguments) holds only netclaw's words and is not."""
        traced = (
            traces.span(f"execute_tool {call.name}", _tool_attributes(call), client=True)
            if traces.active()
            else traces.NO_SPAN.current()
        )
        with traced as span:
            result, outside = await self._run(call, timeout_s, allowed, context)
            done = redact(result.content)
            if done.changed:
                log.info("tool %s: redacted %s from its result", call.name, ", ".join(done.kinds))
                result = replace(result, content=done.text)
            if outside:
                result = replace(result, content=label_result(call.name, result.content, result.is_error))
            if span.recording:
                _traced(span, call, result)
        return result

    async def _run(
        self,
        call: ToolCall,
        timeout_s: float,
        allowed: Iterable[str] | None,
        context: ToolContext | None,
    ) -> tuple[ToolResult, bool]:
        """The result, and whether it carries outside text."""
        tool = self.get(call.name)
        if tool is None:
            return ToolResult(call, f"error: there is no tool named {call.name!r}", True), False
        if allowed is not None and not tool_matches(call.name, allowed):
            audience = (context or DEFAULT_CONTEXT).audience
            refused = (
                f"error: tool {call.name!r} is not available to {audience} sessions "
                "or to the role of the person whose turn this is"
            )
            return ToolResult(call, refused, True), False
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolResult(call, f"error: arguments are not valid JSON: {exc.msg}", True), False
        if not isinstance(args, dict):
            return ToolResult(call, "error: arguments must be a JSON object", True), False
        bound = replace(context or DEFAULT_CONTEXT, call_id=call.id, tool=call.name)
        outside = tool.untrusted  # from here on the handler runs: what it says may be anyone's
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s) as deadline:
                with running_until(deadline):  # stands still while the tool asks a person
                    content = await tool.handler(args, bound)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own timeout (e.g. an upstream call), not ours
                failed = f"error: tool {call.name} failed: TimeoutError: {exc}"
                return ToolResult(call, failed, True), outside
            return ToolResult(call, f"error: tool {call.name} timed out after {timeout_s:g}s", True), outside
        except ToolError as exc:
            return ToolResult(call, f"error: {exc}", True), outside
        except Exception as exc:  # a broken tool must not break the turn
            log.exception("tool %s failed", call.name)
            failed = f"error: tool {call.name} failed: {type(exc).__name__}: {exc}"
            return ToolResult(call, failed, True), outside
        finally:
            if self.timed is not None:
                self.timed(call.name, time.perf_counter() - started)
        if isinstance(content, ToolReply):
            result = ToolResult(call, content.content, files=content.files, images=content.images)
            return result, outside or content.untrusted
        return ToolResult(call, content), outside

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


def _tool_attributes(call: ToolCall) -> traces.Attributes:
    """An ``execute_tool`` span's attributes (GenAI conventions); an MCP tool's server
    (its tools are named ``<server>__<tool>``)."""
    server, sep, _ = call.name.partition("__")
    attributes: dict[str, traces.AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "extension" if sep else "function",
    }
    if sep:
        attributes["netclaw.mcp.server"] = server
    return attributes


def _traced(span: traces.Span, call: ToolCall, result: ToolResult) -> None:
    span.set("netclaw.tool.outcome", "error" if result.is_error else "ok")
    if result.is_error:
        span.fail("tool_error", _first_line(result.content))
    if span.captures:  # both already redacted: the arguments by the session, the result above
        span.set("gen_ai.tool.call.arguments", redact(call.arguments).text)
        span.set("gen_ai.tool.call.result", result.content)


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][:200] or "error"
