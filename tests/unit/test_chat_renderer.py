"""The chat renderer (adapters/chat) over the in-memory chat port.

Two halves. The first feeds typed outputs through a stand-in gateway, for the cases the
real daemon cannot produce on demand: a turn that ends before its admission is back, a
turn that completes out of order, a file, an approval, each lifecycle note. The second
runs the renderer on the real daemon's loop with the scripted provider: queued messages
and a redelivery, a streamed reply throttled and split, a provider error through flaky
port calls, a session stopped mid-turn, a reconnect, and idle release that lets the
session passivate and never wakes it again."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.chat import (
    ButtonClick,
    ChatApiError,
    ChatRenderer,
    Conversation,
    MessageRef,
    RenderOptions,
    outbox_key,
)
from netclaw import outputs as out
from netclaw.errors import NotAnApprover, SessionUnavailable
from netclaw.gateway import Admission, ChatPermit, Inbound, Subscription
from netclaw.security.policy import ChatEvent
from netclaw.sessions import OutputQueue
from tests.conftest import DaemonHandle
from tests.fakes.chat_port import FakeChatPort, FakeStreamingPort
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread

SID = "fake:1"
TO = Conversation("C1")
PERMIT = ChatPermit(ChatEvent(platform="fake", channel_id="C1", user_id="U1"))
OPTIONS = RenderOptions(edit_interval_s=0.2, release_after_s=30.0, stale_after_s=60.0, reaction="eyes")


class StandInGateway:
    """What the renderer uses of the gateway, driven by the test: each subscribe makes a
    stream the test pushes outputs into; each submit answers the next scripted admission."""

    def __init__(self) -> None:
        self.streams: list[tuple[str, OutputQueue]] = []
        self.closed: list[str] = []
        self.admissions: deque[Admission | Exception] = deque()
        self.hold: asyncio.Event | None = None  # submit waits for it (an admission on its way)
        self.pending: list[str] = []
        self.decisions: list[tuple[str, str, str, str]] = []
        self.owed: list[tuple[int, str, float]] = []
        self.delivered: dict[int, list[str]] = {}
        self.owing: list[str] = []
        self.listeners: list[Callable[[str], None]] = []
        self.looks = 0  # the outbox's looks for sessions owing replies

    def subscribe(self, session_id: str, mask: out.OutputFilter) -> Subscription:
        queue = OutputQueue(asyncio.get_running_loop())
        number = len(self.streams)
        self.streams.append((session_id, queue))
        turns = max((turn for turn, _, _ in self.owed), default=0)  # it recorded those turns
        queue.offer(out.Joined(session_id=session_id, title=None, turns=turns, phase="ready"))
        return Subscription(session_id, f"sub{number}", queue, lambda: self.closed.append(f"sub{number}"))

    async def submit_chat(self, permit: ChatPermit, inbound: Inbound) -> Admission:
        if self.hold is not None:
            await self.hold.wait()
        answer = self.admissions.popleft()
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sessions_with_pending_input(self, channel: str | None = None) -> list[str]:
        return list(self.pending)

    async def find_approval(self, approval_id: str) -> str | None:
        return None

    # The outbox: what the session owes its conversation, scripted by the test.
    async def undelivered_replies(self, session_id: str) -> list[tuple[int, str, float]]:
        return [r for r in self.owed if r[0] not in self.delivered]

    async def mark_delivered(self, session_id: str, turn: int, message_ids: Sequence[str]) -> bool:
        self.delivered[turn] = list(message_ids)
        return True

    async def sessions_owing_replies(self, platform: str) -> list[str]:
        self.looks += 1
        return list(self.owing)

    def watch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def unwatch_owed_replies(self, platform: str, listener: Callable[[str], None]) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    cluster_poll_s: float | None = None  # one node; a number: several (the outbox looks that often)
    elsewhere: set[str] = set()  # sessions resident on another node (several nodes)

    async def owner_of(self, session_id: str) -> object | None:
        return "another node" if session_id in self.elsewhere else None

    async def decide_in_chat(
        self, platform: str, session_id: str, approval_id: str, decision: str, *, user_id: str, user_name: str
    ) -> str:
        if user_id == "U666":
            raise NotAnApprover(f"{user_name} may not decide on tool calls in this session")
        self.decisions.append((session_id, approval_id, decision, user_name))
        return decision

    def push(self, *outputs: out.Output) -> None:
        _, queue = self.streams[-1]
        for output in outputs:
            queue.offer(output)

    def end_stream(self) -> None:
        """The session ends the stream (it stopped, or we fell behind)."""
        self.streams[-1][1].close()


@pytest.fixture
async def harness() -> AsyncIterator[tuple[ChatRenderer, StandInGateway, FakeChatPort]]:
    gateway = StandInGateway()
    port = FakeChatPort()
    renderer = ChatRenderer(gateway, port, OPTIONS)  # type: ignore[arg-type]
    try:
        yield renderer, gateway, port
    finally:
        await renderer.stop()


async def until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def admit(
    renderer: ChatRenderer, gateway: StandInGateway, message_id: str, source: str
) -> Admission | None:
    gateway.admissions.append(Admission(SID, message_id, duplicate=False))
    return await renderer.submit(PERMIT, Inbound(SID, "hi"), TO, MessageRef("C1", source))


def delta(text: str, turn: int = 1) -> out.TextDelta:
    return out.TextDelta(session_id=SID, turn=turn, delta=text)


def final(text: str, turn: int = 1) -> out.Text:
    return out.Text(session_id=SID, turn=turn, message_id="a1", text=text)


def done(message_id: str, turn: int = 1, status: out.TurnEnd = "completed") -> out.TurnCompleted:
    return out.TurnCompleted(session_id=SID, turn=turn, message_id=message_id, status=status)


# -- the reply ----------------------------------------------------------------------------------


async def test_the_first_text_posts_at_once_and_later_edits_are_throttled(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(delta("Hello"))
    await until(lambda: port.texts("C1") == ["Hello"], what="the first post")
    posted_at = time.monotonic()
    for word in (" there", ",", " how", " are", " you"):
        gateway.push(delta(word))
        await asyncio.sleep(0.03)  # pacing, not waiting: the words come over time
    await until(lambda: port.texts("C1") == ["Hello there, how are you"], what="the throttled edit")
    assert time.monotonic() - posted_at >= OPTIONS.edit_interval_s - 0.02
    gateway.push(final("Hello there, how are you?"), done("u1"))
    await until(lambda: port.texts("C1") == ["Hello there, how are you?"], what="the final text")
    [message] = port.in_channel("C1")
    assert len(message.edits) <= 3  # not one edit per delta
    assert port.count("post") == 1


async def test_a_long_reply_is_split_and_leftover_pieces_are_deleted(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    long = "\n\n".join(f"Paragraph {i}. " + "words " * 30 for i in range(6))
    gateway.push(delta(long))
    await until(lambda: len(port.texts("C1")) >= 3, what="the split stream")
    gateway.push(final("short after all"), done("u1"))
    await until(lambda: port.texts("C1") == ["short after all"], what="the final text")
    assert all(len(m.text) <= port.message_limit for m in port.messages.values())


async def test_a_new_turn_never_lands_in_the_last_ones_messages(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(delta("first"), final("first"), done("u1"))
    await admit(renderer, gateway, "u2", "m2")
    gateway.push(delta("second", turn=2), final("second", turn=2), done("u2", turn=2))
    await until(lambda: port.texts("C1") == ["first", "second"], what="two replies")


async def test_an_empty_final_text_keeps_what_streamed(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(delta("streamed words"), final(""), done("u1"))
    await until(lambda: port.texts("C1") == ["streamed words"] and not port.reactions, what="the reply")


async def test_a_deleted_message_is_posted_anew(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(delta("first words"))
    await until(lambda: port.texts("C1") == ["first words"], what="the first post")
    [message] = port.in_channel("C1")
    message.deleted = True  # someone deleted it
    gateway.push(final("first words and the rest"), done("u1"))
    await until(lambda: port.texts("C1") == ["first words and the rest"], what="a new post")
    assert port.count("post") == 2


# -- failures -----------------------------------------------------------------------------------


async def test_a_final_reply_is_retried_through_transient_failures(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    port.fail("post", ChatApiError("slow down", transient=True, retry_after=0.05))
    port.fail("post", ChatApiError("502", status=502, transient=True, retry_after=0.05))
    gateway.push(final("it got through"), done("u1"))
    await until(lambda: port.texts("C1") == ["it got through"], what="the reply")
    assert [op for op, _ in port.failures] == ["post", "post"]


async def test_a_failed_streaming_update_waits_for_the_next_interval(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    port.fail("post", ChatApiError("slow down", transient=True))
    gateway.push(delta("partial"))
    await until(lambda: port.count("post") == 2, what="the retry at the next interval")
    assert port.texts("C1") == ["partial"]
    [(_, first), (_, second)] = [c for c in port.calls if c[0] == "post"]
    assert second - first >= OPTIONS.edit_interval_s - 0.02


async def test_a_lost_answer_is_not_shown_twice(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    port.lose_answer("post", ChatApiError("timed out", transient=True))
    gateway.push(final("once"), done("u1"))
    await until(lambda: not port.reactions and port.count("post") == 2, what="the retry")
    assert port.texts("C1") == ["once"]  # the retry carried the same key


async def test_a_refused_message_gets_a_note_and_no_reaction(harness: Any) -> None:
    renderer, gateway, port = harness
    gateway.admissions.append(SessionUnavailable("netclaw is shutting down"))
    assert await renderer.submit(PERMIT, Inbound(SID, "hi"), TO, MessageRef("C1", "m1")) is None
    await until(lambda: port.texts("C1"), what="a note")
    assert "shutting down" in port.texts("C1")[0]
    assert port.reaction_log == []


# -- reactions by message id --------------------------------------------------------------------


async def test_each_turn_unmarks_the_message_that_started_it(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    await admit(renderer, gateway, "u2", "m2")
    await until(lambda: len(port.reactions) == 2, what="both marked")
    gateway.push(done("u2", turn=2))  # the second message's turn (say, the first failed to start)
    await until(lambda: ("C1", "m2", "eyes") not in port.reactions, what="m2 unmarked")
    assert ("C1", "m1", "eyes") in port.reactions  # not FIFO: m1 still waits
    gateway.push(done("u1"))
    await until(lambda: not port.reactions, what="m1 unmarked")


async def test_a_duplicate_admission_marks_nothing(harness: Any) -> None:
    renderer, gateway, port = harness
    gateway.admissions.append(Admission(SID, "u1", duplicate=True))
    admission = await renderer.submit(PERMIT, Inbound(SID, "hi"), TO, MessageRef("C1", "m1"))
    assert admission is not None and admission.duplicate
    await asyncio.sleep(0.1)  # absence is the behaviour here: no mark comes later either
    assert port.reaction_log == []


async def test_a_turn_that_ends_before_its_admission_is_back_leaves_no_mark(harness: Any) -> None:
    renderer, gateway, port = harness
    gateway.hold = asyncio.Event()
    submitting = asyncio.create_task(admit(renderer, gateway, "u1", "m1"))
    await until(lambda: gateway.streams, what="the subscription")
    gateway.push(final("quick"), done("u1"))
    await until(lambda: port.texts("C1") == ["quick"], what="the reply")
    gateway.hold.set()
    await submitting
    await asyncio.sleep(0.1)  # absence is the behaviour here: no mark comes later either
    assert port.reactions == set()
    assert port.reaction_log == []


async def test_the_mark_is_removed_only_after_it_was_added(harness: Any) -> None:
    renderer, gateway, port = harness
    port.fail("react", ChatApiError("slow down", transient=True))  # adding fails
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(done("u1"))
    await asyncio.sleep(0.2)  # absence is the behaviour here: no removal follows the turn's end
    assert [entry[0] for entry in port.reaction_log] == []  # nothing added, so nothing removed


# -- files, approvals, notes --------------------------------------------------------------------


async def test_a_file_output_is_uploaded(harness: Any, tmp_path: Path) -> None:
    renderer, gateway, port = harness
    path = tmp_path / "report.csv"
    path.write_bytes(b"a,b\n1,2\n")
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(
        out.File(session_id=SID, turn=1, name="report.csv", mime_type="text/csv", path=str(path), size=8)
    )
    await until(lambda: any(m.file for m in port.messages.values()), what="the upload")
    [uploaded] = [m.file for m in port.messages.values() if m.file]
    assert uploaded == ("report.csv", b"a,b\n1,2\n", "text/csv")


async def test_an_approval_request_gets_buttons_and_its_decision_replaces_them(
    harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(
        out.ApprovalRequested(
            session_id=SID,
            turn=1,
            approval_id="ap_1",
            tool="shell",
            arguments='{"cmd": "ls"}',
            expires_at=0.0,
        )
    )
    await until(lambda: any(m.buttons for m in port.messages.values()), what="the buttons")
    [asked] = [m for m in port.messages.values() if m.buttons]
    assert "shell" in asked.text and '{"cmd": "ls"}' in asked.text
    assert [(b.action_id, b.value) for b in asked.buttons] == [
        ("approve", "ap_1"),
        ("deny", "ap_1"),
        ("always", "ap_1"),
    ]
    told: list[str] = []

    async def respond(text: str) -> None:
        told.append(text)

    renderer.clicked(ButtonClick("deny", "ap_1", "U666", MessageRef("C1", asked.id), "mallory", respond))
    await until(lambda: told, what="the refusal, to the presser only")
    assert "mallory may not decide" in told[0] and gateway.decisions == []
    renderer.clicked(ButtonClick("deny", "ap_1", "U7", MessageRef("C1", asked.id), "bob", respond))
    await until(lambda: gateway.decisions, what="the decision through the gateway")
    assert gateway.decisions == [(SID, "ap_1", "deny", "bob")]
    renderer.clicked(ButtonClick("approve", "ap_unknown", "U7", None, "bob", respond))
    await until(lambda: len(told) == 2, what="an unknown request refused")
    assert "no longer pending" in told[1]
    gateway.push(out.ApprovalDecided(session_id=SID, approval_id="ap_1", decision="deny", by="U7"))
    await until(lambda: asked.text == "shell: deny by U7", what="the decision shown")
    assert asked.buttons == ()


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (out.Error(session_id=SID, turn=1, code="x", message="the model refused"), ":warning: Sorry"),
        (
            out.HistoryTrimmed(
                session_id=SID,
                first_kept_id="u9",
                dropped_messages=4,
                dropped_turns=2,
                kept_turns=1,
                tokens_before=10,
                tokens_after=5,
                budget=6,
                reason="budget",
            ),
            "2 older turn(s)",
        ),
        (
            out.Compaction(
                session_id=SID,
                messages_before=9,
                messages_after=3,
                tool_results_cleared=0,
                summarized=True,
                memories_saved=2,
                tokens_before=10,
                tokens_after=4,
            ),
            "summarised",
        ),
        (out.Notice(session_id=SID, text="model: scripted", kind="command"), "model: scripted"),
    ],
)
async def test_lifecycle_outputs_become_notes(harness: Any, output: out.Output, expected: str) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(output)
    await until(lambda: port.texts("C1"), what="a note")
    assert expected in port.texts("C1")[0]


async def test_clearing_tool_results_alone_is_not_worth_a_note(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    cleared = out.Compaction(
        session_id=SID,
        messages_before=9,
        messages_after=9,
        tool_results_cleared=3,
        summarized=False,
        memories_saved=0,
        tokens_before=10,
        tokens_after=8,
    )
    gateway.push(cleared, final("ok"), done("u1"))
    await until(lambda: port.texts("C1") == ["ok"], what="the reply")


# -- subscriptions ------------------------------------------------------------------------------


async def test_a_stream_ended_with_a_reply_owed_is_subscribed_again(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.end_stream()
    await until(lambda: len(gateway.streams) == 2, what="a second subscription")
    gateway.push(final("resumed"), done("u1"))
    await until(lambda: port.texts("C1") == ["resumed"] and not port.reactions, what="the reply")


async def test_after_the_revives_run_out_a_reconnect_listens_again(harness: Any) -> None:
    renderer, gateway, port = harness
    renderer.options = replace(OPTIONS, max_revives=1, revive_delay_s=0.01)
    await admit(renderer, gateway, "u1", "m1")
    gateway.end_stream()
    await until(lambda: len(gateway.streams) == 2, what="the one revive")
    gateway.end_stream()
    await until(lambda: renderer.following() == [], what="giving up")
    await asyncio.sleep(0.1)  # absence is the behaviour here: no later revive
    assert len(gateway.streams) == 2
    renderer.reconnected()
    assert renderer.following() == [SID]
    gateway.push(final("after the reconnect"), done("u1"))
    await until(lambda: port.texts("C1") == ["after the reconnect"], what="the reply")


async def test_a_stream_that_ends_with_nothing_owed_is_let_go(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(final("done"), done("u1"))
    await until(lambda: port.texts("C1") == ["done"], what="the reply")
    gateway.end_stream()
    await until(lambda: renderer.following() == [], what="letting go")
    await asyncio.sleep(0.1)  # absence is the behaviour here: no later revive
    assert len(gateway.streams) == 1


async def test_a_quiet_link_lets_its_subscription_go(harness: Any) -> None:
    renderer, gateway, _port = harness
    renderer.options = replace(OPTIONS, release_after_s=0.1)
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(final("done"), done("u1"))
    await until(lambda: renderer.following() == [], what="the release")
    assert gateway.closed == ["sub0"]


async def test_resume_follows_sessions_that_owe_a_reply(harness: Any) -> None:
    renderer, gateway, port = harness
    gateway.pending = [SID, "fake:unmapped"]
    await renderer.resume(lambda sid: TO if sid == SID else None)
    assert renderer.following() == [SID]
    gateway.push(final("the resumed answer"), done("u0"))
    await until(lambda: port.texts("C1") == ["the resumed answer"], what="the reply")


async def test_a_resumed_turn_streams_afresh_into_the_same_message(harness: Any) -> None:
    renderer, gateway, port = harness
    await admit(renderer, gateway, "u1", "m1")
    gateway.push(delta("The answer is"))
    await until(lambda: port.texts("C1") == ["The answer is"], what="the first words")
    gateway.end_stream()  # the session restarts and streams its resumed turn from the start
    await until(lambda: len(gateway.streams) == 2, what="a second subscription")
    gateway.push(delta("The answer is 42"))
    await until(lambda: port.texts("C1") == ["The answer is 42"], what="the resumed stream")
    assert port.count("post") == 1  # the same message, edited


# -- several nodes -------------------------------------------------------------------------------


@pytest.fixture
async def clustered(harness: Any) -> Any:
    _, gateway, _ = harness
    gateway.cluster_poll_s = 0.05
    gateway.elsewhere = {SID}
    return harness


async def test_a_message_for_a_session_owned_elsewhere_wears_the_reaction_until_it_owes_nothing(
    clustered: Any,
) -> None:
    renderer, gateway, port = clustered
    await renderer.resume(lambda sid: TO if sid == SID else None)
    gateway.pending = [SID]  # admitted on the owner, its turn under way there
    await admit(renderer, gateway, "u1", "m1")
    assert gateway.streams == []  # the owner answers: no local subscription tried
    await until(lambda: ("C1", "m1", "eyes") in port.reactions, what="the reaction")
    looks = gateway.looks
    await until(lambda: gateway.looks >= looks + 3, what="the outbox to look a few times")  # still owes
    assert ("C1", "m1", "eyes") in port.reactions and renderer.following() == []
    gateway.pending = []  # the owner answered and posted
    await until(lambda: not port.reactions, what="the reaction to come off")
    assert port.texts("C1") == []


async def test_a_reply_owed_by_a_session_another_node_let_go_is_posted_here(clustered: Any) -> None:
    renderer, gateway, port = clustered
    gateway.owing = [SID]
    gateway.owed = [(1, "recorded on another node", time.time())]
    await renderer.resume(lambda sid: TO if sid == SID else None)
    await until(lambda: gateway.looks >= 3, what="the outbox to look a few times")
    assert gateway.streams == [] and renderer.following() == []  # still resident there
    gateway.elsewhere = set()  # that node let the session go
    await until(lambda: port.texts("C1") == ["recorded on another node"], what="the owed reply")
    await until(lambda: list(gateway.delivered) == [1], what="the delivery recorded")
    assert port.count("post") == 1


# -- against the real daemon --------------------------------------------------------------------


Live = tuple[DaemonHandle, ChatRenderer, FakeChatPort]


@pytest.fixture
def live(start_daemon: Callable[..., DaemonHandle]) -> Iterator[Live]:
    """The renderer on the real daemon's I/O loop, over the in-memory port (as an adapter
    runs it), with sessions that passivate soon after they go quiet."""
    handle = start_daemon(session={"idle_timeout_s": 0.3, "passivation_grace_s": 0.05})
    assert handle.daemon.gateway is not None and handle.daemon.io is not None
    port = FakeChatPort()
    renderer = ChatRenderer(handle.daemon.gateway.chat, port, replace(OPTIONS, release_after_s=0.2))
    yield handle, renderer, port
    handle.daemon.io.run(renderer.stop(), 10)


def send(live: Live, sid: str, text: str, source: str, identity: str | None = None) -> Admission | None:
    """A permitted message from the test thread, as an adapter hands it over."""
    handle, renderer, _ = live
    assert handle.daemon.io is not None
    inbound = Inbound(sid, text, user="U1", identity=identity or f"fake:{source}")
    result = handle.daemon.io.run(renderer.submit(PERMIT, inbound, TO, MessageRef("C1", source)), 10)
    assert result is None or isinstance(result, Admission)
    return result


def following(live: Live) -> list[str]:
    handle, renderer, _ = live
    assert handle.daemon.io is not None

    async def read() -> list[str]:
        return renderer.following()

    return handle.daemon.io.run(read(), 5)


def test_idle_release_lets_the_session_passivate_and_never_wakes_it(
    live: tuple[DaemonHandle, ChatRenderer, FakeChatPort],
) -> None:
    handle, renderer, port = live
    io, manager = handle.daemon.io, handle.daemon.manager
    assert io is not None and manager is not None
    sid = "fake:live"

    async def submit() -> Admission | None:
        return await renderer.submit(PERMIT, Inbound(sid, "hello"), TO, MessageRef("C1", "m1"))

    admission = io.run(submit(), 10)
    assert admission is not None
    port.wait_for(lambda: port.texts("C1") == ["echo: hello"] and not port.reactions, what="the reply")

    async def following() -> list[str]:
        return renderer.following()

    port.wait_for(lambda: io.run(following(), 5) == [], what="the release")
    port.wait_for(lambda: not manager.is_resident(sid), what="the session to passivate")
    started = manager.started
    time.sleep(0.5)  # absence is the behaviour here: nothing wakes the passivated session
    assert manager.started == started, "something woke the passivated session"
    assert io.run(following(), 5) == []


def test_real_turns_unmark_their_own_messages_and_a_redelivery_marks_nothing(
    live: Live, scripted: ScriptedOpenAIThread
) -> None:
    _, _, port = live
    scripted.enqueue(Reply(text="first answer", delay_s=0.5))  # the second message queues behind it
    first = send(live, "fake:queue", "one", "m1")
    second = send(live, "fake:queue", "two", "m2")
    again = send(live, "fake:queue", "one", "m1")  # the platform delivered m1 again
    assert first is not None and second is not None and again is not None
    assert again.duplicate and again.message_id == first.message_id
    port.wait_for(lambda: len(port.texts("C1")) == 2 and not port.reactions, what="both replies")
    assert port.texts("C1") == ["first answer", "echo: two"]
    assert port.reaction_log == [
        ("add", "C1", "m1", "eyes"),
        ("add", "C1", "m2", "eyes"),
        ("remove", "C1", "m1", "eyes"),
        ("remove", "C1", "m2", "eyes"),
    ]


def test_a_real_streamed_reply_is_throttled_and_split(live: Live, scripted: ScriptedOpenAIThread) -> None:
    _, _, port = live
    text = "\n\n".join(f"Paragraph {i}: " + "several words " * 14 for i in range(5))  # ~1,100 chars
    scripted.enqueue(Reply(text=text, chunk_size=24, chunk_delay_s=0.02))
    send(live, "fake:stream", "tell me", "m1")
    port.wait_for(lambda: not port.reactions and len(port.texts("C1")) == 3, what="the split reply")
    assert all(len(piece) <= port.message_limit for piece in port.texts("C1"))
    assert " ".join(" ".join(port.texts("C1")).split()) == " ".join(text.split())
    for message in port.in_channel("C1"):
        times = [message.sent_at, *(at for at, _ in message.edits)]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        # Streaming edits keep the interval; only the final text may follow at once.
        assert all(gap >= OPTIONS.edit_interval_s - 0.03 for gap in gaps[:-1]), gaps


def test_a_real_provider_error_becomes_a_note_through_transient_port_failures(
    live: Live, scripted: ScriptedOpenAIThread
) -> None:
    _, _, port = live
    scripted.enqueue(ErrorReply(status=400, message="the request was refused"))
    port.fail("post", ChatApiError("slow down", transient=True, retry_after=0.05))
    port.fail("post", ChatApiError("502", status=502, transient=True, retry_after=0.05))
    send(live, "fake:error", "hi", "m1")
    port.wait_for(lambda: port.texts("C1") and not port.reactions, what="the note")
    [note] = port.texts("C1")
    assert note.startswith(":warning: Sorry") and "refused" in note
    assert [op for op, _ in port.failures] == ["post", "post"]  # retried through both


def test_a_real_session_stopped_mid_turn_is_followed_again(
    live: Live, scripted: ScriptedOpenAIThread
) -> None:
    handle, _, port = live
    manager = handle.daemon.manager
    assert manager is not None
    scripted.enqueue(Reply(text="never shown", delay_s=0.8))
    send(live, "fake:crash", "take your time", "m1")
    port.wait_for(lambda: scripted.requests, what="the provider call")
    ref = manager.ref_of("fake:crash")
    assert ref is not None
    ref.stop()  # as in a crash: the stream ends with the reply owed
    port.wait_for(lambda: port.texts("C1") and not port.reactions, what="the resumed reply")
    assert port.texts("C1") == ["echo: take your time"]


def test_after_a_reconnect_a_real_silent_session_is_followed_again(
    live: Live, scripted: ScriptedOpenAIThread
) -> None:
    handle, renderer, port = live
    manager, io = handle.daemon.manager, handle.daemon.io
    assert manager is not None and io is not None
    renderer.options = replace(renderer.options, max_revives=0)  # gives up on the first ended stream
    scripted.enqueue(Reply(text="never shown", delay_s=0.8))
    send(live, "fake:recon", "long job", "m1")
    port.wait_for(lambda: scripted.requests, what="the provider call")
    ref = manager.ref_of("fake:recon")
    assert ref is not None
    ref.stop()
    port.wait_for(lambda: following(live) == [], what="the stream to end")
    # The call the stopped session made has ended (cut off, or answered to nobody).
    port.wait_for(lambda: scripted.aborted or scripted.frames_sent, what="the cut-short call to end")
    assert port.texts("C1") == []  # nobody listens

    async def reconnect() -> None:
        renderer.reconnected()

    io.run(reconnect(), 5)
    assert following(live) == ["fake:recon"]
    port.wait_for(lambda: port.texts("C1") == ["echo: long job"] and not port.reactions, what="the reply")


# -- native streaming ---------------------------------------------------------------------------

IN_THREAD = Conversation("C1", "T1")


@pytest.fixture
async def streaming() -> AsyncIterator[tuple[ChatRenderer, StandInGateway, FakeStreamingPort]]:
    gateway = StandInGateway()
    port = FakeStreamingPort()
    renderer = ChatRenderer(gateway, port, OPTIONS)  # type: ignore[arg-type]
    try:
        yield renderer, gateway, port
    finally:
        await renderer.stop()


async def admit_in_thread(renderer: ChatRenderer, gateway: StandInGateway, message_id: str) -> None:
    gateway.admissions.append(Admission(SID, message_id, duplicate=False))
    await renderer.submit(PERMIT, Inbound(SID, "hi"), IN_THREAD, MessageRef("C1", "m1"))


async def test_a_streamed_reply_is_one_growing_message_closed_with_the_outbox_key(streaming: Any) -> None:
    renderer, gateway, port = streaming
    await admit_in_thread(renderer, gateway, "u1")
    gateway.push(delta("Hello"))
    await until(lambda: port.stream_log == [("start", "Hello")], what="the stream opened")
    for word in (" there", ",", " friend"):
        gateway.push(delta(word))
        await asyncio.sleep(0.09)  # pacing, not waiting: the words come over time
    gateway.push(final("Hello there, friend!"), done("u1"))
    await until(lambda: not port.streaming and port.stream_log[-1][0] == "stop", what="the stream closed")
    [message] = port.in_channel("C1")
    assert message.text == "Hello there, friend!" and not message.edits
    assert port.count("post") == 0 and port.count("edit") == 0
    assert port.stop_keys[message.id] == outbox_key(SID, 1, 0)
    assert [m for m, _ in gateway.delivered.items()] == [1]  # recorded as shown, with its id
    assert gateway.delivered[1] == [message.id]
    assert len([e for e in port.stream_log if e[0] == "append"]) <= 2  # throttled, not per delta


async def test_a_final_text_the_stream_cannot_show_is_edited_in(streaming: Any) -> None:
    renderer, gateway, port = streaming
    await admit_in_thread(renderer, gateway, "u1")
    gateway.push(delta("a draft that gets rewritten"))
    await until(lambda: port.streaming, what="the stream opened")
    gateway.push(final("The final answer."), done("u1"))
    await until(lambda: port.texts("C1") == ["The final answer."], what="the rewrite")
    assert not port.streaming and port.count("post") == 0  # closed, then edited in place


async def test_an_error_closes_an_open_stream(streaming: Any) -> None:
    renderer, gateway, port = streaming
    await admit_in_thread(renderer, gateway, "u1")
    gateway.push(delta("half an answer"))
    await until(lambda: port.streaming, what="the stream opened")
    gateway.push(out.Error(session_id=SID, code="provider_error", message="the model went away"))
    await until(lambda: not port.streaming, what="the stream closed")
    assert any("the model went away" in t for t in port.texts("C1"))


async def test_without_streaming_the_renderer_posts_and_stops_asking(harness: Any) -> None:
    gateway = StandInGateway()
    port = FakeStreamingPort(supported=False)
    renderer = ChatRenderer(gateway, port, OPTIONS)  # type: ignore[arg-type]
    try:
        for turn, message_id in ((1, "u1"), (2, "u2")):
            await admit_in_thread(renderer, gateway, message_id)
            gateway.push(delta(f"reply {turn}", turn), final(f"reply {turn}", turn), done(message_id, turn))
        await until(lambda: port.texts("C1") == ["reply 1", "reply 2"], what="two posted replies")
        assert port.count("stream_start") == 1
    finally:
        await renderer.stop()
