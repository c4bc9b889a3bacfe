"""What installed skills cost in the prompt, and that they keep it cache-stable.

- **Tokens per skill.** A skill adds one line to the static system prompt's index:
  ``- name: description``. Measured with the tokenizer the daemon counts with
  (``netclaw.history.TokenCounter``) over 20 skills with typical one-line descriptions
  (shaped like the Agent Skills examples: what it does, then "Use when ...") plus the
  bundled examples: the index of N skills minus the prompt without one, less the head line
  (paid once), over N. **Target: <= 60 tokens per skill.**
- **Prefix stability with 20 skills.** The real daemon in-process, 20 skills installed,
  several sessions taking turns against the scripted provider, a SIGHUP's reload (skills
  unchanged) half-way: for every request after a session's first, its tools and system
  prompt are the bytes of the session's previous request, and the previous request's
  messages are a prefix of it (what a provider's prompt cache keys on). **Target: 100 %.**

Run from the repo root: ``python bench/skills.py [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - puts the repo root on sys.path
from _common import daemon_settings, figure, info, log, machine_load

from netclaw.config import load_settings
from netclaw.daemon import Daemon
from netclaw.history import TokenCounter
from netclaw.skills import (
    Skills,
    bundled_dir,
    load_from,
    parse_skill,
    render_skill,
    skills_index,
    system_prompt,
)
from tests.fakes.scripted_openai import ScriptedOpenAIThread

TARGET_TOKENS = 60

# Typical one-line descriptions: what the skill does, then when to use it.
TYPICAL = [
    (
        "pdf-forms",
        "Fill in PDF forms and merge PDF files. Use when a PDF form is attached or the person mentions PDFs.",
    ),
    (
        "release-notes",
        "Write release notes from merged pull requests. Use when asked for a changelog or what is new.",
    ),
    (
        "incident-triage",
        "Triage a production incident: gather alerts, recent deploys and logs. Use when something is down.",
    ),
    (
        "meeting-recap",
        "Recap a meeting as decisions, open questions and actions. Use when asked for notes or minutes.",
    ),
    (
        "code-review",
        "Review a diff for bugs, tests and style. Use when asked to review a pull request or a patch.",
    ),
    (
        "sql-report",
        "Write a read-only SQL query and explain the result. Use when asked for numbers from the database.",
    ),
    (
        "travel-plan",
        "Plan a trip with times, bookings and costs in a table. Use when asked to organise travel.",
    ),
    (
        "expense-check",
        "Check an expense claim against the policy and flag what is missing. Use for receipts and claims.",
    ),
    (
        "onboarding",
        "Walk a new team member through accounts, tools and first tasks. Use when someone joins the team.",
    ),
    (
        "status-update",
        "Draft a weekly status update from this week's work. Use when asked for a status or progress report.",
    ),
    (
        "translate-doc",
        "Translate a document while keeping its formatting and terms. Use when asked to translate text.",
    ),
    (
        "contract-summary",
        "Summarise a contract's parties, terms, dates and risks. Use when a contract or agreement is shared.",
    ),
    (
        "data-cleanup",
        "Clean a CSV: types, duplicates, missing values, with a log of changes. Use when given messy data.",
    ),
    (
        "api-debug",
        "Debug a failing HTTP API call step by step from the request and response. Use for API errors.",
    ),
    (
        "job-post",
        "Write a job posting from a role description and team facts. Use when hiring for a position.",
    ),
    (
        "customer-reply",
        "Answer a customer email politely with the facts and next steps. Use for support replies.",
    ),
    (
        "deploy-app",
        "Deploy the app to staging or production with the checklist. Use when asked to ship or deploy.",
    ),
    (
        "backup-restore",
        "Restore a database backup to a point in time and verify it. Use when data must be recovered.",
    ),
    ("okr-draft", "Draft objectives and key results from goals and metrics. Use when planning a quarter."),
    (
        "slide-outline",
        "Outline a slide deck: one message per slide, in order. Use when asked to prepare a presentation.",
    ),
]


def typical_skills() -> Skills:
    return Skills(
        tuple(parse_skill(render_skill(n, d, "Steps."), Path("/bench") / n) for n, d in sorted(TYPICAL))
    )


def tokens_per_skill(counter: TokenCounter) -> None:
    config = daemon_settings(Path("/nonexistent"), "http://127.0.0.1:9/v1")
    bare = counter.count_text(system_prompt(config, "personal", Skills()))
    for label, skills in (
        ("typical", typical_skills()),
        ("bundled", load_from([bundled_dir()] if bundled_dir() else [])),
    ):
        if not skills.skills:
            continue
        full = counter.count_text(system_prompt(config, "personal", skills))
        one = counter.count_text(system_prompt(config, "personal", Skills(skills.skills[:1])))
        head = one - bare - counter.count_text("\n" + skills_index(skills.skills[:1]).splitlines()[1])
        lines = [counter.count_text("\n" + skills_index((s,)).splitlines()[1]) for s in skills.skills]
        per_skill = (full - bare - head) / len(skills.skills)
        if label == "typical":
            figure(
                "skill_index_tokens_per_skill",
                per_skill,
                "tokens",
                f"<= {TARGET_TOKENS}",
                per_skill <= TARGET_TOKENS,
            )
            info(
                "skill_index_head_tokens",
                head,
                "tokens",
                "the index's head line, paid once when any skill is seen",
            )
            info(f"skill_index_tokens_{len(skills.skills)}_skills", full - bare, "tokens", "the whole index")
        info(
            f"skill_line_tokens_max_{label}",
            max(lines),
            "tokens",
            f"{len(lines)} skills, mean {sum(lines) / len(lines):.1f}",
        )
    from netclaw.skills import LiveSkills, SkillTools

    schemas = [t.schema for t in SkillTools(LiveSkills(typical_skills()), lambda: config).tools()]
    tool_tokens = counter.count_tools(
        [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in schemas]
    )
    info(
        "skill_tools_schema_tokens",
        tool_tokens,
        "tokens",
        "load_skill + read_skill_file, once, while any skill is loaded",
    )


def prefix_stability(sessions: int, turns: int) -> None:
    with tempfile.TemporaryDirectory(prefix="netclaw-skills-") as tmp, ScriptedOpenAIThread() as provider:
        root = Path(tmp)
        skills_dir = root / "skills"
        for name, description in TYPICAL:
            (skills_dir / name).mkdir(parents=True)
            (skills_dir / name / "SKILL.md").write_text(render_skill(name, description, "1. Do it."))
        base = daemon_settings(root / "data", provider.base_url).model_dump(mode="json")
        base["skills"] = {"dirs": [str(skills_dir)]}
        path = root / "netclaw.json"
        path.write_text(json.dumps(base))
        daemon = Daemon(load_settings(path), config_path=str(path))
        daemon.start()
        try:
            assert daemon.gateway is not None and daemon.io is not None
            by_session: dict[str, list[dict[str, Any]]] = {f"cli:bench-{s}": [] for s in range(sessions)}
            import httpx

            token = (daemon.settings.data_dir / "control.token").read_text().strip()
            with httpx.Client(
                base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            ) as http:
                for turn in range(turns):
                    if turn == turns // 2:
                        daemon.reload()  # what SIGHUP runs; the skills on disk are unchanged
                    for sid, seen in by_session.items():
                        before = len(provider.requests)
                        response = http.post(
                            f"/api/sessions/{sid}/messages",
                            json={"text": f"turn {turn} of {sid}"},
                            params={"wait": "1"},
                        )
                        response.raise_for_status()
                        seen.extend(provider.requests[before:])
        finally:
            daemon.stop()
        pairs = stable = 0
        for seen in by_session.values():
            for previous, current in itertools.pairwise(seen):
                pairs += 1
                same_head = current["messages"][0] == previous["messages"][0] and current.get(
                    "tools"
                ) == previous.get("tools")
                grows = current["messages"][: len(previous["messages"])] == previous["messages"]
                stable += same_head and grows
        share = 100.0 * stable / pairs if pairs else 0.0
        figure("skills_prefix_stable_requests", share, "%", "= 100", share == 100.0)
        system = by_session[next(iter(by_session))][0]["messages"][0]["content"]
        info(
            "skills_prefix_pairs",
            pairs,
            "",
            f"{sessions} sessions x {turns} turns, 20 skills, a reload half-way",
        )
        info("skills_in_system_prompt", sum(line.startswith("- ") for line in system.splitlines()), "skills")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 sessions x 4 turns")
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    sessions, turns = (2, 4) if args.quick else (args.sessions, args.turns)
    info("machine_load", machine_load(), "", "1-min load average / cores")
    log("tokens per skill ...")
    tokens_per_skill(TokenCounter())
    log(f"prefix stability: {sessions} sessions x {turns} turns ...")
    prefix_stability(sessions, turns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
