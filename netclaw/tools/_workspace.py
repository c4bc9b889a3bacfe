"""The file tools — ``read_file``, ``write_file``, ``list_dir``, ``edit_file``, and
``share_file`` (show a workspace file in the conversation) — confined to the workspace
directory.

Every path is taken relative to the workspace and resolved (symlinks followed, the parent
of a file that does not exist yet included) before use; anything that resolves outside
the workspace is refused with a tool error naming it. File I/O runs in a worker thread,
never on the loop.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netclaw import attachments
from netclaw.attachments import IncomingFile
from netclaw.errors import InvalidInput, ToolError
from netclaw.tools._registry import Tool, ToolContext, ToolReply

MAX_READ_BYTES = 64 * 1024
MAX_LIST_ENTRIES = 500
MAX_WRITE_BYTES = 5 * 1024 * 1024


Owner = tuple[int, int]  # (uid, gid)


def ensure_workspace(root: Path, owner: Owner | None = None) -> Path:
    """The workspace directory, created (mode 0700) if missing. With ``owner`` (the shell
    sandbox's user, when the daemon runs as root) it and everything in it belong to them."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owner is not None:
        _chown_tree(root, owner)
    return root.resolve()


def _chown_tree(root: Path, owner: Owner) -> None:
    os.chown(root, *owner)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            if os.lstat(path).st_uid != owner[0]:
                os.chown(path, *owner, follow_symlinks=False)


def workspace_tools(root: Path, data_dir: Path | None = None, *, owner: Owner | None = None) -> list[Tool]:
    """The file tools on ``root``; with ``data_dir``, also ``share_file``. With ``owner``,
    what they write belongs to that user (the shell sandbox's, see :func:`ensure_workspace`)."""
    base = root.resolve()

    def inside(raw: object, *, field: str = "path") -> Path:
        return confined(base, raw, field=field)

    async def read_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        path = inside(args.get("path"))
        offset = _int(args.get("offset", 0), "offset")
        limit = _int(args.get("limit", MAX_READ_BYTES), "limit")
        return await asyncio.to_thread(_read, path, args["path"], offset, min(max(limit, 1), MAX_READ_BYTES))

    async def write_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        path = inside(args.get("path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("'content' is required: the whole text of the file")
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise ToolError(f"'content' is {len(data):,} bytes; at most {MAX_WRITE_BYTES:,} can be written")
        await asyncio.to_thread(_write, path, data, base, owner)
        return f"wrote {len(data):,} bytes to {path.relative_to(base)}"

    async def list_dir(args: Mapping[str, Any], ctx: ToolContext) -> str:
        path = inside(args.get("path") or ".")
        return await asyncio.to_thread(_list, path, base)

    async def edit_file(args: Mapping[str, Any], ctx: ToolContext) -> str:
        path = inside(args.get("path"))
        old, new = args.get("old_text"), args.get("new_text")
        if not isinstance(old, str) or not old:
            raise ToolError("'old_text' is required: the exact text to replace (it must occur once)")
        if not isinstance(new, str):
            raise ToolError("'new_text' is required: the text to put in its place")
        return await asyncio.to_thread(_edit, path, args["path"], old, new, base, owner)

    path_arg = {"type": "string", "description": "a path relative to the workspace"}
    return [
        *([share_file_tool(base, data_dir)] if data_dir is not None else []),
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


def confined(base: Path, raw: object, *, field: str = "path") -> Path:
    """``raw`` as a path inside the workspace ``base``; ToolError naming it otherwise."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError(f"'{field}' is required: a path relative to the workspace")
    if "\x00" in raw:
        raise ToolError(f"'{field}' contains a NUL character")
    candidate = Path(raw)
    if candidate.is_absolute():
        raise ToolError(f"{raw!r} is an absolute path; give a path inside the workspace (relative to it)")
    resolved = (base / candidate).resolve()
    if resolved != base and not resolved.is_relative_to(base):
        raise ToolError(f"{raw!r} is outside the workspace; only files inside it can be used")
    return resolved


def share_file_tool(base: Path, data_dir: Path) -> Tool:
    """``share_file``: a workspace file shown in the conversation. It is copied into the
    session's folder under ``data_dir`` first, so what was shown stays as it was."""

    async def share_file(args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
        path = confined(base, args.get("path"))
        name = args.get("name") or path.name
        if not isinstance(name, str):
            raise ToolError("'name' must be a string: the file name people see")
        try:
            data = await asyncio.to_thread(_read_shared, path, args["path"])
            stored = await asyncio.to_thread(
                attachments.store,
                data_dir,
                ctx.session_id or "api:unknown",
                [IncomingFile(name, mimetypes.guess_type(name)[0] or "application/octet-stream", data)],
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


def _read_shared(path: Path, shown: str) -> bytes:
    if not path.is_file():
        raise ToolError(f"{shown!r} is not a file in the workspace")
    size = path.stat().st_size
    if size > attachments.MAX_FILE_BYTES:
        raise ToolError(f"{shown!r} is {size:,} bytes; at most {attachments.MAX_FILE_BYTES:,} can be shared")
    if size == 0:
        raise ToolError(f"{shown!r} is empty; there is nothing to share")
    return path.read_bytes()


def _read(path: Path, shown: str, offset: int, limit: int) -> str:
    if path.is_dir():
        raise ToolError(f"{shown!r} is a directory; use list_dir")
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(limit)
    except FileNotFoundError as exc:
        raise ToolError(f"{shown!r} does not exist") from exc
    except OSError as exc:
        raise ToolError(f"cannot read {shown!r}: {exc.strerror}") from exc
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown!r} is a binary file ({size:,} bytes); only text files can be read")
    text = data.decode("utf-8", errors="replace")
    if offset + len(data) < size:
        text += f"\n[{size - offset - len(data):,} more bytes; read again with offset={offset + len(data)}]"
    return text


def _write(path: Path, data: bytes, base: Path, owner: Owner | None = None) -> None:
    if path.is_dir():
        raise ToolError(f"{path.relative_to(base)} is a directory")
    made = [p for p in reversed(path.parents) if p.is_relative_to(base) and not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write beside it and rename: a reader never sees half a file.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if owner is not None:
            for folder in made:
                os.chown(folder, *owner)
            os.chown(temp, *owner)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _list(path: Path, base: Path) -> str:
    if not path.is_dir():
        raise ToolError(f"{path.relative_to(base) if path != base else '.'} is not a directory")
    entries = sorted(path.iterdir(), key=lambda p: p.name)
    lines = []
    for entry in entries[:MAX_LIST_ENTRIES]:
        if entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            try:
                lines.append(f"{entry.name}  {entry.stat().st_size:,} bytes")
            except OSError:
                lines.append(f"{entry.name}  (unreadable)")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[{len(entries) - MAX_LIST_ENTRIES:,} more entries not shown]")
    return "\n".join(lines) if lines else "(empty)"


def _edit(path: Path, shown: str, old: str, new: str, base: Path, owner: Owner | None = None) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ToolError(f"{shown!r} does not exist") from exc
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown!r} is not a UTF-8 text file") from exc
    count = text.count(old)
    if count != 1:
        raise ToolError(
            f"old_text occurs {count} times in {shown!r}; it must occur exactly once (add surrounding lines)"
        )
    _write(path, text.replace(old, new, 1).encode("utf-8"), base, owner)
    return f"edited {shown}"
