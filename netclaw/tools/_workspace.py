"""The file tools — ``read_file``, ``write_file``, ``list_dir``, ``edit_file``, and
``share_file`` (show a workspace file in the conversation) — confined to the workspace
directory, and what must stay out of the workspace.

Every path is taken relative to the workspace and opened beneath it one component at a
time (:class:`netclaw.security.confined.Folder`): a directory or link swapped in while a call runs
cannot lead it out, links are followed only while they stay inside, and a named pipe,
socket or device is refused without blocking. File I/O runs in a worker thread, never on
the loop.

The workspace is the model's (and, when the daemon runs as root, the shell sandbox's user
owns it): nothing of the daemon's may lie inside it — :func:`check_out_of_reach`.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from netclaw import attachments
from netclaw.attachments import IncomingFile
from netclaw.errors import ConfigError, InvalidInput, ToolError
from netclaw.security.confined import Folder, Owner
from netclaw.tools._registry import Tool, ToolContext, ToolReply

MAX_READ_BYTES = 64 * 1024
MAX_LIST_ENTRIES = 500
MAX_WRITE_BYTES = 5 * 1024 * 1024

__all__ = ["Owner", "check_out_of_reach", "ensure_workspace", "share_file_tool", "workspace_tools"]


def ensure_workspace(root: Path, owner: Owner | None = None) -> Path:
    """The workspace directory, created (mode 0700) if missing. With ``owner`` (the shell
    sandbox's user, when the daemon runs as root) it and everything in it belong to them."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owner is not None:
        _chown_tree(root, owner)
    return root.resolve()


def _chown_tree(root: Path, owner: Owner) -> None:
    # fwalk: each directory is opened from its parent's descriptor and never through a link,
    # so a tree changed meanwhile cannot lead the walk (and the chown) out of the workspace.
    os.chown(root, *owner)
    for _folder, dirs, files, at in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                if os.stat(name, dir_fd=at, follow_symlinks=False).st_uid != owner[0]:
                    os.chown(name, *owner, dir_fd=at, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone meanwhile


def check_out_of_reach(workspace: Path, guarded: Iterable[tuple[str, Path | None]]) -> None:
    """Refuse a workspace that holds (or is) any of ``guarded`` — ``(what, path)`` pairs
    such as the data directory, the config file, a secret's file: the file tools and
    sandboxed commands may read and change everything in the workspace, and when the
    daemon runs as root its whole tree is given to the sandbox's user. A
    :class:`ConfigError` naming the fix."""
    ws = workspace.resolve()
    for what, path in guarded:
        if path is None:
            continue
        real = path.resolve()
        if real == ws or real.is_relative_to(ws):
            raise ConfigError(
                f"{what} ({real}) lies inside the workspace ({ws}), where the file tools and "
                "shell commands could read and change it: set tools.workspace_dir to a folder of "
                f"its own that holds none of the daemon's files, or move {what} out of it"
            )


def workspace_tools(root: Path, data_dir: Path | None = None, *, owner: Owner | None = None) -> list[Tool]:
    """The file tools on ``root``; with ``data_dir``, also ``share_file``. With ``owner``,
    what they write belongs to that user (the shell sandbox's, see :func:`ensure_workspace`)."""
    folder = Folder(root.resolve(), owner=owner)

    async def read_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        offset = _int(args.get("offset", 0), "offset")
        limit = _int(args.get("limit", MAX_READ_BYTES), "limit")
        return await asyncio.to_thread(
            _read, folder, args.get("path"), offset, min(max(limit, 1), MAX_READ_BYTES)
        )

    async def write_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("'content' is required: the whole text of the file")
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise ToolError(f"'content' is {len(data):,} bytes; at most {MAX_WRITE_BYTES:,} can be written")
        written = await asyncio.to_thread(folder.write, args.get("path"), data)
        return f"wrote {len(data):,} bytes to {written}"

    async def list_dir(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return await asyncio.to_thread(_list, folder, args.get("path") or ".")

    async def edit_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        old, new = args.get("old_text"), args.get("new_text")
        if not isinstance(old, str) or not old:
            raise ToolError("'old_text' is required: the exact text to replace (it must occur once)")
        if not isinstance(new, str):
            raise ToolError("'new_text' is required: the text to put in its place")
        return await asyncio.to_thread(_edit, folder, args.get("path"), old, new)

    path_arg = {"type": "string", "description": "a path relative to the workspace"}
    return [
        *([share_file_tool(folder, data_dir)] if data_dir is not None else []),
        Tool(
            "read_file",
            "Read a text file in the workspace (at most 64 KiB at a time; use offset for more).",
            {
                "type": "object",
                "properties": {
                    "path": path_arg,
                    "offset": {"type": "integer", "minimum": 0, "description": "byte offset to start at"},
                    "limit": {"type": "integer", "minimum": 1, "description": "bytes to read"},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
            read_file,
            untrusted=True,  # what a file says is anyone's who could write it
        ),
        Tool(
            "write_file",
            "Create or replace a text file in the workspace with the given content.",
            {
                "type": "object",
                "properties": {"path": path_arg, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": False,
            },
            write_file,
        ),
        Tool(
            "list_dir",
            "List a directory of the workspace: names (directories end in /) and sizes.",
            {"type": "object", "properties": {"path": path_arg}, "additionalProperties": False},
            list_dir,
            untrusted=True,  # file names are text too, and anyone's who could make a file
        ),
        Tool(
            "edit_file",
            "Replace one exact occurrence of old_text with new_text in a workspace file.",
            {
                "type": "object",
                "properties": {
                    "path": path_arg,
                    "old_text": {"type": "string"},
                    "new_text": {"type": "string"},
                },
                "required": ["path", "old_text", "new_text"],
                "additionalProperties": False,
            },
            edit_file,
        ),
    ]


def _int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ToolError(f"'{field}' must be a whole number, 0 or more")
    return value


def share_file_tool(folder: Folder, data_dir: Path) -> Tool:
    """``share_file``: a workspace file shown in the conversation. It is copied into the
    session's folder under ``data_dir`` first, so what was shown stays as it was."""

    async def share_file(args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
        raw = args.get("path")
        name = args.get("name") or (raw.rstrip("/").rsplit("/", 1)[-1] if isinstance(raw, str) else None)
        if name is not None and not isinstance(name, str):
            raise ToolError("'name' must be a string: the file name people see")
        data = await asyncio.to_thread(_read_shared, folder, raw)
        try:
            stored = await asyncio.to_thread(
                attachments.store,
                data_dir,
                ctx.session_id or "api:unknown",
                [
                    IncomingFile(
                        name or "file",
                        mimetypes.guess_type(name or "")[0] or "application/octet-stream",
                        data,
                    )
                ],
            )
        except InvalidInput as exc:
            raise ToolError(str(exc)) from exc
        shared = stored[0]
        return ToolReply(f"shared {shared.name} ({shared.size:,} bytes) in the conversation", stored)

    path_arg = {"type": "string", "description": "a path relative to the workspace"}
    return Tool(
        "share_file",
        "Show a workspace file to the people in this conversation (attached to your reply; "
        "write it first with write_file).",
        {
            "type": "object",
            "properties": {
                "path": path_arg,
                "name": {"type": "string", "description": "the file name people see (default: its own)"},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        share_file,
    )


def _read_shared(folder: Folder, raw: object) -> bytes:
    data, size = folder.read(raw, limit=attachments.MAX_FILE_BYTES + 1)
    shown = repr(str(raw)[:200])
    if size > attachments.MAX_FILE_BYTES or len(data) > attachments.MAX_FILE_BYTES:
        raise ToolError(f"{shown} is {size:,} bytes; at most {attachments.MAX_FILE_BYTES:,} can be shared")
    if not data:
        raise ToolError(f"{shown} is empty; there is nothing to share")
    return data


def _read(folder: Folder, raw: object, offset: int, limit: int) -> str:
    data, size = folder.read(raw, offset=offset, limit=limit)
    shown = repr(str(raw)[:200])
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown} is a binary file ({size:,} bytes); only text files can be read")
    text = data.decode("utf-8", errors="replace")
    if offset + len(data) < size:
        text += f"\n[{size - offset - len(data):,} more bytes; read again with offset={offset + len(data)}]"
    return text


def _list(folder: Folder, raw: object) -> str:
    entries = folder.entries(raw)
    lines = []
    for entry in entries[:MAX_LIST_ENTRIES]:
        if entry.kind == "dir":
            lines.append(f"{entry.name}/")
        elif entry.kind == "file":
            lines.append(f"{entry.name}  {entry.size:,} bytes")
        elif entry.kind == "link":
            lines.append(f"{entry.name}  (a symbolic link)")
        else:
            lines.append(f"{entry.name}  (not a regular file)")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[{len(entries) - MAX_LIST_ENTRIES:,} more entries not shown]")
    return "\n".join(lines) if lines else "(empty)"


def _edit(folder: Folder, raw: object, old: str, new: str) -> str:
    data, size = folder.read(raw, limit=MAX_WRITE_BYTES + 1)
    shown = repr(str(raw)[:200])
    if size > MAX_WRITE_BYTES:
        raise ToolError(f"{shown} is {size:,} bytes; files over {MAX_WRITE_BYTES:,} bytes cannot be edited")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown} is not a UTF-8 text file") from exc
    count = text.count(old)
    if count != 1:
        raise ToolError(
            f"old_text occurs {count} times in {shown}; it must occur exactly once (add surrounding lines)"
        )
    folder.write(raw, text.replace(old, new, 1).encode("utf-8"))
    return f"edited {raw}"
