"""The prompt as cache layers, driven through the pure session: the volatile tail (the time,
recalled memories, a restart notice) is recorded with the newest turn before the call that
carries it, so every later request repeats it where it is; a tool round's second call
shares everything with the first but the new messages; tools come sorted; nothing per-turn
sits at the top."""

from __future__ import annotations

from netclaw.llm import ProviderRequest, ToolSchema
from netclaw.messages import CONTEXT_OPEN, MessageKind
from netclaw.sessions._core.context.tail import TIME_NEWS_AFTER_S
from netclaw.sessions._core.effects import CallModel, ContinuityDelivered, Recall
from netclaw.sessions._core.journal.events import ContextAttached
from tests.unit.sessions.harness import Driver, tool_call

MEMORIES = "Relevant memories (from earlier conversations):\n- [fact] The deploy password rotates on Fridays"


def _requests(d: Driver) -> list[ProviderRequest]:
    return [e.request for e in d.effects if isinstance(e, CallModel)]


def _shares_prefix(before: ProviderRequest, after: ProviderRequest) -> bool:
    """``after`` repeats all of ``before`` (the same messages, in place) and the same tools."""
    n = len(before.messages)
    return list(after.tools) == list(before.tools) and list(after.messages[:n]) == list(before.messages)


def test_recall_runs_first_and_its_memories_are_recorded_in_the_turns_tail() -> None:
    d = Driver(has_memory=True)
    _, effects = d.send("when does the password rotate?")
    (recall,) = [e for e in effects if isinstance(e, Recall)]
    assert recall.query.query == "when does the password rotate?"
    assert not [e for e in effects if isinstance(e, CallModel)]  # the call waits for the memories
    effects = d.recalled(MEMORIES)
    (attached,) = [e for e in d.events(effects) if isinstance(e, ContextAttached)]
    tail = attached.message
    assert tail.kind is MessageKind.CONTEXT and tail.role == "user"
    assert (
        tail.content.startswith(CONTEXT_OPEN) and "Fridays" in tail.content and "The time now" in tail.content
    )
    request = d.pending(CallModel).request
    assert request.messages[-1] == tail and request.messages[-2].content == "when does the password rotate?"
    # Nothing per-turn at the top: the head is the static system prompt alone.
    assert [m.role for m in request.messages[:2]] == ["system", "user"]
    assert d.state.transcript[-1] == tail  # recorded, so recovery rebuilds it
    d.close()


def test_the_next_turn_repeats_the_previous_tail_in_place() -> None:
    d = Driver(has_memory=True)
    d.send("one")
    d.recalled(MEMORIES)
    d.answer("first")
    d.send("two")
    d.recalled("Relevant memories (from earlier conversations):\n- [note] something else")
    first, second = _requests(d)
    assert _shares_prefix(first, second)  # the first request is a prefix of the second
    assert second.messages[len(first.messages)].content == "first"  # then the answer, the new turn
    assert "something else" in second.messages[-1].content
    d.close()


def test_a_tool_rounds_second_call_shares_everything_but_the_new_messages() -> None:
    d = Driver(has_memory=True)
    d.send("what time is it?")
    d.recalled(MEMORIES)
    d.answer(calls=[tool_call("current_time", "c1")])
    d.tools_done("12:00")
    first, second = _requests(d)
    assert _shares_prefix(first, second)
    assert [m.role for m in second.messages[len(first.messages) :]] == ["assistant", "tool"]
    assert len([e for e in d.effects if isinstance(e, Recall)]) == 1  # recalled for the first call only
    d.close()


def test_the_time_is_told_when_it_is_news_only() -> None:
    d = Driver()
    d.send("one")
    d.answer("a")
    d.now += 60
    d.send("two")  # a minute later: no tail at all
    d.answer("b")
    d.now += TIME_NEWS_AFTER_S
    d.send("three")  # after a pause: the time again
    tails = [e.message.content for e in d.events() if isinstance(e, ContextAttached)]
    assert len(tails) == 2 and all("The time now" in t for t in tails)
    assert _requests(d)[1].messages[-1].content == "two"
    d.close()


def test_tools_are_offered_sorted_by_name() -> None:
    tools = [ToolSchema(n, n, {"type": "object", "properties": {}}) for n in ("zeta", "alpha", "mid")]
    d = Driver(tools=tools)
    d.send("hi")
    assert [t.name for t in d.pending(CallModel).request.tools] == ["alpha", "mid", "zeta"]
    d.close()


def test_a_restart_notice_is_recorded_in_the_tail_once() -> None:
    before = Driver()
    before.send("before the restart")
    before.answer("ok")
    d = Driver(state=before.state, resumed_at=before.now - 300)
    d.now = before.now + 1
    _, effects = d.send("after")
    (attached,) = [e for e in d.events(effects) if isinstance(e, ContextAttached)]
    assert "resuming after netclaw was restarted" in attached.message.content
    assert "The time now" in attached.message.content
    assert ContinuityDelivered() in effects
    assert d.state.transcript[-1] == attached.message
    d.answer("carrying on")
    _, effects = d.send("and then")  # once: the next turn has no restart notice
    assert not [e for e in d.events(effects) if isinstance(e, ContextAttached)]
    before.close()
    d.close()
