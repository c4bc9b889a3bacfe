"""Paths that came from a model or a person, opened beneath one directory so that nothing
done to the tree meanwhile can lead them out of it.

Checking a path and opening it later is a race: between the two, a program the model
started can swap a directory for a symbolic link (``renameat2(RENAME_EXCHANGE)`` in a loop)
and the daemon opens ``/etc/shadow``. So nothing here resolves a path and then uses it:
:class:`Folder` walks a path one component at a time, each opened relative to the
descriptor of the directory before it (``O_PATH | O_NOFOLLOW``), and keeps the descriptors
of the directories it passed — what ``openat2(RESOLVE_BENEATH)`` does in the kernel, on
every kernel:

- ``..`` goes back to the descriptor kept for the parent, never through the file system,
  and never above the folder;
- a symbolic link is read and followed by the same walk (so a link that stays inside
  works), an absolute one is refused, and at most 40 links per path are followed;
- what the walk ends on is checked with ``fstat`` on its descriptor: only a regular file
  is read (a named pipe, socket or device is refused without ever being opened for
  reading, so nothing blocks), only a directory is listed;
- a file is read through a second, non-blocking ``O_NOFOLLOW`` open whose ``fstat`` must
  show the very file the walk found;
- a file is written beside its target under a fresh name (``O_CREAT | O_EXCL``, the new
  file's owner and mode set on its descriptor) and renamed over it: a link in the target's
  place is replaced, never written through, and so is a hard link;
- a regular file with other hard links that belongs to somebody other than the folder's
  owner is not read (a link to a file outside, made where ``fs.protected_hardlinks`` is off).

Everything here blocks: run it in a worker thread, never on the I/O loop.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from netclaw.errors import ToolError

Owner = tuple[int, int]  # (uid, gid)

MAX_PATH_CHARS = 4096
MAX_LINKS = 40  # per path, as the kernel's own limit

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def check_relative(raw: object, field: str, where: str) -> str:
    """``raw`` as a relative path to walk: a non-empty string, no NUL, not absolute."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError(f"'{field}' is required: a path relative to {where}")
    if "\x00" in raw:
        raise ToolError(f"'{field}' contains a NUL character")
    if len(raw) > MAX_PATH_CHARS:
        raise ToolError(f"'{field}' is longer than {MAX_PATH_CHARS} characters")
    if raw.startswith("/"):
        raise ToolError(f"{_shown(raw)} is an absolute path; give a path inside {where} (relative to it)")
    normal = posixpath.normpath(raw)
    if normal == ".." or normal.startswith("../"):  # out by its words alone: refused before any walk
        raise ToolError(f"{_shown(raw)} is outside {where}; only files inside it can be used")
    return raw


def _shown(raw: str) -> str:
    return repr(raw[:200])


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, as a person would say it."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a listed directory (links are not followed: ``kind`` is the link's)."""

    name: str
    kind: str  # "file" | "dir" | "link" | "other"
    size: int


@dataclass(slots=True)
class _Walk:
    """Where a walk ended: the descriptors of the directories passed (the last is the
    parent of ``name``), and the final name (None: the path is the folder itself or ends in
    a directory). Closed by :meth:`close`."""

    stack: list[int]
    name: str | None
    names: list[str]  # the directories passed, below the folder: the path as found

    @property
    def parent(self) -> int:
        return self.stack[-1]

    def up(self) -> bool:
        """Back to the directory the walk came from; False at the folder itself."""
        if len(self.stack) == 1:
            return False
        os.close(self.stack.pop())
        self.names.pop()
        return True

    def down(self, fd: int, name: str) -> None:
        self.stack.append(fd)
        self.names.append(name)

    def to_top(self) -> None:
        while self.up():
            pass

    @property
    def relative(self) -> str:
        """The path the walk found, relative to the folder ("." for the folder itself)."""
        return "/".join([*self.names, *([self.name] if self.name is not None else [])]) or "."

    def close(self) -> None:
        for fd in self.stack:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.stack.clear()


class Folder:
    """A directory (``root``, the operator's: its own path is trusted) beneath which
    relative paths are opened. ``owner``: who new files and directories belong to (when
    the daemon is root and the folder is the sandbox user's); ``where``: how error messages
    name the folder ("the workspace")."""

    def __init__(self, root: Path, *, owner: Owner | None = None, where: str = "the workspace") -> None:
        self.root = root
        self.owner = owner
        self.where = where
        # An absolute link is followed only into the folder, named by either of its paths.
        self._prefixes = tuple({str(root).rstrip("/") + "/", str(root.resolve()).rstrip("/") + "/"})

    # -- reading ----------------------------------------------------------------------------

    def read(self, raw: object, *, offset: int = 0, limit: int, field: str = "path") -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the regular file ``raw`` from ``offset``, and its size."""
        path = check_relative(raw, field, self.where)
        with self._opened_file(path) as (fd, info):
            data = os.pread(fd, limit, offset) if limit > 0 else b""
            return data, info.st_size

    def stat(self, raw: object, *, field: str = "path") -> os.stat_result:
        """What ``raw`` is (links inside followed): the file or directory's own ``fstat``."""
        path = check_relative(raw, field, self.where)
        walk = self._walk(path, follow_last=True)
        try:
            fd = self._final(walk, path)
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        finally:
            walk.close()

    def entries(self, raw: object = ".", *, field: str = "path") -> list[Entry]:
        """The entries of the directory ``raw``, sorted by name."""
        listed = self._directory(raw, field)
        try:
            return sorted(_entries(listed), key=lambda e: e.name)
        finally:
            os.close(listed)

    def _directory(self, raw: object, field: str) -> int:
        """A readable descriptor of the directory ``raw`` (walked, never followed out)."""
        path = check_relative(raw, field, self.where) if raw != "." else "."
        walk = self._walk(path, follow_last=True)
        try:
            at = self._final(walk, path)
            try:
                if not stat.S_ISDIR(os.fstat(at).st_mode):
                    raise ToolError(f"{_shown(path)} is not a directory")
                return os.open(".", _DIR, dir_fd=at)
            finally:
                os.close(at)
        finally:
            walk.close()

    def tree(self, raw: object = ".", *, limit: int = 10_000, field: str = "path") -> list[str]:
        """The regular files (and links) under the directory ``raw``, relative to it and
        sorted; hidden names (``.x``) left out, links not followed, at most ``limit``."""
        top = self._directory(raw, field)
        found: list[str] = []
        try:
            # fwalk opens each directory from its parent's descriptor, never through a link.
            for base, dirs, files, _fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not name.startswith("."):
                        found.append(os.path.normpath(os.path.join(base, name)))
                if len(found) >= limit:
                    break
        finally:
            os.close(top)
        return sorted(found[:limit])

    # -- writing ----------------------------------------------------------------------------

    def write(self, raw: object, data: bytes, *, field: str = "path") -> str:
        """``raw`` created or replaced whole with ``data`` (directories on the way made);
        the path written, relative to the folder, as the walk found it."""
        path = check_relative(raw, field, self.where)
        walk = self._walk(path, follow_last=True, make_dirs=True)
        try:
            if walk.name is None:
                raise ToolError(f"{_shown(path)} is a directory")
            self._replace(walk.parent, walk.name, data, path)
            return walk.relative
        finally:
            walk.close()

    def make_new_dir(self, raw: object, *, field: str = "path") -> bool:
        """A new directory ``raw`` (its parents made too); False when something of that
        name exists already."""
        path = check_relative(raw, field, self.where)
        walk = self._walk(path, follow_last=False, make_dirs=True)
        try:
            if walk.name is None:
                return False
            try:
                os.mkdir(walk.name, 0o700, dir_fd=walk.parent)
            except FileExistsError:
                return False
            except OSError as exc:
                raise ToolError(f"cannot make {_shown(path)}: {exc.strerror}") from exc
            self._own_dir(walk.parent, walk.name)
            return True
        finally:
            walk.close()

    # -- the walk ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _opened_file(self, path: str) -> Iterator[tuple[int, os.stat_result]]:
        walk = self._walk(path, follow_last=True)
        try:
            found = self._final(walk, path)
            try:
                info = os.fstat(found)
            finally:
                os.close(found)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{_shown(path)} is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(
                    f"{_shown(path)} is {kind_of(info.st_mode)}, not a regular file; it cannot be read"
                )
            self._check_links(info, path)
            assert walk.name is not None
            try:
                fd = os.open(walk.name, _READ, dir_fd=walk.parent)
            except OSError as exc:
                raise ToolError(f"cannot read {_shown(path)}: {exc.strerror}") from exc
            try:
                opened = os.fstat(fd)
                if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                    raise ToolError(f"{_shown(path)} was replaced while it was being opened; try again")
                yield fd, opened
            finally:
                os.close(fd)
        finally:
            walk.close()

    def _check_links(self, info: os.stat_result, path: str) -> None:
        if info.st_nlink <= 1:
            return
        with contextlib.suppress(OSError):
            if info.st_uid == os.stat(self.root).st_uid:
                return
        raise ToolError(
            f"{_shown(path)} has other hard links and belongs to someone else (uid {info.st_uid}); "
            "it may be a file outside, so it is not read"
        )

    def _final(self, walk: _Walk, path: str) -> int:
        """An ``O_PATH`` descriptor of what the walk ended on (the caller closes it)."""
        if walk.name is None:
            return os.dup(walk.parent)
        try:
            return os.open(walk.name, _PATH, dir_fd=walk.parent)
        except FileNotFoundError as exc:
            raise ToolError(f"{_shown(path)} does not exist in {self.where}") from exc
        except OSError as exc:
            raise ToolError(f"cannot open {_shown(path)}: {exc.strerror}") from exc

    def _walk(self, path: str, *, follow_last: bool, make_dirs: bool = False) -> _Walk:
        """Walk ``path`` from the folder. Every component but the last must be a directory
        (made when ``make_dirs``); a link is followed in place (the last one only with
        ``follow_last``); the last component is left unopened: ``name``."""
        try:
            root = os.open(self.root, _DIR)
        except OSError as exc:
            raise ToolError(f"{self.where} cannot be opened: {exc.strerror}") from exc
        walk = _Walk([root], None, [])
        try:
            todo = list(reversed(path.split("/")))
            links = 0
            while todo:
                name = todo.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not walk.up():
                        how = " through a symbolic link" if links else ""
                        raise ToolError(
                            f"{_shown(path)} leads outside {self.where}{how}; only files inside it can be used"
                        )
                    continue
                last = all(p in ("", ".") for p in todo)
                fd = self._entry(walk, name, path, last=last, make_dirs=make_dirs)
                mode = os.fstat(fd).st_mode if fd is not None else 0
                if fd is not None and stat.S_ISDIR(mode):
                    walk.down(fd, name)
                    continue
                if fd is not None:
                    os.close(fd)
                if stat.S_ISLNK(mode) and (follow_last or not last):
                    links += 1
                    if links > MAX_LINKS:
                        raise ToolError(f"{_shown(path)} goes through more than {MAX_LINKS} symbolic links")
                    target = self._link(walk.parent, name, path)
                    if target.startswith("/"):  # into the folder by an absolute path: from its top
                        walk.to_top()
                    todo.extend(reversed(target.split("/")))
                    continue
                if not last:
                    raise ToolError(f"{_shown(path)}: {name!r} is {kind_of(mode)}, not a directory")
                walk.name = name  # missing, a file, or a link not to be followed
                return walk
            return walk  # the folder itself, or a directory in it
        except BaseException:
            walk.close()
            raise

    def _entry(self, walk: _Walk, name: str, path: str, *, last: bool, make_dirs: bool) -> int | None:
        """An ``O_PATH`` descriptor of ``name`` in the walk's directory; None when the last
        component does not exist; a directory made first when ``make_dirs``."""
        try:
            return os.open(name, _PATH, dir_fd=walk.parent)
        except FileNotFoundError:
            if last:
                return None
            if not make_dirs:
                raise ToolError(f"{_shown(path)} does not exist in {self.where}") from None
            return self._make_dir(walk.parent, name, path)
        except OSError as exc:
            raise ToolError(f"cannot open {_shown(path)}: {exc.strerror}") from exc

    def _link(self, parent: int, name: str, path: str) -> str:
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError as exc:  # swapped for something else meanwhile
            raise ToolError(f"{_shown(path)} changed while it was being opened; try again") from exc
        if target.startswith("/"):
            inside = next((target[len(p) :] for p in self._prefixes if (target + "/").startswith(p)), None)
            if inside is None:
                raise ToolError(
                    f"{_shown(path)} leads outside {self.where} through a symbolic link "
                    f"({name} -> {target[:200]}); refused"
                )
            return "/" + inside  # the walk starts again at the folder
        if not target:
            raise ToolError(f"{_shown(path)} goes through an empty symbolic link")
        return target

    def _make_dir(self, parent: int, name: str, path: str) -> int:
        try:
            os.mkdir(name, 0o777, dir_fd=parent)  # the umask decides, as for any directory made
        except FileExistsError:
            pass  # made meanwhile: opened below like any other
        except OSError as exc:
            raise ToolError(f"cannot make the directories of {_shown(path)}: {exc.strerror}") from exc
        else:
            self._own_dir(parent, name)
        try:
            return os.open(name, _PATH, dir_fd=parent)
        except OSError as exc:
            raise ToolError(f"cannot open {_shown(path)}: {exc.strerror}") from exc

    def _own_dir(self, parent: int, name: str) -> None:
        if self.owner is None:
            return
        try:  # on its own descriptor: whatever is at that name now, if not this directory, is left alone
            fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
        except OSError:
            return
        try:
            os.fchown(fd, *self.owner)
        finally:
            os.close(fd)

    def _replace(self, parent: int, name: str, data: bytes, path: str) -> None:
        mode = 0o600
        try:
            there = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(there.st_mode):
                raise ToolError(f"{_shown(path)} is a directory")
            if not stat.S_ISREG(there.st_mode):
                raise ToolError(f"{_shown(path)} is {kind_of(there.st_mode)}; only regular files are written")
            mode = stat.S_IMODE(there.st_mode)
        temp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=parent,
            )
        except OSError as exc:
            raise ToolError(f"cannot write {_shown(path)}: {exc.strerror}") from exc
        try:
            try:
                with os.fdopen(fd, "wb", closefd=False) as fh:
                    fh.write(data)
                if self.owner is not None:
                    os.fchown(fd, *self.owner)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            # Write beside it and rename: a reader never sees half a file, and whatever
            # stands at the name (a link, a hard link) is replaced, not written through.
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            if isinstance(exc, OSError):
                raise ToolError(f"cannot write {_shown(path)}: {exc.strerror}") from exc
            raise


def _entries(fd: int) -> Iterator[Entry]:
    with os.scandir(fd) as found:
        for entry in found:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                yield Entry(entry.name, "other", 0)
                continue
            if stat.S_ISDIR(info.st_mode):
                yield Entry(entry.name, "dir", 0)
            elif stat.S_ISLNK(info.st_mode):
                yield Entry(entry.name, "link", 0)
            elif stat.S_ISREG(info.st_mode):
                yield Entry(entry.name, "file", info.st_size)
            else:
                yield Entry(entry.name, "other", 0)
