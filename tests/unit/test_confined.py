"""Paths opened beneath a folder (netclaw/security/confined.py) against a tree that changes under
them: another process swapping a directory and a link out (renameat2 RENAME_EXCHANGE) all
the while, named pipes, sockets, devices, hard links, and links of every kind. The oracle
of the property test is the kernel's own resolution (realpath) of a tree that holds still."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netclaw.errors import ToolError
from netclaw.security.confined import Folder
from netclaw.tools import ToolContext
from netclaw.tools._workspace import ensure_workspace, workspace_tools

CTX = ToolContext("cli:test", "personal")

# Swaps two names for as long as it runs (a program the model started with `shell` can).
SWAPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


@contextlib.contextmanager
def swapping(a: Path, b: Path) -> Iterator[None]:
    process = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(a), str(b)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "swapping"
        yield
    finally:
        process.kill()
        process.wait()


async def call(root: Path, name: str, **args: Any) -> str:
    tool = {t.name: t for t in workspace_tools(root)}[name]
    result = await tool.handler(args, CTX)
    assert isinstance(result, str)
    return result


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with ``d/f`` ("inside") and ``l``, a link to a directory outside that
    holds ``f`` ("SECRET")."""
    root = ensure_workspace(tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("SECRET")
    (root / "d").mkdir()
    (root / "d" / "f").write_text("inside")
    os.symlink(outside, root / "l")
    return root, outside


async def test_a_directory_swapped_for_a_link_never_leads_a_read_or_a_write_out(
    tree: tuple[Path, Path],
) -> None:
    """The defect: the file tools resolved a path, then opened it; a swap in between made
    them read (and write) outside the workspace. Through the tools, as the daemon runs them."""
    root, outside = tree
    seen: dict[str, int] = {}
    with swapping(root / "d", root / "l"):
        deadline = time.monotonic() + 3.0
        calls = 0
        while time.monotonic() < deadline or calls < 300:
            calls += 1
            try:
                got = await call(root, "read_file", path="d/f")
            except ToolError:
                got = "refused"
            except OSError as exc:
                got = f"failed: {exc}"
            seen[got] = seen.get(got, 0) + 1
            try:
                await call(root, "write_file", path=f"d/new-{calls % 7}.txt", content="x")
            except ToolError:
                pass
            except OSError:
                seen["write failed"] = seen.get("write failed", 0) + 1
    assert "SECRET" not in seen, seen
    assert seen.get("inside", 0) > 0, seen  # it did work while the tree was the right way round
    assert sorted(p.name for p in outside.iterdir()) == ["f"], "a write landed outside the workspace"
    assert not [k for k in seen if "failed" in k], seen  # every refusal is a ToolError naming why


async def test_fifos_sockets_and_devices_are_refused_without_blocking(tmp_path: Path) -> None:
    root = ensure_workspace(tmp_path / "ws")
    os.mkfifo(root / "pipe")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "sock"))
        devices = []
        if os.geteuid() == 0:
            os.mknod(root / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
            devices.append("zero")
        started = time.monotonic()
        for name, kind in (
            ("pipe", "a named pipe"),
            ("sock", "a socket"),
            *((d, "a device") for d in devices),
        ):
            for tool, extra in (("read_file", {}), ("edit_file", {"old_text": "a", "new_text": "b"})):
                with pytest.raises(ToolError, match=f"'{name}' is {kind}, not a regular file"):
                    await call(root, tool, path=name, **extra)
            with pytest.raises(ToolError, match=f"'{name}' is {kind}; only regular files are written"):
                await call(root, "write_file", path=name, content="x")
        assert time.monotonic() - started < 5
        listing = await call(root, "list_dir")
        assert "pipe  (not a regular file)" in listing and "sock  (not a regular file)" in listing
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)  # left as it was


def test_links_are_followed_only_while_they_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("deep")
    (root / "top.txt").write_text("top")
    (tmp_path / "secret").write_text("SECRET")
    os.symlink("b", root / "a" / "rel")  # relative, inside
    os.symlink("../top.txt", root / "a" / "up")  # climbs, still inside
    os.symlink(root / "a" / "b" / "f", root / "abs-in")  # absolute, into the folder
    os.symlink(tmp_path / "secret", root / "abs-out")
    os.symlink("../secret", root / "rel-out")
    os.symlink("a/../../secret", root / "sneaky")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    folder = Folder(root)
    assert folder.read("a/rel/f", limit=100)[0] == b"deep"
    assert folder.read("a/up", limit=100)[0] == b"top"
    assert folder.read("abs-in", limit=100)[0] == b"deep"
    assert folder.read("a/b/../../top.txt", limit=100)[0] == b"top"
    for path in ("abs-out", "rel-out", "sneaky", "a/rel/../../../secret"):
        with pytest.raises(ToolError, match="outside the workspace"):
            folder.read(path, limit=100)
    with pytest.raises(ToolError, match="more than 40 symbolic links"):
        folder.read("loop1", limit=100)
    # A write follows a link inside to its target, and refuses one out.
    assert folder.write("a/up", b"changed") == "top.txt"
    assert (root / "top.txt").read_text() == "changed" and (root / "a" / "up").is_symlink()
    with pytest.raises(ToolError, match="outside the workspace"):
        folder.write("abs-out", b"overwritten")
    assert (tmp_path / "secret").read_text() == "SECRET"


def test_a_hard_link_to_someone_elses_file_is_not_read(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: a file of another user")
    root = tmp_path / "ws"
    root.mkdir()
    os.chown(root, 65534, 65534)
    secret = tmp_path / "root-only"
    secret.write_text("SECRET")
    os.link(secret, root / "linked")
    with pytest.raises(ToolError, match="has other hard links and belongs to someone else"):
        Folder(root).read("linked", limit=100)
    own = root / "own"
    own.write_text("mine")
    os.chown(own, 65534, 65534)
    os.link(own, root / "own2")
    assert Folder(root).read("own2", limit=100)[0] == b"mine"


def test_what_is_written_belongs_to_the_owner_and_nothing_else_changes_hands(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: files given to another user")
    root = tmp_path / "ws"
    root.mkdir()
    folder = Folder(root, owner=(65534, 65534))
    folder.write("new/deeper/file.txt", b"x")
    for path in (root / "new", root / "new" / "deeper", root / "new" / "deeper" / "file.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534), path
    assert stat.S_IMODE((root / "new" / "deeper" / "file.txt").stat().st_mode) == 0o600
    (root / "kept.txt").write_text("old")
    (root / "kept.txt").chmod(0o640)
    folder.write("kept.txt", b"new")
    assert stat.S_IMODE((root / "kept.txt").stat().st_mode) == 0o640  # its mode is kept
    assert root.stat().st_uid == 0  # the folder itself is the operator's business


def test_chowning_the_workspace_stays_inside_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: files given to another user")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("root's")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mine").write_text("x")
    os.symlink(outside, ws / "door")
    os.symlink(outside / "f", ws / "file-door")
    ensure_workspace(ws, (65534, 65534))
    assert (ws / "mine").stat().st_uid == 65534
    assert outside.stat().st_uid == 0 and (outside / "f").stat().st_uid == 0
    assert os.lstat(ws / "door").st_uid == 65534  # the link itself, not what it names


def test_bad_paths_are_named(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "file").write_text("x")
    folder = Folder(root)
    for raw, message in (
        ("", "'path' is required"),
        (None, "'path' is required"),
        ("a\x00b", "contains a NUL character"),
        ("/etc/passwd", "is an absolute path"),
        ("../x", "outside the workspace"),
        ("x" * 5000, "longer than 4096 characters"),
        ("file/below", "'file' is a regular file, not a directory"),
        ("missing/below", "does not exist in the workspace"),
    ):
        with pytest.raises(ToolError, match=message):
            folder.read(raw, limit=10)
    with pytest.raises(ToolError, match="is a directory"):
        folder.read(".", limit=10)
    assert not (root / "missing").exists()
    with pytest.raises(ToolError, match="outside the workspace"):
        folder.write("new/../../escape", b"x")
    assert not (root / "new").exists() and not (tmp_path / "escape").exists()


# -- the walk agrees with the kernel on a tree that holds still -----------------------------

NAMES = ("a", "b", "c")


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """Entries (path, kind, payload): directories, files, and links relative or absolute,
    pointing in, out, up, or nowhere."""
    entries: list[tuple[str, str, str]] = []
    for top in NAMES:
        kind = draw(st.sampled_from(["dir", "file", "link"]))
        entries.append((top, kind, draw(_link_targets) if kind == "link" else ""))
        if kind == "dir":
            for inner in NAMES:
                inner_kind = draw(st.sampled_from(["file", "link", "dir"]))
                payload = draw(_link_targets) if inner_kind == "link" else ""
                entries.append((f"{top}/{inner}", inner_kind, payload))
    return entries


_link_targets = st.sampled_from(
    [
        "a",
        "b/c",
        "../a",
        "../../outside/s",
        "..",
        ".",
        "c/../a",
        "@ROOT@/b",
        "@ROOT@/../outside/s",
        "/etc",
        "nope",
    ]
)
_paths = st.lists(st.sampled_from([*NAMES, "..", "."]), min_size=1, max_size=4).map("/".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=trees(), path=_paths)
def test_a_read_returns_only_what_the_kernel_finds_inside(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str, str]], path: str
) -> None:
    base = tmp_path_factory.mktemp("prop")
    root = base / "ws"
    root.mkdir()
    (base / "outside").mkdir()
    (base / "outside" / "s").write_text("SECRET")
    for rel, kind, payload in entries:
        target = root / rel
        if kind == "dir":
            target.mkdir()
        elif kind == "file":
            target.write_text(f"file {rel}")
        else:
            os.symlink(payload.replace("@ROOT@", str(root)), target)
    # The kernel's answer: what an ordinary open finds, and where that really is.
    try:
        fd = os.open(root / path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        kernel: tuple[str, bytes] | None = None
    else:
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            kernel = (os.readlink(f"/proc/self/fd/{fd}"), os.read(fd, 1000)) if regular else None
        finally:
            os.close(fd)
    inside = kernel is not None and kernel[0].startswith(str(root) + "/")
    try:
        data, _ = Folder(root).read(path, limit=1000)
    except ToolError:
        # Refusing where the kernel would read is allowed only for a path that, as the
        # kernel resolves it, ends outside or leaves the folder on the way.
        if inside and not _leaves_on_the_way(root, path):
            raise
        return
    assert kernel is not None and inside, f"{path!r} read {data!r}; the kernel finds {kernel}"
    assert data == kernel[1]


def _leaves_on_the_way(root: Path, path: str) -> bool:
    """Does resolving ``path`` pass through a point outside ``root`` (an absolute link out,
    or ``..`` above it), even if it comes back in?"""
    here = root
    todo = list(reversed(path.split("/")))
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if here == root:
                return True
            here = here.parent
            continue
        nxt = here / part
        if nxt.is_symlink():
            hops += 1
            if hops > 40:
                return True
            target = os.readlink(nxt)
            if target.startswith("/"):
                if not (target + "/").startswith(str(root) + "/"):
                    return True
                here = root
                target = target[len(str(root)) :]
            todo.extend(reversed(target.split("/")))
            continue
        here = nxt
    return False
