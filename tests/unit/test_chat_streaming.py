"""Reply streaming (adapters/chat/_streaming.py) on its own, over the in-memory chat port:
the first text at once, the rest throttled, the final text split and keyed by the outbox,
leftovers deleted, failures handled; native streaming and its fallback. The throttle is
tested with an interval no test run reaches (held back until ``flush``) or with none."""

from __future__ import annotations

import pytest

from adapters.chat import ChatApiError, Conversation, outbox_key
from adapters.chat._calls import PlatformCalls
from adapters.chat._streaming import NativeStreaming, ReplyStream
from tests.fakes.chat_port import FakeChatPort, FakeStreamingPort

SID = "fake:1"
TO = Conversation("C1")
IN_THREAD = Conversation("C1", "T1")
NEVER = 3600.0  # an edit interval no test reaches: updates wait for flush()


def stream(
    port: FakeChatPort,
    *,
    interval: float = NEVER,
    to: Conversation = TO,
    native: NativeStreaming | None = None,
) -> ReplyStream:
    native = native or NativeStreaming(isinstance(port, FakeStreamingPort))
    return ReplyStream(PlatformCalls(port), SID, to, native, interval)


async def test_the_first_text_posts_at_once_and_later_ones_wait_for_the_interval() -> None:
    port = FakeChatPort()
    reply = stream(port)
    assert not reply.active and reply.due_in(0.0) is None
    await reply.delta(1, "Hello")
    assert port.texts("C1") == ["Hello"] and reply.active
    await reply.delta(1, " there")
    await reply.delta(1, ", friend")
    assert port.texts("C1") == ["Hello"]  # held back by the throttle
    due = reply.due_in(0.0)
    assert due is not None and due > 0
    await reply.flush()
    assert port.texts("C1") == ["Hello there, friend"] and reply.due_in(0.0) is None
    assert port.count("post") == 1 and port.count("edit") == 1


async def test_without_an_interval_every_delta_shows() -> None:
    port = FakeChatPort()
    reply = stream(port, interval=0.0)
    for word in ("a", "b", "c"):
        await reply.delta(1, word)
    assert port.texts("C1") == ["abc"] and port.count("edit") == 2


async def test_a_long_final_text_is_split_with_outbox_keys_and_leftovers_are_deleted() -> None:
    port = FakeChatPort()
    reply = stream(port, interval=0.0)
    long = "\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(6))
    await reply.delta(1, long)
    streamed = port.in_channel("C1")
    assert len(streamed) >= 3 and all(len(m.text) <= port.message_limit for m in streamed)
    ids = await reply.final(1, "short after all")
    assert port.texts("C1") == ["short after all"]
    assert ids == [streamed[0].id]
    assert port.posted_with(outbox_key(SID, 1, 0)) == streamed[0].id  # the key it was posted with


async def test_the_final_text_of_a_turn_nobody_streamed_is_posted_in_pieces() -> None:
    port = FakeChatPort()
    reply = stream(port)
    text = "\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(4))
    ids = await reply.final(3, text)
    assert ids is not None and len(ids) == len(port.texts("C1")) >= 2
    assert [port.posted_with(outbox_key(SID, 3, i)) for i in range(len(ids))] == ids
    assert " ".join(" ".join(port.texts("C1")).split()) == " ".join(text.split())


async def test_an_empty_final_text_keeps_what_streamed() -> None:
    port = FakeChatPort()
    reply = stream(port)
    await reply.delta(1, "streamed words")
    ids = await reply.final(1, "")
    assert port.texts("C1") == ["streamed words"] and ids == [port.in_channel("C1")[0].id]


async def test_a_new_turn_never_lands_in_the_last_ones_messages() -> None:
    port = FakeChatPort()
    reply = stream(port)
    await reply.delta(1, "first")
    await reply.delta(2, "second")  # turn 1 never closed (its stream was cut)
    assert port.texts("C1") == ["first", "second"]


async def test_a_lost_answer_is_retried_with_the_same_key() -> None:
    port = FakeChatPort()
    port.lose_answer("post", ChatApiError("timed out", transient=True, retry_after=0.0))
    reply = stream(port)
    assert await reply.final(1, "once") is not None
    assert port.count("post") == 2 and port.texts("C1") == ["once"]


async def test_a_failed_streaming_update_is_tried_again_at_the_next_interval() -> None:
    port = FakeChatPort()
    port.fail("post", ChatApiError("slow down", transient=True))
    reply = stream(port)
    await reply.delta(1, "partial")  # not retried now (best effort), and not raised
    assert port.texts("C1") == [] and reply.due_in(0.0) is not None
    await reply.flush()
    assert port.texts("C1") == ["partial"]


async def test_a_deleted_message_is_posted_anew() -> None:
    port = FakeChatPort()
    reply = stream(port)
    await reply.delta(1, "first words")
    port.in_channel("C1")[0].deleted = True  # someone deleted it
    await reply.final(1, "first words and the rest")
    assert port.texts("C1") == ["first words and the rest"] and port.count("post") == 2


async def test_a_final_text_that_cannot_be_shown_is_not_reported_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = FakeChatPort()
    port.fail("post", ChatApiError("forbidden", status=403))
    assert await stream(port).final(1, "never shown") is None
    assert "could not show the reply" in caplog.text


async def test_completed_shows_what_streamed_and_starts_afresh() -> None:
    port = FakeChatPort()
    reply = stream(port)
    await reply.delta(1, "a")
    await reply.delta(1, "b")
    await reply.completed()
    assert port.texts("C1") == ["ab"] and not reply.active


async def test_a_restarted_stream_replays_into_the_same_message() -> None:
    port = FakeChatPort()
    reply = stream(port, interval=0.0)
    await reply.delta(1, "The answer is")
    reply.restart()  # a new subscription: the resumed turn streams from its start
    await reply.delta(1, "The answer is 42")
    assert port.texts("C1") == ["The answer is 42"] and port.count("post") == 1


# -- native streaming ---------------------------------------------------------------------------


async def test_a_natively_streamed_reply_is_one_message_closed_with_the_outbox_key() -> None:
    port = FakeStreamingPort()
    reply = stream(port, to=IN_THREAD, interval=0.0)
    for word in ("Hello", " there", ","):
        await reply.delta(1, word)
    ids = await reply.final(1, "Hello there, friend!")
    [message] = port.in_channel("C1")
    assert ids == [message.id] and message.text == "Hello there, friend!"
    assert [op for op, _ in port.stream_log] == ["start", "append", "append", "stop"]
    assert port.stop_keys[message.id] == outbox_key(SID, 1, 0)
    assert port.count("post") == 0 and port.count("edit") == 0


async def test_a_final_text_the_stream_cannot_show_is_edited_in() -> None:
    port = FakeStreamingPort()
    reply = stream(port, to=IN_THREAD)
    await reply.delta(1, "a draft that gets rewritten")
    await reply.final(1, "The final answer.")
    assert not port.streaming and port.texts("C1") == ["The final answer."] and port.count("post") == 0


async def test_a_failed_turn_closes_its_open_stream() -> None:
    port = FakeStreamingPort()
    reply = stream(port, to=IN_THREAD)
    await reply.delta(1, "half an answer")
    await reply.failed()
    assert not port.streaming and not reply.active


async def test_without_native_streaming_every_reply_falls_back_for_good() -> None:
    port = FakeStreamingPort(supported=False)
    native = NativeStreaming(True)
    await stream(port, to=IN_THREAD, native=native).delta(1, "reply 1")
    await stream(port, to=IN_THREAD, native=native).delta(2, "reply 2")  # another session's reply
    assert port.texts("C1") == ["reply 1", "reply 2"]
    assert port.count("stream_start") == 1 and not native.available


async def test_outside_a_thread_a_streaming_port_posts_and_edits() -> None:
    port = FakeStreamingPort()
    reply = stream(port, to=TO)
    await reply.delta(1, "top level")
    assert port.count("stream_start") == 0 and port.texts("C1") == ["top level"]
