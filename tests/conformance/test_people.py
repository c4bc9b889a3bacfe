"""Conformance: people — speakers and roles (a role forbids a tool to one person and not
to another, by ``<channel>:<user>``), an approval decided with the platform's control
(refused to someone whose role may not decide), and files both ways."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.driver import Person
from tests.conformance.model import marker, offered_tools
from tests.conformance.rig import GATED_TOOL, InProcess, wait_for
from tests.fakes.scripted_openai import Reply, ToolCallSpec


def tool_results(rig: InProcess, session_id: str) -> list[dict[str, Any]]:
    return [m for m in rig.transcript(session_id) if m["role"] == "tool"]


def test_a_role_forbids_a_tool_to_one_speaker_and_not_to_another(rig: InProcess) -> None:
    driver = rig.driver
    results = {}
    people: tuple[Person, ...] = ("alice", "bob")
    for person in people:
        mark = marker()
        rig.model.script(
            mark, Reply(tool_calls=[ToolCallSpec(GATED_TOOL, {})]), Reply(text=f"done for {person} {mark}")
        )
        said = driver.say(f"what time is it {mark}", person=person)
        conversation = driver.conversation_of(said)
        rig.replied(conversation, f"done for {person} {mark}")
        results[person] = (rig.model.requests(mark), tool_results(rig, driver.session_of(conversation)))

    alice_requests, alice_results = results["alice"]
    bob_requests, bob_results = results["bob"]
    assert GATED_TOOL in offered_tools(alice_requests[0])  # no role: the audience's tools
    assert GATED_TOOL not in offered_tools(bob_requests[0])  # bob's role does not grant it
    assert len(alice_results) == 1 and "UTC" in alice_results[0]["content"]
    assert not alice_results[0].get("is_error")
    # bob's model called it anyway: refused, not run.
    assert len(bob_results) == 1 and bob_results[0].get("is_error"), bob_results
    assert "UTC" not in bob_results[0]["content"]


def test_an_approval_is_decided_with_the_platforms_control(rig: InProcess) -> None:
    driver = rig.driver
    mark = marker()
    rig.model.script(mark, Reply(tool_calls=[ToolCallSpec(GATED_TOOL, {})]), Reply(text=f"it is late {mark}"))
    said = driver.say(f"what time is it {mark}", person="carol")  # her role: the tool waits for her
    conversation = driver.conversation_of(said)
    session = driver.session_of(conversation)
    (prompt,) = wait_for(lambda: driver.prompts(conversation), "the approval request")
    assert GATED_TOOL in prompt.text

    if driver.capabilities.approvals != "api":  # the control API decides as admin, whoever asks
        driver.press(prompt, "approve", person="bob")  # his role may not decide: told so, alone
        told = wait_for(lambda: driver.told("bob"), "bob told his press is refused")
        assert "may not decide" in told[-1], told
        assert rig.control.get(f"/api/sessions/{session}/approvals").json()  # still pending
    driver.press(prompt, "approve", person="carol")
    rig.replied(conversation, f"it is late {mark}")
    assert driver.prompts(conversation) == []  # decided: the control is gone
    results = tool_results(rig, session)
    assert len(results) == 1 and "UTC" in results[0]["content"]
    decided = rig.control.get("/api/audit", params={"session": session}).json()
    deciders = [e for e in decided if e["kind"] == "approval_decided"]
    assert len(deciders) == 1, deciders


def test_a_file_shared_by_a_person_reaches_the_model(rig: InProcess) -> None:
    driver = rig.driver
    if not driver.capabilities.files_in:
        pytest.skip(f"{driver.name} takes no files from people")
    mark = marker()
    content = f"the kit's secret word is plover-{mark}\n".encode()
    rig.model.script(mark, Reply(text=f"read it {mark}"))
    said = driver.say(f"read this {mark}", files=[("notes.txt", "text/plain", content)])
    conversation = driver.conversation_of(said)
    rig.replied(conversation, f"read it {mark}")
    (request,) = rig.model.requests(mark)
    assert f"plover-{mark}" in str(request["messages"])


def test_a_file_the_agent_shares_reaches_the_conversation(rig: InProcess) -> None:
    driver = rig.driver
    if not driver.capabilities.files_out:
        pytest.skip(f"{driver.name} shows people no files")
    mark = marker()
    data = f"a,b\n1,{mark}\n"
    rig.model.script(
        mark,
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": f"{mark}.csv", "content": data})]),
        Reply(tool_calls=[ToolCallSpec("share_file", {"path": f"{mark}.csv", "name": "report.csv"})]),
        Reply(text=f"here it is {mark}"),
    )
    said = driver.say(f"make me a report {mark}")
    conversation = driver.conversation_of(said)
    rig.replied(conversation, f"here it is {mark}")
    received = wait_for(lambda: driver.files_received(conversation), "the file in the conversation")
    assert received == [("report.csv", data.encode())]
