"""Tools the model can call: the registry, the built-in tools, the memory tools and the
skill tools (netclaw/skills); the tools of MCP servers come from :mod:`netclaw.mcp`, a
source of the registry."""

import os
from collections.abc import Callable
from pathlib import Path

from netclaw.config import Settings
from netclaw.persistence import MemoryStore
from netclaw.skills import LiveSkills, SkillTools
from netclaw.tools._asks import (
    Answer,
    PendingQuestion,
    Question,
    Questions,
    SampleRefused,
    SampleReply,
    SampleRequest,
    ToolSession,
    deadline,
    expiry,
    new_question_id,
    waiting_for_a_person,
)
from netclaw.tools._builtin import BUILTIN_TOOLS, CURRENT_TIME
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
from netclaw.tools._sandbox import Bubblewrap, Network, Runner, runner_for, why_not_tried
from netclaw.tools._shell import shell_tool
from netclaw.tools._subagents import SubagentPort, subagent_tools
from netclaw.tools._web_fetch import web_fetch_tool
from netclaw.tools._web_search import web_search_tool
from netclaw.tools._workspace import check_out_of_reach, ensure_workspace, workspace_tools

__all__ = [
    "BUILTIN_TOOLS",
    "CURRENT_TIME",
    "Answer",
    "Bubblewrap",
    "Network",
    "PendingQuestion",
    "Question",
    "Questions",
    "ReminderPort",
    "Runner",
    "SampleRefused",
    "SampleReply",
    "SampleRequest",
    "SubagentPort",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "ToolRegistry",
    "ToolReply",
    "ToolResult",
    "ToolSession",
    "ToolSource",
    "build_registry",
    "deadline",
    "expiry",
    "guard_workspace",
    "memory_tools",
    "new_question_id",
    "reminder_tools",
    "runner_for",
    "subagent_tools",
    "waiting_for_a_person",
    "why_not_tried",
]


def default_registry() -> ToolRegistry:
    return ToolRegistry(BUILTIN_TOOLS)


def guard_workspace(settings: Settings, config_file: Path | None) -> None:
    """With the file or shell tools on, refuse a workspace that holds the daemon's own
    files: its data directory (database, control token, attachments), its config file, or
    the file the control token is read from. A ConfigError naming the fix."""
    config = settings.tools
    if not (config.files.enabled or config.shell.enabled):
        return
    token_env = settings.gateway.control_token_env
    token_file = os.environ.get(f"{token_env}_FILE", "").strip() if token_env else ""
    check_out_of_reach(
        config.workspace_dir,
        (
            ("data_dir", settings.data_dir),
            ("the config file", config_file),
            (f"{token_env}_FILE", Path(token_file) if token_file else None),
        ),
    )


def build_registry(
    settings: Settings,
    memory: MemoryStore | None = None,
    settings_of: Callable[[], Settings] | None = None,
    skills: LiveSkills | None = None,
) -> ToolRegistry:
    """The built-ins ``settings.tools`` switches on, plus the memory tools and, with
    ``skills``, the skill tools. MCP servers are added by the daemon as a source (they need
    the I/O loop). ``settings_of``: the running config (what a reload may change, e.g. an
    audience's ``shell_network`` or the skills).

    Raises ConfigError when the shell sandbox cannot start here."""
    registry = default_registry()
    if memory is not None:
        for tool in memory_tools(memory):
            registry.register(tool)
    current = settings_of or (lambda: settings)
    config = settings.tools
    if skills is not None:
        registry.add_source(SkillTools(skills, current))
    if config.web_search.enabled:
        registry.register(web_search_tool(lambda: current().tools.web_search))
    web = config.web_fetch
    if web.enabled:
        registry.register(
            web_fetch_tool(
                allow_private_networks=web.allow_private_networks,
                max_bytes=web.max_bytes,
                timeout_s=web.timeout_s,
            )
        )
    shell = config.shell
    runner = None
    owner = None  # when the daemon is root, the sandbox's user owns the workspace
    if shell.enabled and shell.sandbox != "none" and os.geteuid() == 0:
        owner = (shell.sandbox_uid, shell.sandbox_gid)
    if config.files.enabled or shell.enabled:
        ensure_workspace(config.workspace_dir, owner)
    if shell.enabled:
        # Checked now: a sandbox that cannot start stops start-up with what to do.
        runner = runner_for(shell, config.workspace_dir, hidden=(settings.data_dir,))
    if config.files.enabled:
        for tool in workspace_tools(config.workspace_dir, settings.data_dir, owner=owner):
            registry.register(tool)
    if shell.enabled:

        def network_for(audience: str) -> Network:
            chosen = current().audience(audience).shell_network
            return chosen if chosen is not None else current().tools.shell.network

        registry.register(
            shell_tool(
                config.workspace_dir,
                timeout_s=shell.timeout_s,
                max_output_bytes=shell.max_output_bytes,
                runner=runner,
                network_for=network_for,
            )
        )
    return registry
