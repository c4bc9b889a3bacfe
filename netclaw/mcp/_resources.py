"""A server's resources as two tools the model can call (pure): ``<server>__list_resources``
(resources and URI templates, with names, types and descriptions) and
``<server>__read_resource`` (one URI's contents: text as text, images for a vision model
through the same path as tool results, other binaries as a placeholder). Both are
read-only. They are offered when the server has the ``resources`` capability and its
config keeps ``resources`` on; a server tool of the same name wins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as mt

from netclaw.mcp._content import SEPARATOR, cap

LIST = "list_resources"
READ = "read_resource"
MAX_LISTED = 200  # entries shown; the model is told how many more there are

LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
READ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "the resource's URI, as listed"}},
    "required": ["uri"],
    "additionalProperties": False,
}


def tool_names(server: str) -> tuple[str, str]:
    return f"{server}{SEPARATOR}{LIST}", f"{server}{SEPARATOR}{READ}"


def descriptions(server: str) -> tuple[str, str]:
    list_name, read_name = tool_names(server)
    return (
        f"List the resources (documents, files, records) MCP server {server} offers, and the URI "
        f"templates it can fill in. Read one with {read_name}.",
        f"Read one resource of MCP server {server} by its URI (from {list_name}, or a template filled in).",
    )


def listing_text(
    server: str, resources: Sequence[mt.Resource], templates: Sequence[mt.ResourceTemplate]
) -> str:
    """One line per resource and per template, for the model."""
    if not resources and not templates:
        return f"MCP server {server} lists no resources."
    lines = []
    for r in resources[:MAX_LISTED]:
        lines.append(_line(r.uri, r.name, r.mime_type, r.description, r.size))
    if len(resources) > MAX_LISTED:
        lines.append(f"... and {len(resources) - MAX_LISTED} more resources")
    for t in templates[:MAX_LISTED]:
        lines.append("template " + _line(t.uri_template, t.name, t.mime_type, t.description, None))
    return cap("\n".join(lines))


def _line(uri: str, name: str, mime: str | None, description: str | None, size: int | None) -> str:
    facts = ", ".join(
        x for x in (name if name != uri else "", mime or "", f"{size:,} bytes" if size else "") if x
    )
    line = f"{uri}" + (f" ({facts})" if facts else "")
    return f"{line}: {' '.join(description.split())}" if description else line


def as_tool_result(result: mt.ReadResourceResult) -> mt.CallToolResult:
    """A read's contents as a tool result, so one conversion serves both (text, images,
    placeholders, caps)."""
    blocks: list[mt.ContentBlock] = [mt.EmbeddedResource(resource=c) for c in result.contents]
    return mt.CallToolResult(content=blocks)
