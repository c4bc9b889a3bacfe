"""Approvals from the shell: ``netclaw approvals`` lists, approves and denies; ``netclaw
chat`` asks in the terminal. Against a real daemon subprocess whose ``personal``
audience must approve ``current_time``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT, DaemonProcess, Daemons, Setup, run_cli, subprocess_env, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.terminal import Terminal

pytestmark = pytest.mark.slow


def _what_time(body: dict[str, Any]) -> Reply:
    """First call: the model asks for the time; after the tool result it answers with it."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"the tool said: {last['content'][:60]}")
    return Reply(tool_calls=[ToolCallSpec("current_time", {"timezone": "UTC"})])


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedOpenAIThread]:
    with ScriptedOpenAIThread() as server:
        server.route("[what-time]", _what_time)
        yield server


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedOpenAIThread) -> Setup:
    return Setup(
        tmp_path_factory.mktemp("approvals"),
        provider.base_url,
        audiences={"personal": {"approve": ["current_time"]}},
    )


@pytest.fixture(scope="module")
def daemon(site: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    group = Daemons(tmp_path_factory.mktemp("approvals-logs"))
    try:
        yield group.start(site.config, site.data_dir, site.port)
    finally:
        group.close()


def cli(site: Setup, *args: str) -> tuple[int, str, str]:
    done = run_cli(*args, "--config", str(site.config))
    return done.returncode, done.stdout, done.stderr


def last_reply(daemon: DaemonProcess, sid: str) -> str:
    messages = daemon.session(sid)["messages"]
    return str(messages[-1]["content"]) if messages and messages[-1]["role"] == "assistant" else ""


def test_approvals_list_approve_and_deny_from_the_shell(daemon: DaemonProcess, site: Setup) -> None:
    sid = "cli:shell-approvals"
    assert daemon.post(sid, "what time is it? [what-time]").status_code == 202
    listed = wait_until(lambda: json.loads(cli(site, "approvals", "--json")[1]), 10, "a pending approval")
    [request] = listed
    assert (request["session_id"], request["tool"], request["turn"]) == (sid, "current_time", 1)
    code, out, err = cli(site, "approvals")
    assert code == 0 and request["id"] in out and "current_time" in out, err
    code, out, err = cli(site, "approvals", "approve", request["id"])
    assert code == 0 and f"approve: current_time ({request['id']})" in out, err
    wait_until(lambda: "the tool said" in last_reply(daemon, sid), 10, "the reply")
    assert "UTC" in last_reply(daemon, sid)
    code, _, err = cli(site, "approvals", "approve", request["id"])
    assert code == 1 and "no pending approval" in err

    assert daemon.post(sid, "and now? [what-time]").status_code == 202
    [again] = wait_until(lambda: json.loads(cli(site, "approvals", "--json")[1]), 10, "the second request")
    code, _, err = cli(site, "approvals", "deny", again["id"])
    assert code == 0, err
    wait_until(lambda: "denied by" in last_reply(daemon, sid), 10, "the denial to reach the model")
    code, out, _ = cli(site, "approvals")
    assert code == 0 and "no tool calls wait" in out
    code, _, err = cli(site, "approvals", "approve")
    assert code == 2 and "needs an approval id" in err


def test_chat_asks_in_the_terminal(daemon: DaemonProcess, site: Setup) -> None:
    sid = "cli:terminal-approval"
    argv = [sys.executable, "-m", "netclaw.cli", "chat", sid, "--config", str(site.config)]
    with Terminal(argv, env=subprocess_env(), cwd=REPO_ROOT) as term:
        term.expect("/help for commands")
        term.type_at_prompt("what time is it? [what-time]")
        term.expect("the agent wants to run current_time")
        term.type_at_prompt("y", prompt="allow current_time? [y]es / [n]o / [a]lways: ")
        term.expect("approve by")
        term.expect("agent> the tool said")
        term.type_at_prompt("once more [what-time]")
        term.type_at_prompt("n", prompt="[a]lways: ")
        term.expect("deny by")
        term.expect("agent> the tool said: error: the call to current_time was denied")
        term.expect("you> ")
        term.send_eof()
        assert term.wait() == 0
