"""Tools the model can call: the registry, the built-in tools and the memory tools."""

from netclaw.tools._builtin import BUILTIN_TOOLS, CURRENT_TIME
from netclaw.tools._memory import memory_tools
from netclaw.tools._registry import Tool, ToolContext, ToolHandler, ToolRegistry, ToolResult

__all__ = [
    "BUILTIN_TOOLS",
    "CURRENT_TIME",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "ToolRegistry",
    "ToolResult",
    "memory_tools",
]


def default_registry() -> ToolRegistry:
    return ToolRegistry(BUILTIN_TOOLS)
