"""Approval prompts (adapters/chat/_approvals.py) on their own: a request becomes a message
with buttons, its decision replaces them; a press decides through the gateway, and a
refusal (or a request no longer pending, or a failure) is told to the presser only."""

from __future__ import annotations

from adapters.chat import ButtonClick, ChatApiError, Conversation, MessageRef
from adapters.chat._approvals import MAX_APPROVAL_ARGUMENTS, ApprovalPrompts, decide
from adapters.chat._calls import PlatformCalls
from netclaw import outputs as out
from netclaw.errors import SessionUnavailable
from tests.fakes.chat_gateway import ChatGateway
from tests.fakes.chat_port import FakeChatPort

SID = "fake:1"
TO = Conversation("C1")


def request(approval_id: str = "ap_1", arguments: str = '{"cmd": "ls"}') -> out.ApprovalRequested:
    return out.ApprovalRequested(
        session_id=SID, turn=1, approval_id=approval_id, tool="shell", arguments=arguments, expires_at=0.0
    )


async def test_a_request_gets_buttons_and_its_decision_replaces_them() -> None:
    port = FakeChatPort()
    prompts = ApprovalPrompts(PlatformCalls(port), TO)
    await prompts.ask(request())
    [asked] = port.in_channel("C1")
    assert asked.text == 'May I run shell?\n{"cmd": "ls"}'
    assert [(b.action_id, b.value, b.style) for b in asked.buttons] == [
        ("approve", "ap_1", "primary"),
        ("deny", "ap_1", "danger"),
        ("always", "ap_1", "default"),
    ]
    assert "ap_1" in prompts and "ap_2" not in prompts
    await prompts.show_decision(
        out.ApprovalDecided(session_id=SID, approval_id="ap_1", decision="deny", by="bob")
    )
    assert asked.text == "shell: deny by bob" and asked.buttons == ()
    assert "ap_1" not in prompts


async def test_long_arguments_are_cut_and_an_unknown_decision_edits_nothing() -> None:
    port = FakeChatPort()
    port.message_limit = 5000
    prompts = ApprovalPrompts(PlatformCalls(port), TO)
    await prompts.ask(request(arguments="x" * 4000))
    [asked] = port.in_channel("C1")
    assert asked.text.count("x") == MAX_APPROVAL_ARGUMENTS
    await prompts.show_decision(
        out.ApprovalDecided(session_id=SID, approval_id="ap_9", decision="deny", by="x")
    )
    assert port.count("edit") == 0


async def test_a_request_is_retried_through_transient_failures() -> None:
    port = FakeChatPort()
    port.fail("post_buttons", ChatApiError("slow down", transient=True, retry_after=0.0))
    await ApprovalPrompts(PlatformCalls(port), TO).ask(request())
    assert port.count("post_buttons") == 2 and len(port.in_channel("C1")) == 1


async def test_a_request_replayed_to_a_new_subscription_is_not_shown_twice() -> None:
    port = FakeChatPort()
    prompts = ApprovalPrompts(PlatformCalls(port), TO)
    await prompts.ask(request())
    await prompts.ask(request())  # a second subscription: the session replays what is pending
    assert len(port.in_channel("C1")) == 1 and port.count("post_buttons") == 1


async def test_a_prompt_posted_before_a_restart_is_found_and_its_decision_edits_it() -> None:
    port = FakeChatPort()
    await ApprovalPrompts(PlatformCalls(port), TO).ask(request())  # the process that crashed
    [asked] = port.in_channel("C1")
    again = ApprovalPrompts(PlatformCalls(port), TO)  # the next process, a new renderer
    await again.ask(request())
    assert port.in_channel("C1") == [asked] and port.count("post_buttons") == 1
    await again.show_decision(
        out.ApprovalDecided(session_id=SID, approval_id="ap_1", decision="approve", by="carol")
    )
    assert asked.text == "shell: approve by carol" and asked.buttons == ()


async def test_a_pressed_copy_of_a_prompt_shows_the_decision_too() -> None:
    """A platform that cannot find a prompt by its key (Telegram) posts it again after a
    crash left the first one unrecorded: the copy people press is edited with the decision
    as well as the prompt this process shows."""
    port = FakeChatPort()
    copy_id = await port.post_buttons(TO, "May I run shell?", [], key="lost answer")  # before the crash
    prompts = ApprovalPrompts(PlatformCalls(port), TO)
    await prompts.ask(request())
    copy, shown = port.in_channel("C1")
    prompts.pressed("ap_1", copy_id)
    prompts.pressed("ap_1", shown.id)  # the recorded prompt itself: edited once
    await prompts.show_decision(
        out.ApprovalDecided(session_id=SID, approval_id="ap_1", decision="approve", by="carol")
    )
    assert copy.text == shown.text == "shell: approve by carol"
    assert port.count("edit") == 2


async def test_a_press_no_prompt_here_shows_is_answered_on_the_pressed_message() -> None:
    """Pressed after a restart, before this process shows the request again: once decided,
    the pressed message itself says so (no prompt here will)."""
    port, gateway = FakeChatPort(), ChatGateway()
    gateway.approvals["ap_1"] = "fake:old"
    message_id = await port.post_buttons(TO, "May I run shell?", [], key="k")
    click = ButtonClick("approve", "ap_1", "U7", MessageRef("C1", message_id), "Alice", None)
    await decide(gateway, PlatformCalls(port), click, None)
    [pressed] = port.in_channel("C1")
    assert pressed.text == "approve by Alice"
    refused = ButtonClick("approve", "ap_1", "U666", MessageRef("C1", message_id), "Mallory", None)
    await decide(gateway, PlatformCalls(port), refused, None)
    assert pressed.text == "approve by Alice"  # a refusal edits nothing


class Told:
    def __init__(self) -> None:
        self.said: list[str] = []

    async def __call__(self, text: str) -> None:
        self.said.append(text)


def press(action: str, approval_id: str, user: str, told: Told | None) -> ButtonClick:
    return ButtonClick(action, approval_id, user, MessageRef("C1", "m1"), "", told)


async def test_a_press_decides_through_the_gateway() -> None:
    gateway, told = ChatGateway(), Told()
    await decide(gateway, PlatformCalls(FakeChatPort()), press("approve", "ap_1", "U7", told), SID)
    assert gateway.decisions == [(SID, "ap_1", "approve", "U7")]  # named by id when no name came
    assert told.said == []


async def test_a_press_on_a_request_asked_before_a_restart_is_found_among_the_pending() -> None:
    gateway = ChatGateway()
    gateway.approvals["ap_1"] = "fake:old"
    await decide(gateway, PlatformCalls(FakeChatPort()), press("deny", "ap_1", "U7", None), None)
    assert gateway.decisions == [("fake:old", "ap_1", "deny", "U7")]


async def test_refusals_and_failures_are_told_to_the_presser_only() -> None:
    gateway, told, calls = ChatGateway(), Told(), PlatformCalls(FakeChatPort())
    await decide(gateway, calls, press("deny", "ap_1", "U666", told), SID)
    await decide(gateway, calls, press("deny", "ap_unknown", "U7", told), None)
    gateway.failing = SessionUnavailable("netclaw is shutting down")
    await decide(gateway, calls, press("deny", "ap_1", "U7", told), SID)
    await decide(gateway, calls, press("deny", "ap_1", "U7", None), SID)  # nobody to tell: nothing raised
    assert gateway.decisions == []
    assert len(told.said) == 3
    assert "may not decide" in told.said[0]
    assert "no longer pending" in told.said[1]
    assert told.said[2] == "could not decide: netclaw is shutting down"
