"""Link supervision (adapters/chat/_links.py) on its own: one subscription per followed
session handing its outputs to ``render``; re-subscribing (with backoff) when a stream
ends with a reply owed, and giving up after ``max_revives``; letting a quiet link go; a
reconnect; several nodes; stop. Time-based cases use short limits and wait for the
outcome, never for a precise moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from adapters.chat import ChatApiError, Conversation, MessageRef, RenderOptions
from adapters.chat._calls import PlatformCalls
from adapters.chat._links import Link, Links
from netclaw import outputs as out
from tests.fakes.chat_gateway import ChatGateway, until
from tests.fakes.chat_port import FakeChatPort

SID = "fake:1"
TO = Conversation("C1")
OPTIONS = RenderOptions(
    edit_interval_s=0.0, release_after_s=30.0, stale_after_s=60.0, reaction="eyes", revive_delay_s=0.01
)


class Shown:
    """The render step: records each output; a ChatApiError for ``fail_on`` events."""

    def __init__(self) -> None:
        self.outputs: list[tuple[str, str]] = []
        self.fail_on: set[str] = set()

    async def __call__(self, link: Link, output: out.Output) -> None:
        self.outputs.append((link.session_id, output.event))
        if output.event in self.fail_on:
            raise ChatApiError("the platform said no")


Setup = tuple[Links, ChatGateway, Shown]


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    gateway, shown = ChatGateway(), Shown()
    calls = PlatformCalls(FakeChatPort())
    links = Links(gateway, calls, OPTIONS, shown)
    yield links, gateway, shown
    closed = links.close()
    await calls.cancel_all(also=[link.task for link in closed])


def owe(link: Link) -> None:
    """A message admitted and marked: the link owes a reply."""
    link.reactions.mark("u1", MessageRef("C1", "m1"))


async def test_a_followed_session_is_subscribed_once_and_its_outputs_rendered_in_order(setup: Setup) -> None:
    links, gateway, shown = setup
    link = links.follow(SID, TO)
    assert links.follow(SID, TO) is link and len(gateway.streams) == 1
    gateway.push(
        out.Notice(session_id=SID, text="a", kind="command"),
        out.Notice(session_id=SID, text="b", kind="command"),
    )
    await until(lambda: len(shown.outputs) == 3, what="three outputs")
    assert shown.outputs == [(SID, "joined"), (SID, "notice"), (SID, "notice")]
    assert links.following() == [SID] and links.listening(SID)


async def test_following_without_listening_subscribes_nothing(setup: Setup) -> None:
    links, gateway, _ = setup
    link = links.follow(SID, TO, listen=False)
    assert gateway.streams == [] and not link.listening() and links.get(SID) is link


async def test_a_stream_ended_with_a_reply_owed_is_subscribed_again(setup: Setup) -> None:
    links, gateway, shown = setup
    owe(links.follow(SID, TO))
    gateway.end_stream()
    await until(lambda: len(gateway.streams) == 2 and links.listening(SID), what="a second subscription")
    await until(lambda: shown.outputs.count((SID, "joined")) == 2, what="the second stream joined")


async def test_after_the_revives_run_out_a_reconnect_listens_again(setup: Setup) -> None:
    links, gateway, _ = setup
    links.options = replace(OPTIONS, max_revives=2)
    owe(links.follow(SID, TO))
    for streams in (2, 3):
        gateway.end_stream()
        await until(lambda streams=streams: len(gateway.streams) == streams, what="a revive")
    gateway.end_stream()
    await until(lambda: links.following() == [], what="giving up")
    await asyncio.sleep(0.05)  # absence is the behaviour here: no later revive
    assert len(gateway.streams) == 3 and links.get(SID) is not None  # still owed: known
    links.reconnected()
    assert links.following() == [SID] and len(gateway.streams) == 4


async def test_progress_resets_the_revives(setup: Setup) -> None:
    links, gateway, shown = setup
    links.options = replace(OPTIONS, max_revives=1)
    owe(links.follow(SID, TO))
    for n in (2, 3, 4):  # each stream shows progress before it ends: revived every time
        gateway.push(out.TextDelta(session_id=SID, turn=1, delta="x"))
        await until(lambda n=n: shown.outputs.count((SID, "text_delta")) == n - 1, what="the delta")
        gateway.end_stream()
        await until(lambda n=n: len(gateway.streams) == n, what="a revive")


async def test_a_stream_that_ends_with_nothing_owed_is_let_go(setup: Setup) -> None:
    links, gateway, _ = setup
    links.follow(SID, TO)
    gateway.end_stream()
    await until(lambda: links.get(SID) is None, what="letting go")
    assert len(gateway.streams) == 1


async def test_a_quiet_link_lets_its_subscription_go_and_an_owing_one_waits_longer(setup: Setup) -> None:
    links, gateway, _ = setup
    links.options = replace(OPTIONS, release_after_s=0.05, stale_after_s=1.0)
    links.follow("fake:idle", TO)
    owe(links.follow("fake:owing", TO))
    await until(lambda: links.get("fake:idle") is None, what="the quiet link let go")
    assert gateway.closed == ["sub0"]
    assert links.listening("fake:owing")  # owes a reply: kept until it goes stale
    await until(lambda: links.get("fake:owing") is None, what="the stale link let go")
    assert sorted(gateway.closed) == ["sub0", "sub1"]


async def test_a_reconnect_drops_idle_links_that_stopped_listening(setup: Setup) -> None:
    links, _, _ = setup
    link = links.follow(SID, TO, listen=False)
    links.reconnected()
    assert links.get(SID) is None and link.released


async def test_a_session_owned_elsewhere_is_not_revived(setup: Setup) -> None:
    links, gateway, _ = setup
    gateway.cluster_poll_s = 1.0
    owe(links.follow(SID, TO))
    gateway.elsewhere = {SID}
    assert await links.owned_elsewhere(SID)
    gateway.end_stream()
    await until(lambda: not links.listening(SID), what="the stream to end")
    await asyncio.sleep(0.05)  # absence is the behaviour here: no revive for a session owned elsewhere
    assert len(gateway.streams) == 1


async def test_a_failed_render_is_logged_and_the_stream_goes_on(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    links, gateway, shown = setup
    shown.fail_on = {"notice"}
    links.follow(SID, TO)
    gateway.push(
        out.Notice(session_id=SID, text="a", kind="command"),
        out.Compaction(
            session_id=SID,
            messages_before=2,
            messages_after=1,
            tool_results_cleared=0,
            summarized=True,
            memories_saved=0,
            tokens_before=2,
            tokens_after=1,
        ),
    )
    await until(lambda: len(shown.outputs) == 3, what="both outputs")
    assert "showing notice for fake:1 failed" in caplog.text and links.listening(SID)


async def test_close_ends_every_subscription(setup: Setup) -> None:
    links, gateway, _ = setup
    first, second = links.follow("fake:1", TO), links.follow("fake:2", TO)
    closed = links.close()
    assert closed == [first, second] and links.stopping and links.following() == []
    assert sorted(gateway.closed) == ["sub0", "sub1"] and first.released and second.released


# -- how the parts call the platform ------------------------------------------------------------


async def test_platform_calls_retry_what_must_get_through_and_swallow_what_may_be_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="adapters.chat")
    port = FakeChatPort()
    calls = PlatformCalls(port)
    port.fail("post", ChatApiError("slow down", transient=True, retry_after=0.0))
    assert await calls.retried("post", lambda: port.post(TO, "hi", key="k1")) == port.in_channel("C1")[0].id
    port.fail("react", ChatApiError("gone", status=404))
    assert not await calls.quietly("add a reaction", port.react(MessageRef("C1", "m1"), "eyes", add=True))
    assert "fake: could not add a reaction: gone" in caplog.text
    port.fail("post", ChatApiError("forbidden", status=403))
    with pytest.raises(ChatApiError, match="forbidden"):
        await calls.retried("post", lambda: port.post(TO, "no", key="k2"))
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = calls.spawn(forever())
    await started.wait()
    await calls.cancel_all()
    assert task.cancelled()
