"""The file tools inside a real temporary workspace: round trips, and every way out refused
(``..``, absolute paths, a symlinked file or directory pointing out, writing through one)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from netclaw.errors import ToolError
from netclaw.tools import ToolContext
from netclaw.tools._workspace import ensure_workspace, workspace_tools

CTX = ToolContext("cli:test", "personal")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return ensure_workspace(tmp_path / "workspace")


async def call(root: Path, name: str, **args: Any) -> str:
    tool = {t.name: t for t in workspace_tools(root)}[name]
    return await tool.handler(args, CTX)


def test_the_workspace_is_created_private(tmp_path: Path) -> None:
    made = ensure_workspace(tmp_path / "a" / "ws")
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o700


async def test_write_read_list_and_edit(root: Path) -> None:
    assert await call(root, "write_file", path="notes/todo.md", content="- milk\n- eggs\n") == (
        "wrote 14 bytes to notes/todo.md"
    )
    assert await call(root, "read_file", path="notes/todo.md") == "- milk\n- eggs\n"
    assert await call(root, "list_dir") == "notes/"
    assert await call(root, "list_dir", path="notes") == "todo.md  14 bytes"
    assert await call(root, "edit_file", path="notes/todo.md", old_text="eggs", new_text="bread") == (
        "edited notes/todo.md"
    )
    assert (root / "notes" / "todo.md").read_text() == "- milk\n- bread\n"
    partial = await call(root, "read_file", path="notes/todo.md", offset=2, limit=4)
    assert partial.startswith("milk") and "read again with offset=6" in partial
    assert not [p for p in (root / "notes").iterdir() if p.name.startswith(".")]  # no temp files left


async def test_edits_must_match_exactly_once(root: Path) -> None:
    (root / "a.txt").write_text("x x")
    with pytest.raises(ToolError, match="occurs 2 times"):
        await call(root, "edit_file", path="a.txt", old_text="x", new_text="y")
    with pytest.raises(ToolError, match="occurs 0 times"):
        await call(root, "edit_file", path="a.txt", old_text="z", new_text="y")


async def test_binary_files_are_refused(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(ToolError, match="binary file \\(300 bytes\\)"):
        await call(root, "read_file", path="blob.bin")


@pytest.mark.parametrize("path", ["../outside.txt", "notes/../../outside.txt", "/etc/passwd", "/tmp"])
async def test_paths_out_of_the_workspace_are_refused(root: Path, path: str) -> None:
    for name, extra in (("read_file", {}), ("write_file", {"content": "x"}), ("list_dir", {})):
        with pytest.raises(ToolError, match=r"outside the workspace|absolute path"):
            await call(root, name, path=path, **extra)
    assert not (root.parent / "outside.txt").exists()


async def test_symlinks_out_are_refused(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the password")
    outside_dir = tmp_path / "elsewhere"
    outside_dir.mkdir()
    os.symlink(secret, root / "link.txt")
    os.symlink(outside_dir, root / "door")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(root, "read_file", path="link.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(root, "write_file", path="door/new.txt", content="x")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(root, "write_file", path="link.txt", content="overwritten")
    assert secret.read_text() == "the password" and not (outside_dir / "new.txt").exists()
    # A link that stays inside is fine.
    (root / "real.txt").write_text("inside")
    os.symlink(root / "real.txt", root / "alias.txt")
    assert await call(root, "read_file", path="alias.txt") == "inside"


async def test_missing_arguments_are_named(root: Path) -> None:
    with pytest.raises(ToolError, match="'path' is required"):
        await call(root, "read_file")
    with pytest.raises(ToolError, match="'content' is required"):
        await call(root, "write_file", path="a.txt")
    with pytest.raises(ToolError, match="does not exist"):
        await call(root, "read_file", path="nope.txt")
