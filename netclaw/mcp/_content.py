"""What an MCP server's tools look like to the model, and what their results become (pure).

- A server tool becomes ``<server>__<tool>`` with its input schema, if the schema is a
  valid JSON Schema with an object at its root and the name fits what providers accept.
- A call's arguments are checked against that schema before they leave: the model gets
  the first violation, not the server's stack trace.
- A result becomes one text: text blocks as they are, embedded text resources by their
  text, images and other binary content as a short placeholder (tool messages carry text
  only), and the whole capped at :data:`MAX_RESULT_CHARS` with a note that it was cut.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types as mt

MAX_RESULT_CHARS = 64 * 1024
SEPARATOR = "__"
# OpenAI's function-name rule; Anthropic's is the same set. A longer name is refused there.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ServerTool:
    """One tool of one server, as the model will see it."""

    name: str  # <server>__<tool>
    remote_name: str  # the server's own name for it
    description: str
    schema: Mapping[str, Any]


def exposed_tools(
    server: str, listed: Sequence[mt.Tool], allow: Sequence[str] | None
) -> tuple[list[ServerTool], list[str]]:
    """The tools to expose, and one line per tool skipped (naming it and why)."""
    kept: list[ServerTool] = []
    skipped: list[str] = []
    for tool in listed:
        if allow is not None and tool.name not in allow:
            continue
        name = f"{server}{SEPARATOR}{tool.name}"
        if not _TOOL_NAME.match(name):
            skipped.append(f"{name!r}: a tool name must be 1-64 letters, digits, '_' or '-'")
            continue
        problem = schema_problem(tool.input_schema)
        if problem is not None:
            skipped.append(f"{name!r}: invalid input schema: {problem}")
            continue
        description = tool.description or tool.title or tool.name
        kept.append(ServerTool(name, tool.name, description, tool.input_schema))
    return kept, skipped


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` cannot describe a tool's arguments, or None when it can."""
    if schema.get("type") != "object":
        return "the root must be {'type': 'object', ...}"
    try:
        jsonschema.validators.validator_for(schema).check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    return None


def argument_problem(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """The first way ``args`` break ``schema`` (with where), or None."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(dict(args)))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def result_text(result: mt.CallToolResult) -> str:
    """One text for the model; capped."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return cap("\n".join(parts) if parts else "(no output)")


def cap(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output cut: {len(text):,} characters, the first {limit:,} shown]"


def _block_text(block: mt.ContentBlock) -> str:
    match block:
        case mt.TextContent(text=text):
            return text
        case mt.ImageContent(data=data, mime_type=mime):
            return f"[image {mime}, {_decoded_size(data):,} bytes: not shown, tool results carry text only]"
        case mt.AudioContent(data=data, mime_type=mime):
            return f"[audio {mime}, {_decoded_size(data):,} bytes: not shown]"
        case mt.EmbeddedResource(resource=mt.TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case mt.EmbeddedResource(resource=resource):
            mime = getattr(resource, "mime_type", None) or "binary"
            return f"[resource {resource.uri}: {mime} content not shown]"
        case mt.ResourceLink(uri=uri, name=name):
            return f"[resource link {uri} ({name})]"
    return f"[{getattr(block, 'type', 'unknown')} content not shown]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
