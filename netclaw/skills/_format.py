"""One skill, read from its ``SKILL.md`` (pure: text in, a :class:`Skill` or a
:class:`SkillError` out).

The Agent Skills format: YAML front matter between two ``---`` lines, then a Markdown
body. ``name`` (1-64 lowercase letters, digits and single hyphens, not at either end,
the same as the skill's folder) and ``description`` (non-empty, at most 1024 characters)
are required; ``license``, ``compatibility`` (at most 500 characters), ``metadata`` (a map
of strings) and ``allowed-tools`` (a space-separated string or a list) are optional.
Other keys are ignored, as clients do with each other's extensions.

``allowed-tools`` is read and shown but grants nothing: what the model may call stays what
the audience and the speaker's role allow (a file on disk must not widen that).

YAML is parsed with PyYAML's safe loader, and front matter with anchors or aliases is
refused before it is built (no "billion laughs" expansion from a skill the agent saved).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
FRONT_MATTER_MAX = 16 * 1024  # characters between the two --- lines
SKILL_FILE = "SKILL.md"
NAME_PATTERN = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_NAME = re.compile(NAME_PATTERN)
_FENCE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)


class SkillError(ValueError):
    """What is wrong with one skill: the field (None: the file as a whole) and why."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Skill:
    """A loaded skill: what the index shows (``name``, ``description``), what
    ``load_skill`` returns (``body``), and where its files are (``folder``). ``saved``: it
    lies in ``skills.save_dir``, where the agent writes skills (``save_skill``) — its text
    is not the operator's, so what the skill tools read of it is labelled untrusted."""

    name: str
    description: str
    body: str
    folder: Path
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    saved: bool = False

    @property
    def one_line(self) -> str:
        """The description as the index shows it: whitespace (newlines included) folded, so
        a description cannot start a line of its own in the system prompt."""
        return " ".join(self.description.split())


def check_name(name: object, folder: str | None = None) -> str:
    """``name`` if it is a valid skill name (and the folder's, when given); else SkillError."""
    if not isinstance(name, str) or not name:
        raise SkillError("name", "is required: 1-64 lowercase letters, digits and hyphens")
    if len(name) > NAME_MAX:
        raise SkillError("name", f"{name[:80]!r} is {len(name)} characters; at most {NAME_MAX}")
    if not _NAME.fullmatch(name):
        raise SkillError(
            "name",
            f"{name[:80]!r}: use lowercase letters, digits and single hyphens, not at the start or end",
        )
    if folder is not None and folder != name:
        raise SkillError("name", f"{name!r} must be the name of its folder ({folder!r})")
    return name


def parse_skill(text: str, folder: Path, *, max_description: int = DESCRIPTION_MAX) -> Skill:
    """The skill ``text`` (a SKILL.md) describes, in ``folder``. Raises SkillError."""
    head, body = split_front_matter(text)
    data = _load_yaml(head)
    name = check_name(data.get("name"), folder.name)
    description = _string(data, "description", required=True)
    assert description is not None
    if not description.strip():
        raise SkillError("description", "is empty; say what the skill does and when to use it")
    if len(description) > max_description:
        raise SkillError(
            "description",
            f"is {len(description)} characters; at most {max_description} (skills.max_description_chars)",
        )
    compatibility = _string(data, "compatibility")
    if compatibility is not None and len(compatibility) > COMPATIBILITY_MAX:
        raise SkillError("compatibility", f"is {len(compatibility)} characters; at most {COMPATIBILITY_MAX}")
    return Skill(
        name=name,
        description=description.strip(),
        body=body.strip("\n"),
        folder=folder,
        license=_string(data, "license"),
        compatibility=compatibility,
        allowed_tools=_allowed_tools(data.get("allowed-tools")),
        metadata=_metadata(data.get("metadata")),
    )


def split_front_matter(text: str) -> tuple[str, str]:
    """(front matter, body) of a SKILL.md; SkillError when it has no front matter."""
    text = text.removeprefix("\ufeff")
    first = _FENCE.match(text)
    if first is None:
        raise SkillError(
            None, "no front matter: the file must start with a line '---', then YAML, then '---'"
        )
    end = _FENCE.search(text, first.end())
    if end is None:
        raise SkillError(None, "the front matter has no closing '---' line")
    head = text[first.end() : end.start()]
    if len(head) > FRONT_MATTER_MAX:
        raise SkillError(None, f"the front matter is {len(head):,} characters; at most {FRONT_MATTER_MAX:,}")
    return head, text[end.end() :]


def render_skill(name: str, description: str, body: str) -> str:
    """A SKILL.md for ``name`` (what ``save_skill`` writes): the front matter is emitted by
    PyYAML, so any description round-trips."""
    head = yaml.safe_dump({"name": name, "description": description}, sort_keys=False, allow_unicode=True)
    return f"---\n{head}---\n\n{body.strip()}\n"


def _load_yaml(head: str) -> dict[str, Any]:
    try:
        for event in yaml.parse(head, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise SkillError(None, "the front matter uses YAML anchors or aliases; write the values out")
        data = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""  # 0-based, from the first --- line
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillError(None, f"the front matter is not valid YAML{where}: {problem}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillError(None, "the front matter must be a YAML mapping (key: value lines)")
    return {str(k): v for k, v in data.items()}


def _string(data: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise SkillError(key, "is required")
        return None
    if not isinstance(value, str):
        raise SkillError(key, f"must be a string, not {type(value).__name__}")
    return value


def _allowed_tools(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SkillError("allowed-tools", "must be a space-separated string or a list of strings")


def _metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SkillError("metadata", "must be a mapping of keys to strings")
    found: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, (dict, list)):
            raise SkillError("metadata", f"{key!s}: values must be strings, not a {type(item).__name__}")
        found[str(key)] = "" if item is None else str(item)  # `version: 1.0` is a float to YAML
    return found
