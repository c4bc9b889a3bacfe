"""``netclaw skills list|show NAME``: the skills as the daemon would load them now (read
from the configured folders, so it works with the daemon stopped, and tells what a SIGHUP
would put in force). A skipped skill is printed with its file and field, and the command
then exits 1 — so a folder of skills can be checked before it is installed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, cast

from netclaw.config import load_settings
from netclaw.security.policy import Audience
from netclaw.skills import Skill, Skills, list_files, load_skills, skill_dirs, visible_skills


def cmd_skills(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    skills = load_skills(settings.skills)
    shown = skills.skills
    if args.audience:
        shown = visible_skills(skills, settings, cast(Audience, args.audience))
    if args.action == "show":
        return _show(args, skills)
    dirs = [str(d) for d in skill_dirs(settings.skills)]
    if args.json:
        print(
            json.dumps(
                {
                    "dirs": dirs,
                    "skills": [_json(s) for s in shown],
                    "skipped": [p.to_json() for p in skills.problems],
                },
                indent=2,
            )
        )
        return 1 if skills.problems else 0
    if not dirs:
        print("no skill folders configured (skills.dirs, skills.bundled)")
    else:
        print(f"skills from {', '.join(dirs)}:")
    width = max((len(s.name) for s in shown), default=0)
    for skill in shown:
        print(f"  {skill.name:<{width}}  {skill.one_line}")
    if not shown:
        print("  none" + (f" for {args.audience} sessions" if args.audience else ""))
    for problem in skills.problems:
        print(f"skipped: {problem}")
    return 1 if skills.problems else 0


def _show(args: argparse.Namespace, skills: Skills) -> int:
    if not args.name:
        print("netclaw skills show: give the skill's name", file=sys.stderr)
        return 2
    skill = skills.get(args.name)
    if skill is None:
        mine = [p for p in skills.problems if args.name in p.path.parts]
        for problem in mine:
            print(f"skipped: {problem}")
        if not mine:
            print(f"no skill named {args.name!r} (netclaw skills list shows them)", file=sys.stderr)
        return 1
    files = list_files(skill.folder)
    if args.json:
        print(json.dumps({**_json(skill), "files": files, "body": skill.body}, indent=2))
        return 0
    print(f"name:        {skill.name}")
    print(f"description: {skill.one_line}")
    print(f"folder:      {skill.folder}")
    for label, value in (("license", skill.license), ("compatibility", skill.compatibility)):
        if value:
            print(f"{label + ':':<13}{value}")
    if skill.allowed_tools:
        print(f"allowed-tools: {' '.join(skill.allowed_tools)} (shown only: grants nothing)")
    for key, value in skill.metadata.items():
        print(f"metadata:    {key} = {value}")
    if files:
        print(f"files:       {', '.join(files)}")
    print()
    print(skill.body)
    return 0


def _json(skill: Skill) -> dict[str, Any]:
    return {
        "name": skill.name,
        "description": skill.description,
        "folder": str(skill.folder),
        "license": skill.license,
        "compatibility": skill.compatibility,
        "allowed_tools": list(skill.allowed_tools),
        "metadata": dict(skill.metadata),
    }
