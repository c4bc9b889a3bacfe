"""Skills from folders: the SKILL.md format and its checks (each a clear error naming the
file and field, that skill skipped, the rest loaded), duplicates, the index an audience
sees in its static system prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from netclaw.config import SkillsConfig
from netclaw.security.trust import system_prompt as trusted
from netclaw.skills import (
    NO_SKILLS,
    LiveSkills,
    SkillError,
    Skills,
    bundled_dir,
    load_from,
    load_skills,
    parse_skill,
    render_skill,
    skills_index,
    system_prompt,
    visible_skills,
)
from tests.unit.sessions.harness import settings


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    path = root / folder
    path.mkdir(parents=True, exist_ok=True)
    (path / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return path


def skill_text(
    name: str = "pdf-forms", description: str = "Fill PDF forms. Use when a PDF form is attached."
) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n# Steps\n1. Read it.\n"


# -- the format ---------------------------------------------------------------------------------


def test_a_skill_with_every_field() -> None:
    text = """---
name: pdf-forms
description: >
  Fill PDF forms.
  Use when a PDF form is attached.
license: Apache-2.0
compatibility: Needs poppler-utils
metadata:
  author: example-org
  version: 1.0
allowed-tools: Bash(pdftk:*) Read
unknown-extension: ignored
---

# Steps
1. Read it.
"""
    skill = parse_skill(text, Path("/skills/pdf-forms"))
    assert skill.name == "pdf-forms"
    assert skill.description == "Fill PDF forms. Use when a PDF form is attached."
    assert skill.body == "# Steps\n1. Read it."
    assert skill.license == "Apache-2.0" and skill.compatibility == "Needs poppler-utils"
    assert dict(skill.metadata) == {"author": "example-org", "version": "1.0"}
    assert skill.allowed_tools == ("Bash(pdftk:*)", "Read")
    listed = parse_skill(
        skill_text().replace("---\n#", "allowed-tools: [Read, Write]\n---\n#"), Path("/s/pdf-forms")
    )
    assert listed.allowed_tools == ("Read", "Write")


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("no front matter here", None, "no front matter"),
        ("---\nname: pdf-forms\n", None, "no closing '---'"),
        ("---\nname: [pdf\n---\n", None, "not valid YAML at line"),
        ("---\n- a list\n---\n", None, "must be a YAML mapping"),
        ("---\ndescription: x\n---\n", "name", "is required"),
        (
            "---\nname: PDF-Forms\ndescription: x\n---\n",
            "name",
            "lowercase letters, digits and single hyphens",
        ),
        ("---\nname: -pdf\ndescription: x\n---\n", "name", "not at the start or end"),
        ("---\nname: pdf--forms\ndescription: x\n---\n", "name", "single hyphens"),
        (
            "---\nname: other-name\ndescription: x\n---\n",
            "name",
            "must be the name of its folder ('pdf-forms')",
        ),
        ("---\nname: pdf-forms\n---\n", "description", "is required"),
        ("---\nname: pdf-forms\ndescription: '  '\n---\n", "description", "is empty"),
        ("---\nname: pdf-forms\ndescription: [a, b]\n---\n", "description", "must be a string, not list"),
        (
            "---\nname: pdf-forms\ndescription: " + "x" * 1025 + "\n---\n",
            "description",
            "is 1025 characters; at most 1024",
        ),
        (
            "---\nname: pdf-forms\ndescription: x\ncompatibility: " + "y" * 501 + "\n---\n",
            "compatibility",
            "at most 500",
        ),
        ("---\nname: pdf-forms\ndescription: x\nmetadata: [1]\n---\n", "metadata", "must be a mapping"),
        (
            "---\nname: pdf-forms\ndescription: x\nmetadata: {a: {b: c}}\n---\n",
            "metadata",
            "values must be strings",
        ),
        (
            "---\nname: pdf-forms\ndescription: x\nallowed-tools: 3\n---\n",
            "allowed-tools",
            "space-separated string or a list",
        ),
    ],
)
def test_what_is_wrong_names_the_field(text: str, field: str | None, message: str) -> None:
    with pytest.raises(SkillError) as caught:
        parse_skill(text, Path("/skills/pdf-forms"))
    assert caught.value.field == field
    assert message in caught.value.message


def test_a_name_longer_than_64_characters_is_refused() -> None:
    name = "a" * 65
    with pytest.raises(SkillError, match=r"is 65 characters; at most 64"):
        parse_skill(skill_text(name=name), Path("/skills") / name)


def test_yaml_aliases_are_refused_before_they_expand() -> None:
    bomb = "---\nname: pdf-forms\ndescription: x\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n---\n"
    with pytest.raises(SkillError, match=r"anchors or aliases"):
        parse_skill(bomb, Path("/skills/pdf-forms"))


def test_a_lower_description_limit_is_configurable() -> None:
    with pytest.raises(SkillError, match=r"at most 20 \(skills.max_description_chars\)"):
        parse_skill(skill_text(), Path("/skills/pdf-forms"), max_description=20)


def test_a_byte_order_mark_and_crlf_line_ends_are_read() -> None:
    text = "\ufeff" + skill_text().replace("\n", "\r\n")
    skill = parse_skill(text, Path("/skills/pdf-forms"))
    assert skill.name == "pdf-forms" and skill.description.startswith("Fill PDF forms.")


def test_render_skill_round_trips_any_description() -> None:
    description = 'Tricky: "quotes", colons: here\nand a --- line'
    text = render_skill("tricky", description, "Step one.")
    skill = parse_skill(text, Path("/skills/tricky"))
    assert skill.description == description.strip() and skill.body == "Step one."


# -- loading ------------------------------------------------------------------------------------


def test_loading_skips_each_broken_skill_with_its_file_and_field_and_keeps_the_rest(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_skill(first, "zeta-notes", "name: zeta-notes\ndescription: Z.\n")
    write_skill(first, "alpha-plan", "name: alpha-plan\ndescription: A.\n")
    write_skill(first, "bad-yaml", "name: [bad\n")
    write_skill(first, "long-one", "name: long-one\ndescription: " + "x" * 1100 + "\n")
    (first / "no-skill-file").mkdir()
    (first / "notes.txt").write_text("a file beside the skills is not a skill")
    (first / ".hidden").mkdir()
    write_skill(second, "alpha-plan", "name: alpha-plan\ndescription: The second one.\n")
    write_skill(second, "beta-run", "name: beta-run\ndescription: B.\n")

    skills = load_from([first, second, tmp_path / "missing"])
    assert skills.names == ["alpha-plan", "beta-run", "zeta-notes"]  # sorted by name
    assert skills.get("alpha-plan") is not None
    assert skills.get("alpha-plan").description == "A."  # type: ignore[union-attr]  # the first found wins
    problems = {(p.path.relative_to(tmp_path).as_posix(), p.field): p.message for p in skills.problems}
    assert problems.keys() == {
        ("first/bad-yaml/SKILL.md", None),
        ("first/long-one/SKILL.md", "description"),
        ("first/no-skill-file", None),
        ("second/alpha-plan/SKILL.md", "name"),
    }
    assert "already the skill in" in problems[("second/alpha-plan/SKILL.md", "name")]
    assert "has no SKILL.md" in problems[("first/no-skill-file", None)]
    assert "3 loaded, 4 skipped" in skills.summary()


def test_files_that_cannot_be_skills_are_reported(tmp_path: Path) -> None:
    write_skill(tmp_path, "huge", "name: huge\ndescription: H.\n", "x" * 300_000)
    folder = tmp_path / "latin"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(b"---\nname: latin\ndescription: caf\xe9\n---\n")
    (tmp_path / "not-a-dir").write_text("")
    skills = load_from([tmp_path, tmp_path / "not-a-dir"])
    assert skills.skills == ()
    messages = sorted(str(p) for p in skills.problems)
    assert any("huge/SKILL.md: is 300," in m and "at most 262,144" in m for m in messages)
    assert any("latin/SKILL.md: is not UTF-8 text" in m for m in messages)
    assert any("not-a-dir: is not a folder" in m for m in messages)


def test_a_symlinked_skill_folder_is_named_by_its_link_and_confined_to_its_target(tmp_path: Path) -> None:
    real = write_skill(tmp_path / "elsewhere", "checkout-v2", "name: linked-skill\ndescription: L.\n")
    root = tmp_path / "skills"
    root.mkdir()
    os.symlink(real, root / "linked-skill")
    [skill] = load_from([root]).skills
    assert skill.name == "linked-skill" and skill.folder == real.resolve()


def test_skills_config_orders_dirs_save_dir_then_the_bundled_examples(tmp_path: Path) -> None:
    write_skill(
        tmp_path / "mine", "web-research", "name: web-research\ndescription: My own research steps.\n"
    )
    config = SkillsConfig(dirs=[tmp_path / "mine"], save_dir=tmp_path / "saved", bundled=True)
    skills = load_skills(config)
    assert bundled_dir() is not None
    assert {"web-research", "meeting-notes", "skill-writing"} <= set(skills.names)
    assert skills.get("web-research").description == "My own research steps."  # type: ignore[union-attr]
    [dup] = skills.problems
    assert dup.field == "name" and dup.path.parent.name == "web-research"
    assert load_skills(SkillsConfig()) == NO_SKILLS  # nothing configured: nothing read


def test_the_bundled_examples_are_valid_and_small() -> None:
    directory = bundled_dir()
    assert directory is not None
    skills = load_from([directory])
    assert skills.problems == ()
    assert len(skills.skills) >= 3
    for skill in skills.skills:
        assert len(skill.one_line) <= 200, skill.name  # a typical one-line description


def test_live_skills_swap_whole_values() -> None:
    live = LiveSkills()
    assert live.current is NO_SKILLS
    new = Skills((parse_skill(skill_text(), Path("/s/pdf-forms")),))
    assert live.swap(new) is NO_SKILLS and live.current is new


# -- the index ----------------------------------------------------------------------------------


def three() -> Skills:
    return Skills(
        tuple(
            parse_skill(skill_text(name=n, description=d), Path("/s") / n)
            for n, d in (
                ("deploy-app", "Deploy the app.\n  Use when asked to ship."),
                ("incident-triage", "Triage an incident."),
                ("team-lunch", "Order lunch."),
            )
        )
    )


def test_the_index_is_sorted_one_line_each_and_empty_without_skills() -> None:
    skills = three()
    index = skills_index(tuple(reversed(skills.skills)))
    lines = index.splitlines()
    assert lines[0].startswith(
        "Skills: procedures written down for you. When a request matches one, call load_skill"
    )
    assert lines[1:] == [
        "- deploy-app: Deploy the app. Use when asked to ship.",
        "- incident-triage: Triage an incident.",
        "- team-lunch: Order lunch.",
    ]
    assert skills_index(()) == ""


def test_audiences_choose_their_skills() -> None:
    skills = three()
    config = settings(
        audiences={
            "personal": {},
            "team": {"skills": ["deploy-*", "team-lunch"]},
            "public": {"tools": ["current_time", "load_skill"], "skills": ["team-lunch"]},
        }
    )
    assert [s.name for s in visible_skills(skills, config, "personal")] == [
        "deploy-app",
        "incident-triage",
        "team-lunch",
    ]
    assert [s.name for s in visible_skills(skills, config, "team")] == ["deploy-app", "team-lunch"]
    assert [s.name for s in visible_skills(skills, config, "public")] == ["team-lunch"]
    none = settings(audiences={"team": {"skills": "none"}})
    assert visible_skills(skills, none, "team") == ()
    # The default public audience sees none, and an audience that cannot call load_skill neither.
    assert visible_skills(skills, settings(), "public") == ()
    no_tool = settings(audiences={"team": {"tools": ["current_time"], "skills": "all"}})
    assert visible_skills(skills, no_tool, "team") == ()


def test_the_static_system_prompt_adds_the_index_after_the_untrusted_note() -> None:
    config = settings(agent={"system_prompt": "You are Ada."})
    prompt = system_prompt(config, "personal", three())
    assert prompt.startswith(trusted("You are Ada.") + "\n\nSkills: procedures")
    assert prompt.endswith("- team-lunch: Order lunch.")
    assert system_prompt(config, "public", three()) == trusted("You are Ada.")
    assert system_prompt(config, "personal", NO_SKILLS) == trusted("You are Ada.")
    # The same inputs give the same bytes (the prompt cache depends on it).
    assert system_prompt(config, "personal", three()) == prompt


def test_a_skill_file_swapped_for_a_named_pipe_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    """A SKILL.md in a folder others write to (a save_dir the model reaches) may be a pipe
    by the time it is read: the load names it and goes on, it never waits on the pipe."""
    root = tmp_path / "skills"
    (root / "piped").mkdir(parents=True)
    os.mkfifo(root / "piped" / "SKILL.md")
    from netclaw.skills._load import _read

    with pytest.raises(SkillError, match="is not a regular file"):
        _read(root / "piped" / "SKILL.md")
