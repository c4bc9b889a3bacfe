"""Sub-agents in a Slack thread, through the real slack-bolt/slack-sdk stack and the local
fake of Slack: each child shows as one line in the thread — working, then how it ended —
never its whole stream; the parent's answers come as usual."""

from __future__ import annotations

from tests.fakes.scripted_openai import ScriptedOpenAIThread
from tests.fakes.slack_api import FakeSlackThread
from tests.fakes.subagent_script import FamilyScript
from tests.integration.test_slack import (  # noqa: F401 - fixtures
    MENTION,
    StartSlack,
    fake_slack,
    start_slack,
    wait_for,
)


def test_each_child_is_one_line_in_the_thread(
    fake_slack: FakeSlackThread,  # noqa: F811 - the fixture
    start_slack: StartSlack,  # noqa: F811 - the fixture
    scripted: ScriptedOpenAIThread,
) -> None:
    scripted.set_responder(FamilyScript(rounds=1, child_delay_s=(0.3, 0.3)))
    handle, _adapter = start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} SPAWN 2 sl")
    children = [f"agent:slack:C1:{ts}/{n}" for n in (1, 2)]

    def texts() -> list[str]:
        return [m["text"] for m in fake_slack.bot_messages("C1", ts)]

    wait_for(
        lambda: sum(1 for t in texts() if t.startswith("ACK ")) == 2, "the parent to answer both", timeout=20
    )
    lines = [t for t in texts() if "sub-agent" in t]
    assert sorted(lines) == sorted(
        f"✅ sub-agent {c} finished: RESULT sl-{n}" for n, c in enumerate(children, 1)
    )
    assert "spawned sl" in texts()
    assert not any("RESULT" in t and "sub-agent" not in t and not t.startswith("ACK") for t in texts())
    # Each line was posted once, while its child worked, and then edited.
    working = [
        c.args["text"]
        for c in fake_slack.calls_of("chat.postMessage")
        if "is working on" in c.args.get("text", "")
    ]
    assert sorted(working) == sorted(
        f"⏳ sub-agent {c} is working on: TASK sl-{n} rounds=1" for n, c in enumerate(children, 1)
    )
    assert (
        len([c for c in fake_slack.calls_of("chat.update") if "finished: RESULT" in c.args.get("text", "")])
        == 2
    )
    assert handle.http.get(f"/api/sessions/slack:C1:{ts}/children").json()[0]["status"] == "completed"
