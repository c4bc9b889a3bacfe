"""Skills from disk, and the loaded set sessions read.

:func:`load_skills` walks the configured folders (I/O: the daemon calls it at start-up and
on SIGHUP, the CLI when asked); what it returns is a value, :class:`Skills`, that the daemon
swaps into :class:`LiveSkills` whole. A session reads ``LiveSkills.current`` at a turn's
start and never touches the disk.

A broken skill — bad front matter, a duplicate name, an over-long description, a file too
big — is one :class:`SkillProblem` naming the file and the field, and that skill is
skipped; the others load and the daemon starts.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from netclaw.config import SkillsConfig
from netclaw.skills._format import SKILL_FILE, Skill, SkillError, parse_skill

log = logging.getLogger(__name__)

MAX_SKILL_FILE_BYTES = 256 * 1024  # a SKILL.md; the format recommends well under 500 lines


@dataclass(frozen=True, slots=True)
class SkillProblem:
    """Why one skill was skipped: its file, the field (None: the file as a whole), why."""

    path: Path
    field: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.field + ': ' if self.field else ''}{self.message}"

    def to_json(self, *, full_path: bool = True) -> dict[str, str | None]:
        """``full_path=False``: the folder and file only (``/healthz`` answers anyone who can
        reach it; the host's paths are not theirs to read)."""
        path = str(self.path) if full_path else "/".join(self.path.parts[-2:])
        return {"path": path, "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class Skills:
    """The skills loaded (sorted by name) and the ones skipped, with why."""

    skills: tuple[Skill, ...] = ()
    problems: tuple[SkillProblem, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.skills]

    def summary(self) -> str:
        """One line for logs and ``netclaw status``."""
        line = f"{len(self.skills)} loaded"
        if self.problems:
            line += f", {len(self.problems)} skipped ({'; '.join(map(str, self.problems))})"
        return line


NO_SKILLS = Skills()


class LiveSkills:
    """The skills in force: a reload swaps the whole value (one attribute write, so a
    reader on another thread sees the old set or the new one, never half of each)."""

    __slots__ = ("_current",)

    def __init__(self, skills: Skills = NO_SKILLS) -> None:
        self._current = skills

    @property
    def current(self) -> Skills:
        return self._current

    def swap(self, skills: Skills) -> Skills:
        """Put ``skills`` in force; the set it replaces."""
        old, self._current = self._current, skills
        return old


def bundled_dir() -> Path | None:
    """The example skills that ship with netclaw: inside the installed wheel, else the
    source tree's ``skills/`` folder."""
    here = Path(__file__).resolve()
    for candidate in (here.parent.parent / "_skills", here.parents[2] / "skills"):
        if candidate.is_dir():
            return candidate
    return None


def skill_dirs(config: SkillsConfig) -> list[Path]:
    """Where skills are looked for, in order: ``dirs``, ``save_dir``, the bundled examples."""
    found = list(config.dirs)
    if config.save_dir is not None and config.save_dir not in found:
        found.append(config.save_dir)
    bundled = bundled_dir() if config.bundled else None
    if bundled is not None and bundled not in found:
        found.append(bundled)
    return found


def load_skills(config: SkillsConfig) -> Skills:
    """Every skill in the configured folders (blocking file I/O: not on the event loop)."""
    return load_from(
        skill_dirs(config), max_description=config.max_description_chars, saved_in=config.save_dir
    )


def load_from(dirs: Sequence[Path], *, max_description: int = 1024, saved_in: Path | None = None) -> Skills:
    """The skills in ``dirs``; those found in ``saved_in`` (``skills.save_dir``) are marked
    ``saved``."""
    loaded: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for root in dirs:
        if not root.is_dir():
            # A folder that is not there yet (save_dir before the first save) is not a problem.
            if root.exists():
                problems.append(SkillProblem(root, None, "is not a folder"))
            continue
        for folder in _skill_folders(root, problems):
            path = folder / SKILL_FILE
            try:
                skill = parse_skill(_read(path), folder, max_description=max_description)
                # The reader is confined to where the folder really is (it may be a symlink).
                skill = replace(skill, folder=folder.resolve(), saved=root == saved_in)
            except SkillError as exc:
                problems.append(SkillProblem(path, exc.field, exc.message))
                continue
            first = loaded.get(skill.name)
            if first is not None:
                problems.append(
                    SkillProblem(
                        path,
                        "name",
                        f"{skill.name!r} is already the skill in {'/'.join(first.folder.parts[-2:])} "
                        "(the first folder in skills.dirs wins)",
                    )
                )
                continue
            loaded[skill.name] = skill
    return Skills(tuple(sorted(loaded.values(), key=lambda s: s.name)), tuple(problems))


def _skill_folders(root: Path, problems: list[SkillProblem]) -> Iterable[Path]:
    """The skill folders of ``root`` (each with a SKILL.md), by name. Hidden entries are
    not skills; a folder without a SKILL.md is reported (a typo'd file name would otherwise
    make a skill disappear without a word)."""
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        problems.append(SkillProblem(root, None, f"cannot be read: {exc.strerror}"))
        return
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        if not (entry / SKILL_FILE).is_file():
            problems.append(SkillProblem(entry, None, f"has no {SKILL_FILE}"))
            continue
        yield entry


def _read(path: Path) -> str:
    # Non-blocking, checked on its descriptor: a SKILL.md swapped for a named pipe (a skill
    # folder others may write to) is refused instead of stopping every load on it.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise SkillError(None, f"cannot be read: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillError(None, "is not a regular file")
        if info.st_size > MAX_SKILL_FILE_BYTES:
            raise SkillError(
                None,
                f"is {info.st_size:,} bytes; at most {MAX_SKILL_FILE_BYTES:,} (move detail into files beside it)",
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_SKILL_FILE_BYTES + 1)
        if len(data) > MAX_SKILL_FILE_BYTES:
            raise SkillError(None, f"is over {MAX_SKILL_FILE_BYTES:,} bytes")
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillError(None, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise SkillError(None, f"cannot be read: {exc.strerror}") from exc
    finally:
        os.close(fd)
