"""Tools the model can call: the registry and the built-in tools."""

from netclaw.tools._builtin import BUILTIN_TOOLS, CURRENT_TIME
from netclaw.tools._registry import Tool, ToolHandler, ToolRegistry, ToolResult

__all__ = ["BUILTIN_TOOLS", "CURRENT_TIME", "Tool", "ToolHandler", "ToolRegistry", "ToolResult"]


def default_registry() -> ToolRegistry:
    return ToolRegistry(BUILTIN_TOOLS)
