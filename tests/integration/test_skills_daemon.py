"""Skills through the daemon: a skill folder added on disk and SIGHUP'd (``Daemon.reload``,
what the signal runs) is in the next request's system prompt; ``load_skill`` returns its
body to the model; a broken skill is reported (``/healthz``, the log) and skipped; each
audience sees only its skills; ``/skills`` answers in chat; ``save_skill`` waits for a
person and the saved skill joins the index."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from netclaw.config import load_settings
from netclaw.daemon import Daemon
from tests.conftest import settings_data, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.unit.test_skills import write_skill

HOOK_SECRET = "hook-secret-0123456789-0123456789abcdef"


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "alpha-plan",
        "name: alpha-plan\ndescription: Plan a release. Use when asked to plan.\n",
        "1. List what ships.\n2. Pick a date.\n",
    )
    return root


@pytest.fixture
def running(
    tmp_path: Path, skills_dir: Path, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Daemon, httpx.Client]]:
    monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)
    config = settings_data(
        tmp_path / "data",
        scripted.base_url,
        skills={"dirs": [str(skills_dir)], "save_dir": str(tmp_path / "saved")},
        # A webhook route of the team audience: a second audience to compare with.
        webhooks={
            "routes": {"ops": {"auth": {"type": "bearer", "secret_env": "HOOK_SECRET"}, "audience": "team"}}
        },
        audiences={"personal": {"skills": ["alpha-*", "release-*"]}, "team": {"skills": "all"}},
    )
    path = tmp_path / "netclaw.json"
    path.write_text(json.dumps(config))
    daemon = Daemon(load_settings(path), config_path=str(path))
    daemon.start()
    token = (daemon.settings.data_dir / "control.token").read_text().strip()
    client = httpx.Client(base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        yield daemon, client
    finally:
        client.close()
        daemon.stop()


def ask(client: httpx.Client, sid: str, text: str) -> dict[str, Any]:
    response = client.post(f"/api/sessions/{sid}/messages", json={"text": text}, params={"wait": "1"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def system_sent(scripted: ScriptedOpenAIThread, index: int = -1) -> str:
    first = scripted.requests[index]["messages"][0]
    assert first["role"] == "system"
    content: str = first["content"]
    return content


def test_a_skill_added_and_reloaded_is_in_the_next_request_and_loads(
    running: tuple[Daemon, httpx.Client],
    skills_dir: Path,
    scripted: ScriptedOpenAIThread,
    caplog: pytest.LogCaptureFixture,
) -> None:
    daemon, client = running
    sid = "cli:skills"
    ask(client, sid, "hello")
    before = system_sent(scripted)
    assert "- alpha-plan: Plan a release. Use when asked to plan." in before
    assert "release-notes" not in before

    write_skill(
        skills_dir,
        "release-notes",
        "name: release-notes\ndescription: Write release notes.\n",
        "Group changes by area.\n",
    )
    write_skill(skills_dir, "broken-one", "name: broken-one\ndescription: [unclosed\n")
    with caplog.at_level(logging.INFO, logger="netclaw.daemon"):
        daemon.reload()
    assert any(
        "skill skipped:" in r.getMessage() and "broken-one/SKILL.md" in r.getMessage() for r in caplog.records
    )

    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("load_skill", {"name": "release-notes"})]), Reply(text="noted")
    )
    ask(client, sid, "write the notes")
    after = system_sent(scripted)
    assert "- release-notes: Write release notes." in after and "broken-one" not in after
    assert after.replace("\n- release-notes: Write release notes.", "") == before  # only the new line
    # The model got the body as the tool's result.
    tool_message = scripted.requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "Skill release-notes\n\nGroup changes by area."
    # The API's context view shows what the model sees now.
    context = client.get(f"/api/sessions/{sid}", params={"view": "context"}).json()["messages"]
    assert context[0]["content"] == after

    health = client.get("/healthz").json()
    assert health["skills"]["loaded"] == ["alpha-plan", "release-notes"]
    [skipped] = health["skills"]["skipped"]
    assert skipped["path"].endswith("broken-one/SKILL.md") and "not valid YAML" in skipped["message"]
    assert health["status"] == "ok"  # a skipped skill does not make the daemon unhealthy


def test_each_audience_sees_its_skills_and_slash_skills_says_which(
    running: tuple[Daemon, httpx.Client], skills_dir: Path, scripted: ScriptedOpenAIThread
) -> None:
    daemon, client = running
    write_skill(skills_dir, "oncall-page", "name: oncall-page\ndescription: Page the on-call person.\n")
    daemon.reload()
    ask(client, "cli:mine", "hi")
    personal = system_sent(scripted)
    assert "- alpha-plan:" in personal and "oncall-page" not in personal

    hook = httpx.post(
        f"{daemon.base_url}/webhooks/ops",
        json={"text": "hi"},
        params={"wait": "1"},
        headers={"Authorization": f"Bearer {HOOK_SECRET}"},
        timeout=30,
    )
    assert hook.status_code == 200, hook.text
    team = system_sent(scripted)
    assert "- alpha-plan:" in team and "- oncall-page: Page the on-call person." in team

    requests = len(scripted.requests)
    done = client.post("/api/sessions/cli:mine/messages", json={"text": "/skills"})
    assert done.status_code == 200, done.text
    assert done.json()["command"] == "skills"
    assert (
        done.json()["notice"]
        == "Skills I can follow here (1):\n- alpha-plan: Plan a release. Use when asked to plan."
    )
    assert len(scripted.requests) == requests  # a command is never model input


def test_save_skill_waits_for_a_person_then_joins_the_index(
    running: tuple[Daemon, httpx.Client], tmp_path: Path, scripted: ScriptedOpenAIThread
) -> None:
    _daemon, client = running
    sid = "cli:teach"
    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "save_skill",
                    {
                        "name": "release-check",
                        "description": "Check a release before it ships.",
                        "instructions": "1. Run the tests.",
                    },
                )
            ]
        ),
        Reply(text="saved it"),
    )
    assert (
        client.post(
            f"/api/sessions/{sid}/messages", json={"text": "remember how to check a release"}
        ).status_code
        == 202
    )
    [pending] = wait_until(
        lambda: client.get(f"/api/sessions/{sid}/approvals").json(), 10, "the approval request"
    )
    assert pending["tool"] == "save_skill"
    assert not (tmp_path / "saved" / "release-check").exists()  # nothing written before a person says yes
    decided = client.post(f"/api/sessions/{sid}/approvals/{pending['id']}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    wait_until(lambda: (tmp_path / "saved" / "release-check" / "SKILL.md").exists(), 10, "the saved skill")
    wait_until(lambda: len(scripted.requests) >= 2, 10, "the turn to go on")
    ask(client, sid, "and now?")
    assert "- release-check: Check a release before it ships." in system_sent(scripted)
