"""Reading a session's transcript in tests."""

from __future__ import annotations

from typing import Any

from netclaw.security.trust import unlabel
from tests.conftest import DaemonHandle


def tool_results(handle: DaemonHandle, sid: str) -> list[dict[str, Any]]:
    """The session's tool results, their content without the untrusted-content label that
    results of outside tools (MCP servers, web, files, shell) wear (netclaw/security/trust.py)."""
    found = [m for m in handle.transcript(sid) if m["role"] == "tool"]
    return [{**m, "content": unlabel(m["content"])} for m in found]
