"""``/prompt server:name args``: an MCP server's prompt as the person's next message.

:func:`expand` answers a parsed command (:class:`~netclaw.commands.PromptCommand`) with
either the message to send — the prompt's messages as text, its images as attached
files — or a notice for the person: the list of prompts, a prompt's arguments when a
required one is missing (with the server's completions when it offers them), or what
went wrong. The binding of arguments and the rendering are pure functions beside it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import mcp_types as mt

from netclaw.attachments import IncomingFile
from netclaw.commands import PromptCommand
from netclaw.errors import ToolError
from netclaw.mcp._types import PromptExpansion

if TYPE_CHECKING:
    from netclaw.mcp._hub import McpHub

MAX_SUGGESTIONS = 8


def _answer(notice: str) -> PromptExpansion:
    return PromptExpansion(notice=notice)


async def expand(hub: McpHub, command: PromptCommand) -> PromptExpansion:
    if command.server is None:
        return _answer(await listing(hub))
    server = hub.server(command.server)
    if server is None:
        known = ", ".join(s.name for s in hub.servers) or "none are configured"
        return _answer(f"There is no MCP server named {command.server!r} (servers: {known}).")
    status = server.status()
    if status.state != "up":
        return _answer(
            f"MCP server {server.name} is {status.state}" + (f": {status.error}" if status.error else ".")
        )
    try:
        prompts = await server.list_prompts()
        if command.name is None:
            return _answer(server_listing(server.name, prompts))
        prompt = next((p for p in prompts if p.name == command.name), None)
        if prompt is None:
            return _answer(
                f"MCP server {server.name} has no prompt named {command.name!r}. "
                + server_listing(server.name, prompts)
            )
        arguments, problem = bind(prompt, command)
        if problem is not None:
            return _answer(problem)
        missing = [a for a in prompt.arguments or () if a.required and a.name not in arguments]
        if missing:
            suggestions = {
                a.name: (await server.complete_prompt_argument(prompt.name, a.name, "", arguments))[
                    :MAX_SUGGESTIONS
                ]
                for a in missing
            }
            return _answer(usage(server.name, prompt, missing, suggestions))
        result = await server.get_prompt(prompt.name, arguments)
    except ToolError as exc:
        return _answer(f"/prompt {command.server}:{command.name or ''}: {exc}")
    text, files = render(prompt.name, result)
    if not text.strip() and not files:
        return _answer(f"Prompt {server.name}:{prompt.name} came back empty; nothing was sent.")
    return PromptExpansion(text=text, files=files)


async def listing(hub: McpHub) -> str:
    lines = []
    for server in hub.servers:
        if server.status().state != "up" or not server.has("prompts"):
            continue
        try:
            prompts = await server.list_prompts()
        except ToolError as exc:
            lines.append(f"{server.name}: {exc}")
            continue
        lines += [prompt_line(server.name, p) for p in prompts]
    if not lines:
        return "No MCP server offers prompts right now."
    return "Prompts (send one with /prompt server:name args):\n" + "\n".join(lines)


def server_listing(server: str, prompts: Sequence[mt.Prompt]) -> str:
    if not prompts:
        return f"MCP server {server} offers no prompts."
    return f"Prompts of {server}:\n" + "\n".join(prompt_line(server, p) for p in prompts)


def prompt_line(server: str, prompt: mt.Prompt) -> str:
    args = ", ".join(a.name + ("" if a.required else "?") for a in prompt.arguments or ())
    line = f"{server}:{prompt.name}({args})"
    return f"{line} — {' '.join(prompt.description.split())}" if prompt.description else line


def bind(prompt: mt.Prompt, command: PromptCommand) -> tuple[dict[str, str], str | None]:
    """The arguments by name (``key=value`` ones, then positional ones in the prompt's
    order), or a sentence saying what does not fit."""
    declared = [a.name for a in prompt.arguments or ()]
    bound: dict[str, str] = {}
    for key, value in command.named:
        if key not in declared:
            accepted = ", ".join(declared) or "none"
            return {}, f"Prompt {prompt.name} has no argument {key!r} (it takes: {accepted})."
        bound[key] = value
    free = [name for name in declared if name not in bound]
    if len(command.positional) > len(free):
        extra = " ".join(command.positional[len(free) :])
        return {}, f"Too many arguments for prompt {prompt.name}: {extra!r} (quote a value with spaces)."
    bound.update(zip(free, command.positional, strict=False))
    return bound, None


def usage(
    server: str,
    prompt: mt.Prompt,
    missing: Sequence[mt.PromptArgument],
    suggestions: Mapping[str, Sequence[str]],
) -> str:
    names = ", ".join(a.name for a in missing)
    lines = [f"Prompt {server}:{prompt.name} needs {names}. Its arguments:"]
    for a in prompt.arguments or ():
        line = f"  {a.name} ({'required' if a.required else 'optional'})"
        if a.description:
            line += f": {' '.join(a.description.split())}"
        if suggestions.get(a.name):
            line += f" — for example {', '.join(suggestions[a.name])}"
        lines.append(line)
    example = " ".join(f"{a.name}=…" for a in prompt.arguments or () if a.required)
    lines.append(f"Send: /prompt {server}:{prompt.name} {example}")
    return "\n".join(lines)


def render(name: str, result: mt.GetPromptResult) -> tuple[str, tuple[IncomingFile, ...]]:
    """The prompt's messages as one text (a role label on each when not all are the
    person's), and its images as files."""
    files: list[IncomingFile] = []
    labelled = any(m.role != "user" for m in result.messages)
    parts = []
    for message in result.messages:
        text = _block(name, message.content, files)
        if text is None:
            continue
        parts.append(f"{message.role.capitalize()}: {text}" if labelled else text)
    return "\n\n".join(parts), tuple(files)


def _block(name: str, block: mt.ContentBlock, files: list[IncomingFile]) -> str | None:
    match block:
        case mt.TextContent(text=text):
            return text
        case mt.ImageContent(data=data, mime_type=mime):
            return _file(name, mime, data, files)
        case mt.EmbeddedResource(resource=mt.TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case mt.EmbeddedResource(resource=mt.BlobResourceContents(uri=uri, blob=blob, mime_type=mime)):
            if (mime or "").startswith("image/"):
                return _file(name, mime or "image/png", blob, files)
            return f"[resource {uri}: {mime or 'binary'} content not shown]"
        case mt.AudioContent(mime_type=mime):
            return f"[audio {mime}: not shown]"
        case mt.ResourceLink(uri=uri, name=link):
            return f"[resource link {uri} ({link})]"
    return None


def _file(name: str, mime: str, data: str, files: list[IncomingFile]) -> str | None:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[image {mime}: not valid base64, left out]"
    files.append(IncomingFile(f"{name}-{len(files) + 1}.{mime.rpartition('/')[2]}", mime, raw))
    return None
