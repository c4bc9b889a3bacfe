"""Skills: procedures the agent learns from folders (the Agent Skills format).

- :mod:`._format`: one ``SKILL.md`` → a :class:`Skill`, or a :class:`SkillError` naming the field.
- :mod:`._load`: the configured folders → :class:`Skills` (loaded + skipped, with why);
  :class:`LiveSkills`, the set in force, swapped whole at start-up and on SIGHUP.
- :mod:`._index`: which skills an audience sees, and their index in the static system
  prompt (:func:`system_prompt`).
- :mod:`._tools`: ``load_skill``, ``read_skill_file`` and ``save_skill``.

Sessions read ``LiveSkills.current`` (a value) and call :func:`system_prompt`; nothing in
a session touches the disk.
"""

from netclaw.skills._format import SKILL_FILE, Skill, SkillError, parse_skill, render_skill
from netclaw.skills._index import (
    LOAD_SKILL,
    READ_SKILL_FILE,
    SAVE_SKILL,
    skills_index,
    system_prompt,
    visible_skills,
)
from netclaw.skills._load import (
    NO_SKILLS,
    LiveSkills,
    SkillProblem,
    Skills,
    bundled_dir,
    load_from,
    load_skills,
    skill_dirs,
)
from netclaw.skills._tools import SkillTools, list_files

__all__ = [
    "LOAD_SKILL",
    "NO_SKILLS",
    "READ_SKILL_FILE",
    "SAVE_SKILL",
    "SKILL_FILE",
    "LiveSkills",
    "Skill",
    "SkillError",
    "SkillProblem",
    "SkillTools",
    "Skills",
    "bundled_dir",
    "list_files",
    "load_from",
    "load_skills",
    "parse_skill",
    "render_skill",
    "skill_dirs",
    "skills_index",
    "system_prompt",
    "visible_skills",
]
