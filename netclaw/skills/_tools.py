"""The skill tools: ``load_skill`` (a skill's instructions), ``read_skill_file`` (a file
beside them, read-only, confined to the skill's folder) and, when ``skills.save_dir`` is
set, ``save_skill`` (the agent writes down a new skill; every call waits for a person's
approval, see ``netclaw.security.policy.ALWAYS_APPROVE``).

They are offered as a tool source (:class:`SkillTools`): ``load_skill`` and
``read_skill_file`` while any skill is loaded, so a daemon without skills spends no
tokens on them. A session only reaches the skills its audience sees. File I/O runs in a
worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, cast

from netclaw.config import Settings
from netclaw.errors import ToolError
from netclaw.security.confined import Folder
from netclaw.security.policy import Audience
from netclaw.skills._format import (
    NAME_MAX,
    NAME_PATTERN,
    SKILL_FILE,
    Skill,
    SkillError,
    check_name,
    parse_skill,
    render_skill,
)
from netclaw.skills._index import LOAD_SKILL, READ_SKILL_FILE, SAVE_SKILL, visible_skills
from netclaw.skills._load import LiveSkills, load_skills
from netclaw.toolspec import Tool, ToolContext, ToolReply

MAX_READ_BYTES = 64 * 1024
MAX_LISTED = 100  # files named under a loaded skill
MAX_BODY_CHARS = 50_000  # what save_skill accepts


class SkillTools:
    """The skill tools as a tool source of the registry (what it offers follows the
    loaded skills and the live settings)."""

    def __init__(self, skills: LiveSkills, settings_of: Callable[[], Settings]) -> None:
        self._skills = skills
        self._settings_of = settings_of
        self._load = Tool(
            LOAD_SKILL,
            "Load a skill from the skills index: its instructions, and the files beside them.",
            {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "the skill's name"}},
                "required": ["name"],
                "additionalProperties": False,
            },
            self._load_skill,
        )
        self._read = Tool(
            READ_SKILL_FILE,
            "Read a file of a skill (a path relative to its folder, as load_skill lists them).",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the skill's name"},
                    "path": {"type": "string", "description": "e.g. references/REFERENCE.md"},
                },
                "required": ["name", "path"],
                "additionalProperties": False,
            },
            self._read_skill_file,
        )
        self._save = Tool(
            SAVE_SKILL,
            "Write down a new skill (a procedure worth reusing); a person approves it first.",
            {
                "type": "object",
                "properties": {
                    # Checked before a person is asked to approve the call (sessions/_core/approvals.py).
                    "name": {
                        "type": "string",
                        "description": "lowercase-with-hyphens, at most 64",
                        "pattern": f"^{NAME_PATTERN}$",
                        "maxLength": NAME_MAX,
                    },
                    "description": {"type": "string", "description": "what it does and when to use it"},
                    "instructions": {
                        "type": "string",
                        "description": "the steps, in Markdown",
                        "minLength": 1,
                        "maxLength": MAX_BODY_CHARS,
                    },
                },
                "required": ["name", "description", "instructions"],
                "additionalProperties": False,
            },
            self._save_skill,
        )

    def tools(self) -> list[Tool]:
        offered = [self._load, self._read] if self._skills.current.skills else []
        if self._settings_of().skills.save_dir is not None:
            offered.append(self._save)
        return offered

    def _skill(self, args: Mapping[str, Any], ctx: ToolContext) -> Skill:
        name = args.get("name")
        if not isinstance(name, str) or not name:
            raise ToolError("'name' is required: a skill's name from the skills index")
        audience = cast(Audience, ctx.audience)
        visible = visible_skills(self._skills.current, self._settings_of(), audience)
        for skill in visible:
            if skill.name == name:
                return skill
        known = ", ".join(s.name for s in visible) or "none"
        raise ToolError(f"there is no skill named {name[:80]!r} here (skills you can load: {known})")

    # What the skill tools read of a skill the agent saved is labelled untrusted (ToolReply):
    # its words may come from whatever the session that saved it had read.

    async def _load_skill(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
        skill = self._skill(args, ctx)
        files = await asyncio.to_thread(list_files, skill.folder)
        listed = ", ".join(files[:MAX_LISTED]) + (
            f" (and {len(files) - MAX_LISTED} more)" if len(files) > MAX_LISTED else ""
        )
        head = f"Skill {skill.name}" + (f"; its files ({READ_SKILL_FILE}): {listed}" if files else "")
        return ToolReply(f"{head}\n\n{skill.body}", untrusted=skill.saved)

    async def _read_skill_file(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolReply:
        skill = self._skill(args, ctx)
        raw = args.get("path")
        return ToolReply(await asyncio.to_thread(read_in, skill.folder, raw), untrusted=skill.saved)

    async def _save_skill(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        config = self._settings_of().skills
        if config.save_dir is None:
            raise ToolError("saving skills is off (skills.save_dir is not set)")
        try:
            name = check_name(args.get("name"))
        except SkillError as exc:
            raise ToolError(str(exc)) from exc
        description, body = args.get("description"), args.get("instructions")
        if not isinstance(description, str) or not isinstance(body, str) or not body.strip():
            raise ToolError("'description' and 'instructions' are required strings")
        if len(body) > MAX_BODY_CHARS:
            raise ToolError(f"'instructions' is {len(body):,} characters; at most {MAX_BODY_CHARS:,}")
        existing = self._skills.current.get(name)
        if existing is not None:
            raise ToolError(
                f"a skill named {name!r} exists already (in {existing.folder}); choose another name"
            )
        text = render_skill(name, description, body)
        folder = config.save_dir / name
        try:  # the same checks as loading it will make
            parse_skill(text, folder, max_description=config.max_description_chars)
        except SkillError as exc:
            raise ToolError(str(exc)) from exc
        await asyncio.to_thread(_write_new, config.save_dir, name, text)
        loaded = await asyncio.to_thread(load_skills, config)
        self._skills.swap(loaded)
        return f"saved skill {name} in {folder}; it is in the skills index from the next message on"


def _relative(raw: object) -> str:
    """``raw`` as a path relative to a skill's folder: no path, an absolute one, ``~`` and
    ``..`` are refused (the reader stays in the folder; links are checked by the walk)."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("'path' is required: a file of the skill, relative to its folder")
    rel = raw.strip()
    if rel.startswith(("/", "~")):
        raise ToolError(f"{rel[:200]!r}: give a path relative to the skill's folder")
    if ".." in PurePosixPath(rel).parts:
        raise ToolError(f"{rel[:200]!r}: '..' is not allowed; the reader stays in the skill's folder")
    if "\x00" in rel:
        raise ToolError(f"{rel[:200]!r} cannot be opened: it contains a NUL character")
    return rel


def read_in(folder: Path, raw: object) -> str:
    """The text of the file ``raw`` names in ``folder`` (at most 64 KiB), or a folder's
    list. Opened beneath the folder (:class:`netclaw.security.confined.Folder`): a link may lead
    only to somewhere inside it, and a pipe or device is refused without blocking."""
    rel = _relative(raw)
    skill = Folder(folder, where="the skill's folder")
    if stat.S_ISDIR(skill.stat(rel).st_mode):
        listed = [f for f in skill.tree(rel, limit=10 * MAX_LISTED) if f != SKILL_FILE]
        return f"{rel} holds: {', '.join(listed) or 'nothing'}"
    data, size = skill.read(rel, limit=MAX_READ_BYTES + 1)
    try:
        text = data[:MAX_READ_BYTES].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < MAX_READ_BYTES - 3:  # not just a character cut at the limit
            raise ToolError(f"{rel!r} is not a text file") from exc
        text = data[: exc.start].decode("utf-8")
    if len(data) > MAX_READ_BYTES:
        text += f"\n[cut at {MAX_READ_BYTES:,} bytes of {size:,}]"
    return text


def list_files(folder: Path) -> list[str]:
    """The files under ``folder`` that ``read_skill_file`` opens (relative, sorted; hidden
    ones and SKILL.md left out): a link leading out of the folder is not one of them."""
    skill = Folder(folder, where="the skill's folder")
    return [f for f in skill.tree(limit=10 * MAX_LISTED + 1) if f != SKILL_FILE and _opens(skill, f)]


def _opens(skill: Folder, rel: str) -> bool:
    try:
        skill.stat(rel)
    except ToolError:
        return False
    return True


def _write_new(save_dir: Path, name: str, text: str) -> Path:
    """A new skill folder ``name`` under ``save_dir`` holding ``text`` as its SKILL.md,
    made beneath ``save_dir`` without following links (it may be a folder others write to)."""
    save_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    skills = Folder(save_dir, where="skills.save_dir")
    if not skills.make_new_dir(name, field="name"):
        raise ToolError(f"{save_dir / name} exists already; choose another name")
    skills.write(f"{name}/{SKILL_FILE}", text.encode("utf-8"))
    return save_dir / name
