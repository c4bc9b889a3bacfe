"""Tools the model can call: the registry, the built-in tools, the memory tools and the
tools of MCP servers."""

from netclaw.config import Settings
from netclaw.persistence import MemoryStore
from netclaw.tools._builtin import BUILTIN_TOOLS, CURRENT_TIME
from netclaw.tools._mcp_hub import McpHub, McpServerStatus
from netclaw.tools._memory import memory_tools
from netclaw.tools._registry import (
    Tool,
    ToolContext,
    ToolHandler,
    ToolRegistry,
    ToolReply,
    ToolResult,
    ToolSource,
)
from netclaw.tools._reminders import ReminderPort, reminder_tools
from netclaw.tools._shell import shell_tool
from netclaw.tools._subagents import SubagentPort, subagent_tools
from netclaw.tools._web_fetch import web_fetch_tool
from netclaw.tools._workspace import ensure_workspace, workspace_tools

__all__ = [
    "BUILTIN_TOOLS",
    "CURRENT_TIME",
    "McpHub",
    "McpServerStatus",
    "ReminderPort",
    "SubagentPort",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "ToolRegistry",
    "ToolReply",
    "ToolResult",
    "ToolSource",
    "build_registry",
    "memory_tools",
    "reminder_tools",
    "subagent_tools",
]


def default_registry() -> ToolRegistry:
    return ToolRegistry(BUILTIN_TOOLS)


def build_registry(settings: Settings, memory: MemoryStore | None = None) -> ToolRegistry:
    """The built-ins ``settings.tools`` switches on, plus the memory tools. MCP servers are
    added by the daemon as a source (they need the I/O loop)."""
    registry = default_registry()
    if memory is not None:
        for tool in memory_tools(memory):
            registry.register(tool)
    config = settings.tools
    web = config.web_fetch
    if web.enabled:
        registry.register(
            web_fetch_tool(
                allow_private_networks=web.allow_private_networks,
                max_bytes=web.max_bytes,
                timeout_s=web.timeout_s,
            )
        )
    if config.files.enabled or config.shell.enabled:
        ensure_workspace(config.workspace_dir)
    if config.files.enabled:
        for tool in workspace_tools(config.workspace_dir, settings.data_dir):
            registry.register(tool)
    if config.shell.enabled:
        registry.register(
            shell_tool(
                config.workspace_dir,
                timeout_s=config.shell.timeout_s,
                max_output_bytes=config.shell.max_output_bytes,
            )
        )
    return registry
