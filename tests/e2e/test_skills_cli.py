"""Skills and web search from the command line, as docs/skills.md writes them: ``netclaw skills
list`` and ``show`` (the daemon stopped), a skill folder added to a running daemon and a real
SIGHUP putting it in the next request, and the ``skills`` line of ``netclaw status`` and
``netclaw doctor``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.doc_blocks import fenced_under
from tests.e2e.conftest import Daemons, Setup, run_cli, subprocess_env, wait_until
from tests.fakes.scripted_openai import ScriptedOpenAIThread

pytestmark = pytest.mark.slow

WORKED_EXAMPLE = ("docs/skills.md", "## A worked example", "sh")


def test_skills_list_show_sighup_status_and_doctor(
    tmp_path: Path, scripted: ScriptedOpenAIThread, daemons: Daemons
) -> None:
    site = Setup(tmp_path / "site", scripted.base_url, skills={"dirs": ["./skills"], "bundled": True})
    skills = site.root / "skills"
    config = str(site.config)

    listed = run_cli("skills", "list", "--config", config)
    assert listed.returncode == 0, listed.stderr
    assert "web-research" in listed.stdout and "meeting-notes" in listed.stdout

    daemon = daemons.start(site.config, site.data_dir, site.port)
    assert daemon.post("cli:e2e-skills", "hello", wait=True).status_code == 200
    assert "release-notes" not in scripted.requests[-1]["messages"][0]["content"]

    # docs/skills.md's worked example, run as written in the site's folder (netclaw.json there).
    made = subprocess.run(
        ["bash", "-e", "-c", fenced_under(*WORKED_EXAMPLE)],
        cwd=site.root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    commands = [line.split("#")[0].strip() for line in fenced_under(*WORKED_EXAMPLE, 1).splitlines()]
    assert commands == [
        "netclaw skills list",
        "netclaw skills show release-notes",
        'kill -HUP "$(cat data/netclaw.lock)"',
    ]
    listed = run_cli(*commands[0].split()[1:], "--config", config)
    assert (
        listed.returncode == 0
        and "release-notes  Write release notes from merged pull requests." in listed.stdout
    )
    shown = run_cli(*commands[1].split()[1:], "--config", config)
    assert shown.returncode == 0, shown.stderr
    assert "files:       template.md" in shown.stdout and "1. Read `template.md`" in shown.stdout
    assert (
        site.root / "skills" / "release-notes" / "template.md"
    ).read_text() == "## What's new\n- <change>\n"

    signalled = subprocess.run(
        ["bash", "-e", "-c", commands[2]], cwd=site.root, capture_output=True, text=True, check=False
    )
    assert signalled.returncode == 0, signalled.stderr
    wait_until(lambda: "release-notes" in daemon.health()["skills"]["loaded"], 10, "the reload")
    assert daemon.post("cli:e2e-skills", "what's new?", wait=True).status_code == 200
    system = scripted.requests[-1]["messages"][0]["content"]
    assert "- release-notes: Write release notes from merged pull requests. Use when asked" in system

    # A broken skill: listed as skipped (exit 1), and status and doctor say so.
    (skills / "Bad_Name").mkdir()
    (skills / "Bad_Name" / "SKILL.md").write_text("---\nname: Bad_Name\ndescription: x\n---\n")
    subprocess.run(["bash", "-c", commands[2]], cwd=site.root, check=True)
    wait_until(lambda: daemon.health()["skills"]["skipped"], 10, "the second reload")
    listed = run_cli("skills", "list", "--json", "--config", config)
    assert listed.returncode == 1
    [skipped] = json.loads(listed.stdout)["skipped"]
    assert skipped["field"] == "name" and skipped["path"].endswith("Bad_Name/SKILL.md")

    status = run_cli("status", "--config", config)
    assert status.returncode == 0, status.stderr
    [line] = [line for line in status.stdout.splitlines() if line.startswith("skills:")]
    assert "4 loaded (meeting-notes, release-notes, skill-writing, web-research); 1 skipped:" in line
    assert "Bad_Name/SKILL.md: name: 'Bad_Name': use lowercase letters" in line

    doctor = run_cli("doctor", "--config", config, timeout=60)
    [check] = [line for line in doctor.stdout.splitlines() if line.startswith("[FAIL] skills:")]
    assert "4 loaded" in check and "Bad_Name" in check


def test_doctor_checks_the_web_search_key(tmp_path: Path, scripted: ScriptedOpenAIThread) -> None:
    search = {"enabled": True, "backend": "brave", "api_key_env": "E2E_BRAVE_KEY"}
    site = Setup(tmp_path / "site", scripted.base_url, tools={"web_search": search})
    doctor = run_cli("doctor", "--config", str(site.config), timeout=60)
    assert "[FAIL] web search: brave: set the environment variable E2E_BRAVE_KEY" in doctor.stdout
    env = subprocess_env(E2E_BRAVE_KEY="k")
    doctor = run_cli("doctor", "--config", str(site.config), env=env, timeout=60)
    assert "[ok] web search: brave at its public API (brave)" in doctor.stdout
