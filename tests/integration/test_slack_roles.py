"""Two people in one Slack thread with different roles, through the real slack-bolt /
slack-sdk client against the fake Slack (tests/fakes/slack_api.py): the operator's turn may
run a tool, the viewer's turn is not offered it and its call is refused; the viewer's
/reset is refused with a note in the thread; the viewer cannot approve, the operator can."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from netclaw.tools import Tool, ToolContext
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.slack_api import FakeSlackThread
from tests.integration.test_slack import (  # noqa: F401 - fixtures
    MENTION,
    StartSlack,
    fake_slack,
    reply_in,
    start_slack,
    wait_for,
)

OPERATOR, VIEWER = "U1", "U2"
ROLES = {
    "operator": {"members": [f"slack:{OPERATOR}"], "approve": True},
    "viewer": {
        "members": [f"slack:{VIEWER}"],
        "tools": ["current_time"],
        "commands": ["status", "help"],
        "approve": False,
    },
}


class Deploy:
    def __init__(self) -> None:
        self.runs = 0
        self.ran = threading.Event()

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        self.ran.set()
        return "deployed"


def offered(request: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools") or [])


def test_two_people_in_one_thread_get_their_own_roles(
    start_slack: StartSlack,  # noqa: F811 - the fixture imported above
    fake_slack: FakeSlackThread,  # noqa: F811
    scripted: ScriptedOpenAIThread,
) -> None:
    handle, _ = start_slack({"roles": ROLES})
    deploy = Deploy()
    assert handle.daemon.tools is not None
    handle.daemon.tools.register(Tool("deploy", "Deploy the app.", {"type": "object"}, deploy))

    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("deploy", {})]), Reply(text="deployed it"))
    ts, _ = fake_slack.say("C1", f"{MENTION} deploy please", user=OPERATOR)
    reply_in(fake_slack, "C1", ts, "deployed it")
    assert deploy.runs == 1
    assert "deploy" in offered(scripted.requests[-2])

    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("deploy", {})]), Reply(text="I may not deploy for you"))
    fake_slack.say("C1", "deploy again", user=VIEWER, thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "I may not deploy for you")
    assert deploy.runs == 1  # refused
    assert offered(scripted.requests[-2]) == ["current_time"]
    sid = f"slack:C1:{ts}"
    results = [m for m in handle.transcript(sid) if m["role"] == "tool"]
    assert results[-1]["is_error"] and "is not available to" in results[-1]["content"]
    users = [(m["speaker"], m["speaker_role"]) for m in handle.transcript(sid) if m["role"] == "user"]
    assert users == [(f"slack:{OPERATOR}", "operator"), (f"slack:{VIEWER}", "viewer")]

    fake_slack.say("C1", "/reset", user=VIEWER, thread_ts=ts)
    wait_for(
        lambda: any("does not allow /reset" in m["text"] for m in fake_slack.bot_messages("C1", ts)),
        "the refusal note",
    )
    fake_slack.say("C1", "/status", user=VIEWER, thread_ts=ts)  # allowed
    wait_for(
        lambda: any(m["text"].startswith("Model scripted") for m in fake_slack.bot_messages("C1", ts)),
        "the status",
    )
    audit = handle.http.get("/api/audit", params={"session": sid}).json()
    assert [(e["kind"], e["actor"], e["detail"]["outcome"]) for e in audit if e["kind"] == "tool_run"] == [
        ("tool_run", f"slack:{OPERATOR}", "ok"),
        ("tool_run", f"slack:{VIEWER}", "refused"),
    ]


def test_only_a_role_with_approval_rights_decides(
    start_slack: StartSlack,  # noqa: F811 - the fixture imported above
    fake_slack: FakeSlackThread,  # noqa: F811
    scripted: ScriptedOpenAIThread,
) -> None:
    start_slack({"roles": ROLES, "audiences": {"team": {"approve": ["current_time"]}}})
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    ts, _ = fake_slack.say("C1", f"{MENTION} what time is it?", user=VIEWER)
    asked = wait_for(
        lambda: [m for m in fake_slack.bot_messages("C1", ts) if m.get("blocks")], "the approval buttons"
    )[0]
    approve = next(e for e in asked["blocks"][1]["elements"] if e["action_id"] == "netclaw_approve")
    fake_slack.click("C1", asked["ts"], "netclaw_approve", approve["value"], user=VIEWER)
    [told] = wait_for(lambda: fake_slack.server.ephemeral, "the refusal")
    assert told["user"] == VIEWER and "may not decide" in told["text"] and "viewer" in told["text"]
    fake_slack.click("C1", asked["ts"], "netclaw_approve", approve["value"], user=OPERATOR)
    reply_in(fake_slack, "C1", ts, "it is late")
