"""Which skills a session sees, and the index of them in its system prompt (pure).

The index is part of the static system prompt, which heads every request of a session
and must be the same bytes on every call (the provider's prompt cache): it depends only
on the settings, the session's audience and the loaded skills — sorted by name, one line
each, nothing about the turn. It changes when a reload changes one of those.
"""

from __future__ import annotations

from collections.abc import Sequence

from netclaw.config import Settings
from netclaw.security.policy import Audience, tool_matches
from netclaw.security.trust import system_prompt as trusted_prompt
from netclaw.skills._format import Skill
from netclaw.skills._load import Skills

LOAD_SKILL = "load_skill"
READ_SKILL_FILE = "read_skill_file"
SAVE_SKILL = "save_skill"

INDEX_HEAD = (
    "Skills: procedures written down for you. When a request matches one, call "
    f"{LOAD_SKILL} with its name and follow what it says."
)


def visible_skills(skills: Skills, settings: Settings, audience: Audience) -> tuple[Skill, ...]:
    """The skills ``audience``'s sessions see (``audiences.<name>.skills``); none where the
    audience's tools do not include ``load_skill`` (an index of what cannot be loaded
    would only mislead the model)."""
    config = settings.audience(audience)
    chosen = config.skills
    if chosen == "none" or not skills.skills:
        return ()
    if config.tools is not None and not tool_matches(LOAD_SKILL, config.tools):
        return ()
    if chosen == "all":
        return skills.skills
    return tuple(s for s in skills.skills if tool_matches(s.name, chosen))


def skills_index(visible: Sequence[Skill]) -> str:
    """The index: a head line, then ``- name: description`` per skill, by name ("" for none)."""
    if not visible:
        return ""
    lines = [f"- {s.name}: {s.one_line}" for s in sorted(visible, key=lambda s: s.name)]
    return "\n".join([INDEX_HEAD, *lines])


def system_prompt(settings: Settings, audience: Audience, skills: Skills) -> str:
    """The static system prompt of a session of ``audience``: the configured prompt, how to
    treat untrusted content (netclaw/security/trust.py), and the index of the skills it sees."""
    base = trusted_prompt(settings.agent.system_prompt)
    index = skills_index(visible_skills(skills, settings, audience))
    return f"{base}\n\n{index}" if index else base
