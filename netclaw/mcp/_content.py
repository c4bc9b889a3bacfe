"""What an MCP server's tools look like to the model, and what their results become (pure).

- A server tool becomes ``<server>__<tool>`` with its input schema, if the schema is a
  valid JSON Schema with an object at its root and the name fits what providers accept.
  A tool that *requires* task-augmented execution (``execution.taskSupport: "required"``)
  is left out with a reason: netclaw does not run MCP tasks, so every call would fail.
- Its annotations (``readOnlyHint``, ``destructiveHint``) become :class:`ToolHints` for
  the approval policy, when the server's config trusts them.
- A call's arguments are checked against that schema before they leave: the model gets
  the first violation, not the server's stack trace.
- A result becomes one text plus the images a vision model may be shown: text blocks as
  they are, embedded text resources by their text, structured content as JSON when no
  text block already carries it, images (PNG, JPEG, GIF, WebP within
  :data:`MAX_IMAGE_BYTES`, at most :data:`MAX_IMAGES`) set aside, and everything else
  (audio, other binaries, images past the caps) as a short placeholder. Blocks whose
  ``audience`` leaves out the assistant are not given to the model. When the text is
  over :data:`MAX_RESULT_CHARS`, the lowest-``priority`` blocks go first, then the
  whole is cut with a note saying so.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import mcp_types as mt

from netclaw.security.policy import NO_HINTS, ToolHints

MAX_RESULT_CHARS = 64 * 1024
MAX_IMAGES = 4  # per result
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # Anthropic's limit per image; OpenAI's is higher
VISION_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
SEPARATOR = "__"
# OpenAI's function-name rule; Anthropic's is the same set. A longer name is refused there.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class ServerTool:
    """One tool of one server, as the model will see it."""

    name: str  # <server>__<tool>
    remote_name: str  # the server's own name for it
    description: str
    schema: Mapping[str, Any]
    hints: ToolHints = NO_HINTS


def exposed_tools(
    server: str, listed: Sequence[mt.Tool], allow: Sequence[str] | None, *, trust_annotations: bool = True
) -> tuple[list[ServerTool], dict[str, str]]:
    """The tools to expose, and why each skipped one is (by the server's own name). A tool
    left out by the ``tools`` allowlist is not "skipped": it was not asked for."""
    kept: list[ServerTool] = []
    skipped: dict[str, str] = {}
    for tool in listed:
        if allow is not None and tool.name not in allow:
            continue
        name = f"{server}{SEPARATOR}{tool.name}"
        if not _TOOL_NAME.fullmatch(name):
            skipped[tool.name] = f"{name!r}: a tool name must be 1-64 letters, digits, '_' or '-'"
            continue
        if tool.execution is not None and tool.execution.task_support == "required":
            skipped[tool.name] = (
                f"{name!r}: it requires task-augmented execution (MCP tasks), which netclaw does not "
                "support; every call would fail"
            )
            continue
        problem = schema_problem(tool.input_schema)
        if problem is not None:
            skipped[tool.name] = f"{name!r}: invalid input schema: {problem}"
            continue
        description = tool.description or tool.title or tool.name
        hints = hints_of(tool.annotations) if trust_annotations else ToolHints()
        kept.append(ServerTool(name, tool.name, description, tool.input_schema, hints))
    return kept, skipped


def hints_of(annotations: mt.ToolAnnotations | None) -> ToolHints:
    """Only what a server states counts: an unannotated tool is neither read-only nor
    destructive here (the spec's default ``destructiveHint: true`` would gate every tool
    of every server that says nothing)."""
    if annotations is None:
        return ToolHints()
    read_only = annotations.read_only_hint is True
    return ToolHints(read_only=read_only, destructive=annotations.destructive_hint is True and not read_only)


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


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResultImage:
    """An image a tool returned, for a vision model (decoded)."""

    mime_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ConvertedResult:
    text: str
    images: tuple[ResultImage, ...] = field(default=())


@dataclass(slots=True)
class _Part:
    text: str
    priority: float


def convert_result(
    result: mt.CallToolResult,
    *,
    max_chars: int = MAX_RESULT_CHARS,
    max_images: int = MAX_IMAGES,
    max_image_bytes: int = MAX_IMAGE_BYTES,
) -> ConvertedResult:
    """The model's view of a result: one capped text and the images set aside."""
    parts: list[_Part] = []
    images: list[ResultImage] = []
    for_user = 0
    for block in result.content:
        annotations = getattr(block, "annotations", None)
        if annotations is not None and annotations.audience and "assistant" not in annotations.audience:
            for_user += 1
            continue
        priority = (
            annotations.priority if annotations is not None and annotations.priority is not None else 0.5
        )
        image = _image_of(block)
        if image is not None:
            mime, raw = image
            refusal = _image_refusal(mime, raw, len(images), max_images, max_image_bytes)
            if refusal is None:
                images.append(ResultImage(mime, raw))
                continue
            parts.append(_Part(f"[image {mime}, {len(raw):,} bytes: not shown ({refusal})]", priority))
            continue
        parts.append(_Part(_block_text(block), priority))
    structured = result.structured_content
    if structured is not None and not any(_carries(p.text, structured) for p in parts):
        parts.append(_Part(json.dumps(structured, ensure_ascii=False), 0.5))
    notes = []
    if for_user:
        notes.append(f"[{for_user} content block(s) meant only for the user left out]")
    # Room for the notes (the one about dropped blocks is ~60 characters).
    parts, dropped = _fit(parts, max_chars - sum(len(n) + 1 for n in notes) - 64)
    if dropped:
        notes.append(f"[{dropped} low-priority content block(s) left out for length]")
    texts = [p.text for p in parts] + notes
    if not texts and not images:
        texts = ["(no output)"]
    return ConvertedResult(cap("\n".join(texts), max_chars), tuple(images))


def result_text(result: mt.CallToolResult) -> str:
    """One text for the model, images as placeholders (no vision: a prompt's text only)."""
    return convert_result(result, max_images=0).text


def cap(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output cut: {len(text):,} characters, the first {limit:,} shown]"


def _fit(parts: list[_Part], limit: int) -> tuple[list[_Part], int]:
    """Leave out the lowest-priority parts (latest first among equals) until the rest fits,
    keeping at least one and never dropping parts of the highest priority present."""
    total = sum(len(p.text) + 1 for p in parts)
    if total <= limit or len(parts) < 2:
        return parts, 0
    top = max(p.priority for p in parts)
    order = sorted(
        (i for i, p in enumerate(parts) if p.priority < top), key=lambda i: (parts[i].priority, -i)
    )
    gone: set[int] = set()
    for i in order:
        if total <= limit:
            break
        gone.add(i)
        total -= len(parts[i].text) + 1
    return [p for i, p in enumerate(parts) if i not in gone], len(gone)


def _image_of(block: mt.ContentBlock) -> tuple[str, bytes] | None:
    match block:
        case mt.ImageContent(data=data, mime_type=mime):
            return mime.lower(), _decode(data)
        case mt.EmbeddedResource(resource=mt.BlobResourceContents(blob=blob, mime_type=mime)) if (
            (mime or "").lower().startswith("image/")
        ):
            return (mime or "").lower(), _decode(blob)
    return None


def _image_refusal(mime: str, raw: bytes, held: int, max_images: int, max_bytes: int) -> str | None:
    if max_images <= 0:
        return "tool results carry text only here"
    if mime not in VISION_TYPES:
        return "not a format models read"
    if not raw:
        return "empty or not valid base64"
    if len(raw) > max_bytes:
        return f"over the {max_bytes:,}-byte limit"
    if held >= max_images:
        return f"only the first {max_images} images of a result are shown"
    return None


def _block_text(block: mt.ContentBlock) -> str:
    match block:
        case mt.TextContent(text=text):
            return text
        case mt.AudioContent(data=data, mime_type=mime):
            return f"[audio {mime}, {len(_decode(data)):,} bytes: not shown, models here read no audio]"
        case mt.EmbeddedResource(resource=mt.TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case mt.EmbeddedResource(resource=resource):
            mime = getattr(resource, "mime_type", None) or "binary"
            return f"[resource {resource.uri}: {mime} content not shown]"
        case mt.ResourceLink(uri=uri, name=name):
            return f"[resource link {uri} ({name})]"
    return f"[{getattr(block, 'type', 'unknown')} content not shown]"


def _carries(text: str, structured: Any) -> bool:
    """The text block already says what the structured content does: its JSON, or (the
    SDKs wrap a plain return value as ``{"result": value}``) the wrapped value."""
    if _same_json(text, structured):
        return True
    if isinstance(structured, dict) and list(structured) == ["result"]:
        value = structured["result"]
        return text == value if isinstance(value, str) else _same_json(text, value)
    return False


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _decode(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""
