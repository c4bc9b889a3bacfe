"""Typed outputs and their filters, SubscriberSet fan-out and the coalescing, bounded
OutputQueue."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import typing
from typing import Any

import pytest

from netclaw import outputs
from netclaw.outputs import OUTPUT_TYPES, Output, OutputFilter
from netclaw.sessions import OutputQueue, Subscriber, SubscriberSet
from tests.doc_blocks import table_after

F = OutputFilter

EVENT_FILTER = {e: cls.bit for e, cls in OUTPUT_TYPES.items() if cls.bit is not None}
LIFECYCLE_EVENTS = frozenset(e for e, cls in OUTPUT_TYPES.items() if cls.bit is None)
DROPPABLE_EVENTS = frozenset(e for e, cls in OUTPUT_TYPES.items() if cls.droppable)
_DEFAULTS: dict[Any, Any] = {int: 0, str: "", bool: False, float: 0.0}


def out(event: str, **data: Any) -> Output:
    """An output of ``event`` with ``data``; fields not given get an empty value."""
    cls = OUTPUT_TYPES[event]
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {"session_id": "s"}
    for f in dataclasses.fields(cls):
        if f.name in data:
            fields[f.name] = data[f.name]
        elif f.name not in fields and f.default is dataclasses.MISSING:
            hint = hints[f.name]
            fields[f.name] = _DEFAULTS.get(hint, "approve" if "approve" in str(hint) else "completed")
    return cls(**fields)


# -- OutputFilter.parse -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("text,usage", F.TEXT | F.USAGE),
        ("text", F.TEXT),
        (" TEXT_STREAMING , thinking ", F.TEXT_STREAMING | F.THINKING),
        ("tool_calls,files", F.TOOL_CALLS | F.FILES),
        ("text,text", F.TEXT),
        ("usage,", F.USAGE),
        ("", F.TEXT),
        ("   ", F.TEXT),
        (None, F.TEXT),
        ("all", F.ALL),
        ("ALL", F.ALL),
        ("text,text_streaming,thinking,tool_calls,usage,files", F.ALL),
    ],
)
def test_parse(spec: str | None, expected: OutputFilter) -> None:
    assert OutputFilter.parse(spec) == expected


@pytest.mark.parametrize("spec", ["bogus", "text,bogus", "none"])
def test_parse_unknown_name_raises_naming_it(spec: str) -> None:
    bad = spec.split(",")[-1]
    with pytest.raises(ValueError, match=bad):
        OutputFilter.parse(spec)


def test_all_has_every_bit() -> None:
    for bit in (F.TEXT, F.TEXT_STREAMING, F.THINKING, F.TOOL_CALLS, F.USAGE, F.FILES):
        assert F.ALL & bit


# -- Output.wanted_by ---------------------------------------------------------------------------

# The events table of docs/events.md: event → its filter bit (None: always delivered).
DOCUMENTED_BITS = {
    row[0].strip("`"): None if row[1] == "always" else F[row[1]]
    for row in table_after("docs/events.md", "events table")
}


def test_tables_match_the_documentation() -> None:
    assert dict(EVENT_FILTER) == {e: bit for e, bit in DOCUMENTED_BITS.items() if bit is not None}
    assert {e for e, bit in DOCUMENTED_BITS.items() if bit is None} == LIFECYCLE_EVENTS
    assert not set(EVENT_FILTER) & LIFECYCLE_EVENTS
    assert not DROPPABLE_EVENTS & LIFECYCLE_EVENTS
    assert "text" not in DROPPABLE_EVENTS


@pytest.mark.parametrize(("event", "bit"), sorted(EVENT_FILTER.items()))
def test_filtered_event_wanted_only_with_its_bit(event: str, bit: OutputFilter) -> None:
    output = out(event)
    assert output.wanted_by(bit)
    assert output.wanted_by(F.ALL)
    assert not output.wanted_by(F.NONE)
    assert not output.wanted_by(F.ALL & ~bit)
    for other in (F.TEXT, F.TEXT_STREAMING, F.THINKING, F.TOOL_CALLS, F.USAGE, F.FILES):
        assert output.wanted_by(other) == (other == bit)


@pytest.mark.parametrize("event", sorted(LIFECYCLE_EVENTS))
def test_lifecycle_event_wanted_by_everyone(event: str) -> None:
    output = out(event)
    assert output.wanted_by(F.NONE)
    assert output.wanted_by(F.TEXT)
    assert output.wanted_by(F.ALL)


# -- SubscriberSet ------------------------------------------------------------------------------


class ListSink:
    def __init__(self, alive: bool = True) -> None:
        self.got: list[Output] = []
        self.alive = alive

    def offer(self, output: Output) -> bool:
        if not self.alive:
            return False
        self.got.append(output)
        return True


def test_publish_delivers_by_filter() -> None:
    subs = SubscriberSet()
    text_only, streaming, everything = ListSink(), ListSink(), ListSink()
    subs.add(Subscriber("a", F.TEXT, text_only))
    subs.add(Subscriber("b", F.TEXT_STREAMING | F.USAGE, streaming))
    subs.add(Subscriber("c", F.ALL, everything))
    sent = [
        out("text_delta", turn=1, delta="he"),
        out("usage", turn=1, input_tokens=1),
        out("text", turn=1, text="hello"),
        out("tool_call", turn=1, id="x"),
        out("turn_completed", turn=1),
    ]
    for o in sent:
        subs.publish(o)
    assert [o.event for o in text_only.got] == ["text", "turn_completed"]
    assert [o.event for o in streaming.got] == ["text_delta", "usage", "turn_completed"]
    assert everything.got == sent
    assert len(subs) == 3


def test_the_set_knows_whether_anyone_takes_streamed_text() -> None:
    """What a model call asks before relaying deltas: kept through adds, removals, sinks
    found gone (by a publish or a send) and the close."""
    subs = SubscriberSet()
    assert not subs.streams_text
    subs.add(Subscriber("text", F.TEXT | F.USAGE, ListSink()))
    assert not subs.streams_text
    subs.add(Subscriber("stream", F.TEXT_STREAMING, ListSink(alive=False)))
    assert subs.streams_text
    subs.publish(out("text_delta", turn=1, delta="he"))  # finds the streaming one gone
    assert not subs.streams_text
    subs.add(Subscriber("all", F.ALL, ListSink()))
    assert subs.streams_text
    assert subs.remove("all") and not subs.streams_text
    subs.add(Subscriber("again", F.ALL, ListSink(alive=False)))
    assert not subs.send_to("again", out("text", text="x")) and not subs.streams_text
    subs.remove("text")
    subs.add(Subscriber("last", F.TEXT_STREAMING, ClosableSink()))
    subs.close_all()
    assert not subs.streams_text


class ClosableSink(ListSink):
    def close(self) -> None:
        self.alive = False


def test_gone_sink_is_removed_without_affecting_others() -> None:
    subs = SubscriberSet()
    before, gone, after = ListSink(), ListSink(alive=False), ListSink()
    subs.add(Subscriber("before", F.TEXT, before))
    subs.add(Subscriber("gone", F.TEXT, gone))
    subs.add(Subscriber("after", F.TEXT, after))
    first = out("text", text="1")
    subs.publish(first)
    assert "gone" not in subs
    assert "before" in subs
    assert "after" in subs
    assert len(subs) == 2
    assert before.got == [first]
    assert after.got == [first]
    second = out("title", title="t")
    subs.publish(second)
    assert before.got == [first, second]
    assert after.got == [first, second]
    assert gone.got == []


def test_gone_sink_not_offered_an_unwanted_event_stays() -> None:
    subs = SubscriberSet()
    gone = ListSink(alive=False)
    subs.add(Subscriber("g", F.TEXT, gone))
    subs.publish(out("usage", input_tokens=1))  # not wanted: never offered, so not noticed
    assert "g" in subs
    subs.publish(out("text", text="x"))
    assert "g" not in subs


def test_remove_and_send_to() -> None:
    subs = SubscriberSet()
    a, b = ListSink(), ListSink()
    subs.add(Subscriber("a", F.NONE, a))
    subs.add(Subscriber("b", F.NONE, b))
    joined = out("joined", title=None, turns=0, phase="ready")
    subs.send_to("a", joined)
    assert a.got == [joined]
    assert b.got == []
    subs.send_to("nobody", joined)  # harmless
    assert subs.remove("a")
    assert not subs.remove("a")
    b.alive = False
    subs.send_to("b", joined)
    assert "b" not in subs
    assert len(subs) == 0


# -- OutputQueue --------------------------------------------------------------------------------


async def settle() -> None:
    """Let call_soon_threadsafe callbacks scheduled so far run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def drain(queue: OutputQueue) -> list[Output]:
    got: list[Output] = []
    while len(queue):
        item = await queue.get()
        assert item is not None
        got.append(item)
    return got


async def test_consecutive_deltas_of_a_turn_coalesce() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    for piece in ("Hel", "lo", ", ", "world"):
        assert queue.offer(out("text_delta", turn=1, delta=piece))
    await settle()
    assert len(queue) == 1
    item = await queue.get()
    assert item == outputs.TextDelta(session_id="s", turn=1, delta="Hello, world")


async def test_deltas_of_different_turns_or_separated_do_not_coalesce() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    queue.offer(out("text_delta", turn=1, delta="a"))
    queue.offer(out("text_delta", turn=2, delta="b"))
    queue.offer(out("text_delta", turn=2, delta="c"))
    queue.offer(out("usage", turn=2, input_tokens=3))
    queue.offer(out("text_delta", turn=2, delta="d"))
    await settle()
    got = await drain(queue)
    assert [(o.event, getattr(o, "turn", None), getattr(o, "delta", None)) for o in got] == [
        ("text_delta", 1, "a"),
        ("text_delta", 2, "bc"),
        ("usage", 2, None),
        ("text_delta", 2, "d"),
    ]


async def test_delta_already_consumed_is_not_extended() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    queue.offer(out("text_delta", turn=1, delta="a"))
    await settle()
    first = await queue.get()
    queue.offer(out("text_delta", turn=1, delta="b"))
    await settle()
    second = await queue.get()
    assert first is not None
    assert second is not None
    assert isinstance(first, outputs.TextDelta) and isinstance(second, outputs.TextDelta)
    assert (first.delta, second.delta) == ("a", "b")


async def test_past_soft_limit_droppables_are_shed_and_the_rest_kept_in_order() -> None:
    queue = OutputQueue(asyncio.get_running_loop(), soft_limit=5, hard_limit=1000)
    sent: list[Output] = []
    for i in range(30):
        sent.append(out("usage", turn=i, input_tokens=i))
        sent.append(out("text_delta", turn=i, delta=str(i)))
        sent.append(out("text", turn=i, text=f"reply {i}"))
        sent.append(out("turn_completed", turn=i))
        if i % 7 == 0:
            sent.append(out("title", title=f"t{i}"))
            sent.append(out("error", code="x", message=str(i)))
    for o in sent:
        assert queue.offer(o)
    await settle()
    got = await drain(queue)
    must_keep = [o for o in sent if o.event not in DROPPABLE_EVENTS]
    kept_must = [o for o in got if o.event not in DROPPABLE_EVENTS]
    assert kept_must == must_keep
    assert queue.dropped > 0
    assert len(got) < len(sent)
    assert len(got) + queue.dropped == len(sent)
    assert not queue.closed
    assert not queue.overflowed


async def test_under_soft_limit_nothing_is_dropped() -> None:
    queue = OutputQueue(asyncio.get_running_loop(), soft_limit=100)
    sent = [out("usage", turn=i, input_tokens=i) for i in range(50)]
    for o in sent:
        queue.offer(o)
    await settle()
    assert await drain(queue) == sent
    assert queue.dropped == 0


async def test_past_hard_limit_the_queue_closes_overflowed() -> None:
    queue = OutputQueue(asyncio.get_running_loop(), soft_limit=2, hard_limit=4)
    for i in range(10):
        queue.offer(out("text", turn=i, text=str(i)))
    await settle()
    assert queue.closed
    assert queue.overflowed
    got: list[Output] = []
    while (item := await queue.get()) is not None:
        got.append(item)
    # what was queued before the cut is delivered in order, then the end
    assert [getattr(o, "turn", None) for o in got] == list(range(len(got)))
    assert 4 < len(got) <= 10
    assert await queue.get() is None
    assert not queue.offer(out("text", text="late"))


async def test_offer_after_close_returns_false_and_get_ends() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    queue.offer(out("text", text="kept"))
    await settle()
    queue.close()
    assert not queue.offer(out("text", text="late"))
    await settle()
    first = await queue.get()
    assert first is not None
    assert isinstance(first, outputs.Text) and first.text == "kept"
    assert await queue.get() is None
    assert not queue.overflowed


async def test_output_offered_before_close_is_still_delivered() -> None:
    # A session that fails publishes a last `error`, then closes its subscribers: the
    # error must reach them before the stream ends.
    queue = OutputQueue(asyncio.get_running_loop())
    assert queue.offer(out("error", code="session_failed", message="x"))  # not yet pushed
    queue.close()
    assert not queue.offer(out("text", text="after close"))
    await settle()
    first = await queue.get()
    assert first is not None and first.event == "error"
    assert await queue.get() is None


async def test_get_waits_for_an_offer() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    waiter = asyncio.create_task(queue.get())
    await settle()
    assert not waiter.done()
    queue.offer(out("title", title="t"))
    item = await asyncio.wait_for(waiter, 1)
    assert item is not None
    assert item.event == "title"


async def test_get_blocked_on_empty_queue_returns_none_on_close() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    waiter = asyncio.create_task(queue.get())
    await settle()
    queue.close()
    assert await asyncio.wait_for(waiter, 1) is None


async def test_offer_from_another_thread_arrives_in_order() -> None:
    queue = OutputQueue(asyncio.get_running_loop())
    results: list[bool] = []

    def produce() -> None:
        for i in range(20):
            results.append(queue.offer(out("text", turn=i, text=str(i))))

    thread = threading.Thread(target=produce)
    thread.start()
    got: list[Output] = []
    async with asyncio.timeout(5):
        while len(got) < 20:
            item = await queue.get()
            assert item is not None
            got.append(item)
    thread.join(5)
    assert results == [True] * 20
    assert [getattr(o, "turn", None) for o in got] == list(range(20))


def test_offer_to_a_closed_loop_returns_false_and_closes() -> None:
    loop = asyncio.new_event_loop()
    queue = OutputQueue(loop)
    loop.close()
    assert not queue.offer(out("text", text="x"))
    assert queue.closed


# -- the wire shape -----------------------------------------------------------------------------


@pytest.mark.parametrize("event", sorted(OUTPUT_TYPES))
def test_payload_round_trips_and_carries_the_session(event: str) -> None:
    output = out(event)
    data = outputs.payload(output)
    assert data["session_id"] == "s"
    assert outputs.parse(event, data) == output


def test_payload_names_follow_the_contract() -> None:
    assert outputs.payload(out("phase", from_="ready", to="processing")) == {
        "session_id": "s",
        "from": "ready",
        "to": "processing",
    }
    assert "turn" not in outputs.payload(out("error", code="x", message="m"))
    assert outputs.payload(out("error", code="x", message="m", turn=3))["turn"] == 3
    completed = outputs.payload(out("turn_completed", turn=2, message_id="u_1", status="cancelled"))
    assert completed == {"session_id": "s", "turn": 2, "message_id": "u_1", "status": "cancelled"}


def test_parse_refuses_unknown_events_and_missing_fields_and_ignores_extra_keys() -> None:
    with pytest.raises(ValueError, match="bogus"):
        outputs.parse("bogus", {"session_id": "s"})
    with pytest.raises(ValueError, match="title"):
        outputs.parse("title", {"session_id": "s"})
    assert outputs.parse("title", {"session_id": "s", "title": "t", "new_key": 1}) == out("title", title="t")
