"""The outbox (adapters/chat/_outbox.py) on its own: owed replies posted once each with
their outbox keys and recorded, a turn still running left to the live path, a piece a
crashed process posted found and finished rather than posted again (also one still on
its way when the renderer before stopped); and the watch
(adapters/chat/_outbox_watch.py) that follows the sessions owing replies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial

import pytest

from adapters.chat import Conversation, MessageRef, RenderOptions, outbox_key
from adapters.chat._calls import PlatformCalls
from adapters.chat._links import Link, Links
from adapters.chat._outbox import Outbox
from adapters.chat._outbox_watch import OutboxWatch
from netclaw import outputs as out
from netclaw.errors import SessionUnavailable
from tests.fakes.chat_gateway import ChatGateway, until
from tests.fakes.chat_port import FakeChatPort

SID = "fake:1"
TO = Conversation("C1")
OPTIONS = RenderOptions(edit_interval_s=0.0, release_after_s=30.0, stale_after_s=60.0, reaction="eyes")


def joined(turns: int, phase: str = "ready") -> out.Joined:
    return out.Joined(session_id=SID, title=None, turns=turns, phase=phase)  # type: ignore[arg-type]


async def test_owed_replies_are_posted_with_their_keys_and_recorded() -> None:
    gateway, port = ChatGateway(), FakeChatPort()
    long = "\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(3))
    gateway.owed[SID] = [(1, "the first", time.time()), (2, long, time.time())]
    await Outbox(gateway, PlatformCalls(port), SID, TO).deliver_owed(joined(2))
    posted = port.in_channel("C1")
    assert posted[0].text == "the first" and len(posted) >= 3
    assert gateway.delivered[(SID, 1)] == [posted[0].id]
    assert gateway.delivered[(SID, 2)] == [
        port.posted_with(outbox_key(SID, 2, i)) for i in range(len(posted) - 1)
    ]


class OnTheWire(FakeChatPort):
    """Posts reach the platform when ``arrive`` is set, whether or not the sender still
    waits for the answer (as a request already sent does)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = asyncio.Event()
        self.arrive = asyncio.Event()

    async def post(self, to: Conversation, text: str, *, key: str) -> str:
        self.sent.set()

        async def arriving() -> str:
            await self.arrive.wait()
            return await FakeChatPort.post(self, to, text, key=key)

        return await asyncio.shield(asyncio.ensure_future(arriving()))


async def test_a_piece_on_its_way_when_the_renderer_stopped_lands_before_the_stop_ends() -> None:
    # An adapter restarted in this process: the stream's first piece was sent with the
    # reply's outbox key; the next renderer's outbox must find it, not post with the same
    # key (answered with the partial piece) while it is still on its way.
    gateway, port = ChatGateway(), OnTheWire()
    before = PlatformCalls(port)
    key = outbox_key(SID, 1, 0)
    streaming = asyncio.ensure_future(
        before.retried("send a reply", partial(port.post, TO, "the final te", key=key))
    )
    await port.sent.wait()
    streaming.cancel()
    stopping = asyncio.ensure_future(before.cancel_all())
    # A window in which nothing may happen: the stop must still be waiting for the request.
    await asyncio.wait({stopping}, timeout=0.05)
    assert not stopping.done(), "the stop did not wait for the request under way"
    port.arrive.set()
    await stopping
    assert streaming.cancelled()
    gateway.owed[SID] = [(1, "the final text", time.time())]
    await Outbox(gateway, PlatformCalls(port), SID, TO).deliver_owed(joined(1))
    assert port.texts("C1") == ["the final text"] and port.count("post") == 1


async def test_a_turn_still_running_is_left_to_the_live_path() -> None:
    gateway, port = ChatGateway(), FakeChatPort()
    gateway.owed[SID] = [(1, "done before", time.time()), (2, "still being written", time.time())]
    await Outbox(gateway, PlatformCalls(port), SID, TO).deliver_owed(joined(2, "processing"))
    assert port.texts("C1") == ["done before"] and list(gateway.delivered) == [(SID, 1)]


async def test_a_piece_a_crashed_process_posted_is_finished_not_posted_again() -> None:
    gateway, port = ChatGateway(), FakeChatPort()
    early = await port.post(TO, "the final te", key=outbox_key(SID, 1, 0))  # cut short by the crash
    gateway.owed[SID] = [(1, "the final text", time.time())]
    await Outbox(gateway, PlatformCalls(port), SID, TO).deliver_owed(joined(1))
    assert port.texts("C1") == ["the final text"] and port.count("post") == 1
    assert gateway.delivered[(SID, 1)] == [early]


async def test_a_reply_shown_once_is_never_posted_again_by_the_same_link() -> None:
    gateway, port = ChatGateway(), FakeChatPort()
    outbox = Outbox(gateway, PlatformCalls(port), SID, TO)
    gateway.owed[SID] = [(1, "shown live", time.time())]
    await outbox.mark_delivered(1, ["900123"])
    gateway.delivered.clear()  # the record lags behind (another node, a slow journal)
    await outbox.deliver_owed(joined(1))
    assert port.count("post") == 0 and port.count("find_posted") == 0


async def test_failures_to_ask_or_record_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    gateway, port = ChatGateway(), FakeChatPort()
    outbox = Outbox(gateway, PlatformCalls(port), SID, TO)
    gateway.owed[SID] = [(1, "owed", time.time())]
    gateway.failing = SessionUnavailable("the journal is away")
    await outbox.deliver_owed(joined(1))
    await outbox.mark_delivered(1, ["900123"])
    assert port.count("post") == 0 and gateway.delivered == {}
    assert (
        "cannot ask fake:1 what it owes" in caplog.text
        and "could not record the reply of turn 1" in caplog.text
    )
    gateway.failing = None
    await outbox.deliver_owed(joined(1))  # not remembered as delivered: posted once it can be
    assert port.texts("C1") == ["owed"]


# -- the watch ------------------------------------------------------------------------------------


Watched = tuple[OutboxWatch, Links, ChatGateway, FakeChatPort]


@pytest.fixture
async def watched() -> AsyncIterator[Watched]:
    gateway, port = ChatGateway(), FakeChatPort()
    calls = PlatformCalls(port)
    shown: list[out.Output] = []

    async def render(link: Link, output: out.Output) -> None:
        shown.append(output)

    links = Links(gateway, calls, OPTIONS, render)
    watch = OutboxWatch(gateway, calls, links)
    yield watch, links, gateway, port
    watch.stop()
    closed = links.close()
    await calls.cancel_all(also=[link.task for link in closed])


def conversation_of(session_id: str) -> Conversation | None:
    return TO if session_id.startswith("fake:") and session_id != "fake:unmapped" else None


async def test_resume_follows_the_sessions_that_owe_replies(watched: Watched) -> None:
    watch, links, gateway, _ = watched
    gateway.pending = [SID, "fake:unmapped"]
    gateway.owing = ["fake:2", SID]
    await watch.resume(conversation_of)
    assert links.following() == ["fake:1", "fake:2"]
    assert [sid for sid, _ in gateway.streams] == [SID, "fake:2"]  # once each
    await watch.look()  # already followed: no second subscription
    assert len(gateway.streams) == 2


async def test_a_reply_recorded_with_nobody_watching_is_followed(watched: Watched) -> None:
    watch, links, gateway, _ = watched
    watch.reply_owed(SID)  # not resumed yet: no conversation to post to
    assert links.following() == []
    await watch.resume(conversation_of)
    [listener] = gateway.listeners
    listener(SID)
    listener("slack:C1:1.0")  # another platform's
    assert links.following() == [SID]
    watch.stop()
    assert gateway.listeners == []


async def test_several_nodes_a_session_owned_elsewhere_is_left_to_its_node(watched: Watched) -> None:
    watch, links, gateway, port = watched
    gateway.cluster_poll_s = 0.02
    gateway.elsewhere = {SID}
    gateway.pending = [SID]
    await watch.resume(conversation_of)
    assert links.following() == []
    link = links.follow(SID, TO, listen=False)  # a message acknowledged here, answered there
    link.reactions.mark("u1", MessageRef("C1", "m1"))
    await until(lambda: port.reactions, what="the mark")
    gateway.pending = []  # the owner answered
    await until(lambda: not port.reactions and links.get(SID) is None, what="the mark off, the link let go")
