"""Sub-agents in a chat conversation (adapters/chat/_children.py): one compact line per
child — posted when it starts, edited when it reports — and the renderer keeps following a
conversation whose children still work, so the line gets its ending."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.chat import ChatApiError, ChatRenderer, Conversation, MessageRef
from adapters.chat._calls import PlatformCalls
from adapters.chat._children import ChildLines
from netclaw import outputs as out
from netclaw.gateway import Admission, Inbound
from tests.fakes.chat_port import FakeChatPort
from tests.unit.test_chat_renderer import OPTIONS, PERMIT, StandInGateway, until

SID = "fake:1"
TO = Conversation("C1")
CHILD = "agent:fake:1/1"


def started(child: str = CHILD, task: str = "find the <b>best</b> flight") -> out.SubagentStarted:
    return out.SubagentStarted(session_id=SID, child_id=child, task=task, wait=False)


def finished(
    status: Any = "completed", summary: str = "LH 400 at 10:05", child: str = CHILD
) -> out.SubagentFinished:
    return out.SubagentFinished(session_id=SID, child_id=child, turn=1, status=status, summary=summary)


async def test_a_child_gets_a_line_that_its_report_edits() -> None:
    port = FakeChatPort()
    lines = ChildLines(PlatformCalls(port), SID, TO)
    await lines.started(started())
    [line] = port.in_channel("C1")
    assert line.text == port.escape(f"⏳ sub-agent {CHILD} is working on: find the <b>best</b> flight")
    assert lines.running
    await lines.finished(finished())
    assert port.texts("C1") == [f"✅ sub-agent {CHILD} finished: LH 400 at 10:05"]  # the same message
    assert not lines.running


@pytest.mark.parametrize(
    ("status", "text"),
    [
        ("failed", f"⚠️ sub-agent {CHILD} did not finish (failed): the model failed"),
        ("timed_out", f"⚠️ sub-agent {CHILD} did not finish (timed_out): the model failed"),
        ("cancelled", f"⏹ sub-agent {CHILD} was cancelled"),
    ],
)
async def test_how_a_child_ended_is_said_in_its_line(status: str, text: str) -> None:
    port = FakeChatPort()
    lines = ChildLines(PlatformCalls(port), SID, TO)
    await lines.started(started())
    await lines.finished(finished(status, "the model failed"))
    assert port.texts("C1") == [text]


async def test_an_end_without_a_line_here_gets_one_and_lines_are_per_child() -> None:
    port = FakeChatPort()
    lines = ChildLines(PlatformCalls(port), SID, TO)
    await lines.started(started("agent:fake:1/2", "second"))
    await lines.finished(finished(child=CHILD))  # shown before a restart: a line now
    assert port.texts("C1") == [
        "⏳ sub-agent agent:fake:1/2 is working on: second",
        f"✅ sub-agent {CHILD} finished: LH 400 at 10:05",
    ]
    assert lines.running  # the second still works


async def test_a_line_is_posted_through_transient_failures() -> None:
    port = FakeChatPort()
    port.fail("post", ChatApiError("slow down", transient=True, retry_after=0.0))
    await ChildLines(PlatformCalls(port), SID, TO).started(started())
    assert port.count("post") == 2 and len(port.in_channel("C1")) == 1


@pytest.fixture
async def harness() -> AsyncIterator[tuple[ChatRenderer, StandInGateway, FakeChatPort]]:
    gateway, port = StandInGateway(), FakeChatPort()
    renderer = ChatRenderer(gateway, port, OPTIONS)  # type: ignore[arg-type]
    try:
        yield renderer, gateway, port
    finally:
        await renderer.stop()


async def test_the_renderer_shows_children_and_stays_while_they_work(harness: Any) -> None:
    renderer, gateway, port = harness
    gateway.admissions.append(Admission(SID, "u1", duplicate=False))
    await renderer.submit(PERMIT, Inbound(SID, "split it"), TO, MessageRef("C1", "m1"))
    gateway.push(started())
    gateway.push(out.Text(session_id=SID, turn=1, message_id="a1", text="I asked a helper."))
    gateway.push(out.TurnCompleted(session_id=SID, turn=1, message_id="u1", status="completed"))
    await until(lambda: len(port.texts("C1")) == 2, what="the line and the reply")
    link = next(iter(renderer._links))  # noqa: SLF001 - what the renderer follows
    assert link.pending()  # the child's answer is still to come: the subscription stays
    gateway.push(finished())
    await until(lambda: port.texts("C1")[0].startswith("✅"), what="the line to say it finished")
    assert not link.pending()
