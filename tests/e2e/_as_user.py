"""Running this repository's Python as another (unprivileged) user, from a root test run.

The interpreter, its packages and the checkout may live under a directory only root may
pass (pyenv under ``/root``, mode 0700). So the command starts in a private mount
namespace where each such directory is covered by an empty tmpfs that shows only the
paths the program needs, bind-mounted back at their own paths; then it drops to the user
with ``setpriv``. Nothing changes outside that namespace.
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def can_switch_user() -> str | None:
    """Why another user cannot be tried here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root, to start the daemon as another user"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    return None


def _blocked_by(path: Path) -> Path | None:
    """The highest directory above ``path`` that others may not pass (no o+x)."""
    for parent in reversed(path.parents):
        if parent == Path("/"):
            continue
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def _needed() -> Iterator[Path]:
    yield REPO_ROOT
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        yield Path(prefix).resolve()
    yield Path(os.path.realpath(sys.executable)).parent


def as_user(argv: Sequence[str], uid: int, gid: int) -> list[str]:
    """``argv`` wrapped to run as ``uid:gid`` with this interpreter and checkout visible."""
    shown: dict[Path, list[Path]] = {}
    for path in _needed():
        block = _blocked_by(path)
        if block is not None and path not in shown.setdefault(block, []):
            shown[block].append(path)
    lines = ["set -e"]
    if shown:
        stage = Path(tempfile.mkdtemp(prefix="run-", dir=_stages()))
        for n, (block, paths) in enumerate(shown.items()):
            for m, path in enumerate(paths):
                held = stage / f"{n}-{m}"
                held.mkdir()
                lines.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(held))}")
            lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(block))}")
            for m, path in enumerate(paths):
                held = stage / f"{n}-{m}"
                lines.append(f"mkdir -p {shlex.quote(str(path))}")
                lines.append(f"mount --bind {shlex.quote(str(held))} {shlex.quote(str(path))}")
    lines.append(f'exec setpriv --reuid={uid} --regid={gid} --clear-groups -- "$@"')
    script = "\n".join(lines)
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *argv]


@functools.cache
def _stages() -> Path:
    """Where the paths to show are held before the tmpfs covers them (empty mount points
    once each namespace is gone; removed when the test run ends)."""
    made = Path(tempfile.mkdtemp(prefix="netclaw-as-user-"))
    atexit.register(shutil.rmtree, made, True)
    return made


def open_dir_for(uid: int, gid: int) -> Path:
    """A fresh directory under /tmp that ``uid`` owns and can reach (the caller removes it)."""
    made = Path(tempfile.mkdtemp(prefix="netclaw-user-", dir="/tmp"))
    made.chmod(0o755)
    os.chown(made, uid, gid)
    return made
