"""Reactions (adapters/chat/_reactions.py) on their own, over the in-memory chat port: the
"working on it" mark by message id, out-of-order turns, a turn that ends before its
admission is back, removal only after the add, settling and releasing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from adapters.chat import ChatApiError, MessageRef
from adapters.chat._calls import PlatformCalls
from adapters.chat._reactions import REMEMBERED_COMPLETIONS, Reactions
from tests.fakes.chat_gateway import until
from tests.fakes.chat_port import FakeChatPort

Setup = tuple[Reactions, FakeChatPort, PlatformCalls]


@pytest.fixture
async def marks() -> AsyncIterator[Setup]:
    port = FakeChatPort()
    calls = PlatformCalls(port)
    yield Reactions(calls, "eyes"), port, calls
    await calls.cancel_all()


def mark(n: int) -> tuple[str, str, str]:
    return ("C1", f"m{n}", "eyes")


async def test_a_message_wears_the_mark_until_its_turn_ends(marks: Setup) -> None:
    reactions, port, _ = marks
    assert reactions.mark("u1", MessageRef("C1", "m1"))
    assert reactions.waiting
    await until(lambda: mark(1) in port.reactions, what="the mark")
    reactions.turn_ended("u1")
    assert not reactions.waiting
    await until(lambda: not port.reactions, what="the mark off")
    assert [entry[0] for entry in port.reaction_log] == ["add", "remove"]


async def test_turns_that_end_out_of_order_unmark_their_own_messages(marks: Setup) -> None:
    reactions, port, _ = marks
    reactions.mark("u1", MessageRef("C1", "m1"))
    reactions.mark("u2", MessageRef("C1", "m2"))
    await until(lambda: len(port.reactions) == 2, what="both marked")
    reactions.turn_ended("u2")
    await until(lambda: mark(2) not in port.reactions, what="m2 unmarked")
    assert mark(1) in port.reactions and reactions.waiting


async def test_a_turn_that_ended_before_its_admission_came_back_marks_nothing(marks: Setup) -> None:
    reactions, port, _ = marks
    reactions.turn_ended("u1")  # the quick turn's completion arrives first
    assert not reactions.mark("u1", MessageRef("C1", "m1"))
    assert not reactions.waiting and port.count("react") == 0


async def test_only_the_latest_early_completions_are_remembered(marks: Setup) -> None:
    reactions, _, _ = marks
    for n in range(REMEMBERED_COMPLETIONS + 1):
        reactions.turn_ended(f"u{n}")
    assert reactions.mark("u0", MessageRef("C1", "m0"))  # forgotten: marked as new
    assert not reactions.mark(f"u{REMEMBERED_COMPLETIONS}", MessageRef("C1", "m9"))


async def test_the_mark_is_removed_only_after_it_was_added(marks: Setup) -> None:
    reactions, port, calls = marks
    port.fail("react", ChatApiError("slow down", transient=True))  # the add fails
    reactions.mark("u1", MessageRef("C1", "m1"))
    reactions.turn_ended("u1")
    await until(lambda: not calls._tasks, what="the background calls")  # noqa: SLF001
    assert port.count("react") == 1  # the failed add; the removal waited for it and gave up
    assert port.reaction_log == []  # nothing added, so nothing removed


async def test_settling_unmarks_what_was_marked_before_the_look(marks: Setup) -> None:
    reactions, port, _ = marks
    reactions.mark("u1", MessageRef("C1", "m1"))
    looked_at = time.monotonic()
    reactions.mark("u2", MessageRef("C1", "m2"))
    await until(lambda: len(port.reactions) == 2, what="both marked")
    reactions._marks["u2"].at = looked_at + 1  # noqa: SLF001 - marked after the look, whatever the clock
    reactions.settle(looked_at)
    await until(lambda: port.reactions == {mark(2)}, what="m1 unmarked")
    assert reactions.waiting


async def test_release_takes_every_mark_off(marks: Setup) -> None:
    reactions, port, _ = marks
    reactions.mark("u1", MessageRef("C1", "m1"))
    reactions.mark("u2", MessageRef("C1", "m2"))
    await until(lambda: len(port.reactions) == 2, what="both marked")
    reactions.release()
    assert not reactions.waiting
    await until(lambda: not port.reactions, what="both unmarked")


async def test_the_removals_at_stop_take_the_marks_off_directly(marks: Setup) -> None:
    reactions, port, _ = marks
    reactions.mark("u1", MessageRef("C1", "m1"))
    await until(lambda: port.reactions, what="the mark")
    [removal] = reactions.removals()
    assert await removal
    assert not port.reactions
