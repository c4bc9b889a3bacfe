"""The I/O loop thread and the actor<->loop bridge: submit, run, submit_and_tell, Timer, Reply."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from netclaw.process.runtime import IoLoop, Reply, Timer, new_event_loop
from tests.conftest import wait_until


class FakeActor:
    """Records what it is told, from whichever thread tells it."""

    def __init__(self) -> None:
        self.told: list[Any] = []
        self.threads: list[threading.Thread] = []
        self._cond = threading.Condition()

    def tell(self, message: Any) -> None:
        with self._cond:
            self.told.append(message)
            self.threads.append(threading.current_thread())
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 2.0) -> list[Any]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.told) >= count, timeout), self.told
            return list(self.told)


class DeadActor:
    def __init__(self) -> None:
        self.told = threading.Event()  # something tried to tell it

    def tell(self, message: Any) -> None:
        self.told.set()
        raise RuntimeError("actor stopped")


@pytest.fixture
def io() -> Iterator[IoLoop]:
    loop = IoLoop(name="test-io").start()
    try:
        yield loop
    finally:
        loop.stop()


# -- IoLoop -------------------------------------------------------------------------------------


def test_the_loop_is_uvloops_where_it_is_installed_and_asyncios_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvloop  # a dependency of netclaw wherever it has wheels

    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed: import fails
    loop = new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and not isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


def test_submit_runs_on_the_loop_thread(io: IoLoop) -> None:
    async def where() -> tuple[str, bool]:
        return threading.current_thread().name, io.in_loop_thread()

    name, inside = io.submit(where()).result(2)
    assert name == "test-io"
    assert inside
    assert not io.in_loop_thread()


def test_run_blocks_for_the_result(io: IoLoop) -> None:
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0.01)
        return a + b

    assert io.run(add(2, 3), timeout=2) == 5


def test_run_propagates_the_exception(io: IoLoop) -> None:
    async def fail() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        io.run(fail(), timeout=2)


def test_run_from_the_loop_thread_raises(io: IoLoop) -> None:
    async def nested() -> str:
        inner = asyncio.sleep(0, result="never")
        try:
            io.run(inner, timeout=1)
        except RuntimeError as exc:
            return str(exc)
        finally:
            inner.close()
        return "no error"

    message = io.run(nested(), timeout=2)
    assert "deadlock" in message


def test_call_runs_a_function_on_the_loop(io: IoLoop) -> None:
    seen: list[bool] = []
    done = threading.Event()

    def fn(tag: str) -> None:
        seen.append(io.in_loop_thread() and tag == "x")
        done.set()

    io.call(fn, "x")
    assert done.wait(2)
    assert seen == [True]


def test_a_batch_sends_its_calls_in_order_in_one_wake_up_and_before_a_submit(io: IoLoop) -> None:
    """What an actor hands the loop while it handles a message crosses once, in order —
    and before work it submits, so nothing overtakes what came before it."""
    seen: list[str] = []
    crossings = 0
    real = io.loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal crossings
        crossings += 1
        return real(*args, **kwargs)

    io.loop.call_soon_threadsafe = counting  # type: ignore[method-assign]

    async def submitted() -> None:
        seen.append("submitted")

    async def make_reply() -> Reply[str]:
        return Reply()

    reply = io.run(make_reply(), 2)
    crossings = 0

    def failing() -> None:
        raise ValueError("boom")

    def actor_message() -> concurrent.futures.Future[None]:
        with io.batched():
            io.call(seen.append, "a")
            io.call(failing)  # logged; the calls after it still run
            reply.resolve("answer")
            with io.batched():  # nested: joins the outer batch
                io.call(seen.append, "b")
            assert seen == [] and crossings == 0  # nothing crossed yet
            future = io.submit(submitted())  # the batch goes first
            io.call(seen.append, "c")
        return future

    future = actor_message()
    crossed = crossings
    future.result(2)
    try:
        wait_until(lambda: len(seen) == 4, timeout=2, what="the rest of the batch")
        assert crossed == 2  # the first batch with the submit at its end, the rest of the batch
        # The submitted coroutine starts after what came before it (what came after may
        # run first: a coroutine's first step takes a loop iteration, with or without batches).
        assert seen[:2] == ["a", "b"] and sorted(seen[2:]) == ["c", "submitted"]
        assert io.run(reply.wait(1), 2) == "answer"
    finally:
        del io.loop.call_soon_threadsafe  # type: ignore[method-assign]


def test_work_called_off_before_the_loop_started_it_never_runs(io: IoLoop) -> None:
    release = threading.Event()
    ran: list[str] = []

    async def hold_the_loop() -> None:
        release.wait(5)  # blocks the loop thread itself: nothing submitted after starts

    async def work() -> None:
        ran.append("work")

    held = io.submit(hold_the_loop())
    future = io.submit(work())
    assert future.cancel()
    release.set()
    held.result(5)

    async def next_iteration() -> None:
        await asyncio.sleep(0)  # work's task, had one been made, took its first step by now

    io.run(next_iteration(), 2)
    assert ran == [] and future.cancelled()


def test_calls_outside_a_batch_and_on_the_loop_go_at_once(io: IoLoop) -> None:
    done = threading.Event()

    async def on_loop() -> None:
        with io.batched():  # the loop's own thread never batches (it would wait for itself)
            io.call(done.set)
            await asyncio.sleep(0.2)

    io.submit(on_loop())
    assert done.wait(0.15)


def test_stop_stops_the_thread_and_cancels_pending_tasks() -> None:
    io = IoLoop(name="stopping").start()
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    io.submit(forever())
    assert started.wait(2)
    io.stop(timeout=2)
    assert not io._thread.is_alive()  # noqa: SLF001 - no public handle on the loop thread
    assert cancelled.is_set()
    assert io.loop.is_closed()
    io.stop()  # twice is harmless


# -- submit_and_tell ----------------------------------------------------------------------------


def test_submit_and_tell_tells_the_result(io: IoLoop) -> None:
    actor = FakeActor()

    async def work() -> int:
        return 41

    future = io.submit_and_tell(work(), actor, lambda r: ("ok", r + 1), lambda e: ("err", e))
    assert actor.wait_for(1) == [("ok", 42)]
    assert future.result(1) == 41


def test_submit_and_tell_tells_the_error(io: IoLoop) -> None:
    actor = FakeActor()

    async def work() -> int:
        raise ConnectionError("provider down")

    io.submit_and_tell(work(), actor, lambda r: ("ok", r), lambda e: ("err", e))
    [message] = actor.wait_for(1)
    assert message[0] == "err"
    assert isinstance(message[1], ConnectionError)
    assert str(message[1]) == "provider down"


def test_submit_and_tell_an_on_result_that_raises_becomes_the_error(io: IoLoop) -> None:
    actor = FakeActor()

    async def work() -> int:
        return 1

    def bad_builder(result: int) -> Any:
        raise ValueError("cannot build")

    io.submit_and_tell(work(), actor, bad_builder, lambda e: ("err", type(e).__name__))
    assert actor.wait_for(1) == [("err", "ValueError")]


def test_submit_and_tell_on_cancellation_tells_the_error(io: IoLoop) -> None:
    actor = FakeActor()
    started = threading.Event()
    cancelled_on_loop = threading.Event()

    async def work() -> int:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled_on_loop.set()
            raise
        return 1

    future = io.submit_and_tell(work(), actor, lambda r: ("ok", r), lambda e: ("err", e))
    assert started.wait(2)
    assert future.cancel()
    [message] = actor.wait_for(1)
    assert message[0] == "err"
    assert isinstance(message[1], concurrent.futures.CancelledError | asyncio.CancelledError)
    assert cancelled_on_loop.wait(2)  # the coroutine on the loop was cancelled too
    time.sleep(0.05)  # absence is the behaviour here: no second tell follows the cancellation
    assert len(actor.told) == 1  # told exactly once


def test_submit_and_tell_to_a_stopped_actor_is_quiet(io: IoLoop) -> None:
    async def work() -> int:
        return 1

    future = io.submit_and_tell(work(), DeadActor(), lambda r: r, lambda e: e)
    assert future.result(2) == 1
    # the loop still works afterwards
    assert io.run(asyncio.sleep(0, result="alive"), timeout=2) == "alive"


# -- Timer --------------------------------------------------------------------------------------


def test_timer_tells_after_the_delay(io: IoLoop) -> None:
    actor = FakeActor()
    started = time.monotonic()
    Timer(io, 0.1, actor, "idle")
    assert actor.wait_for(1) == ["idle"]
    assert time.monotonic() - started >= 0.09
    assert actor.threads[0].name == "test-io"


def test_cancelled_timer_never_tells(io: IoLoop) -> None:
    actor = FakeActor()
    immediate = Timer(io, 0.05, actor, "cancelled at once")
    immediate.cancel()
    later = Timer(io, 0.15, actor, "cancelled after scheduling")
    io.run(asyncio.sleep(0), 2)  # calls reach the loop in order: it has been scheduled by now
    later.cancel()
    later.cancel()  # twice is harmless
    control = Timer(io, 0.2, actor, "control")
    # Due after both: had either fired, it would have been told first.
    assert actor.wait_for(1) == ["control"]
    del immediate, control


def test_timer_cancel_after_loop_stopped_is_harmless() -> None:
    io = IoLoop().start()
    timer = Timer(io, 10, FakeActor(), "x")
    io.stop()
    timer.cancel()


def test_timer_to_a_stopped_actor_is_quiet(io: IoLoop) -> None:
    dead = DeadActor()
    Timer(io, 0.01, dead, "x")
    assert dead.told.wait(2)  # it fired, into an actor that raised
    assert io.run(asyncio.sleep(0, result="alive"), timeout=2) == "alive"


# -- Reply --------------------------------------------------------------------------------------


async def test_reply_resolved_from_another_thread() -> None:
    reply: Reply[str] = Reply()
    assert not reply.done()

    def actor_side() -> None:
        time.sleep(0.02)  # pacing, not waiting: the answer comes while the loop waits
        reply.resolve("durable")
        reply.resolve("second answer is ignored")
        reply.fail(RuntimeError("late failure is ignored"))

    thread = threading.Thread(target=actor_side)
    thread.start()
    assert await reply.wait(timeout=2) == "durable"
    thread.join(2)
    await asyncio.sleep(0)  # one loop turn: the ignored answers, queued before it, land
    assert reply.done()
    assert await reply.wait(timeout=1) == "durable"


async def test_reply_fail_raises_in_the_waiter() -> None:
    reply: Reply[int] = Reply()
    thread = threading.Thread(target=reply.fail, args=(LookupError("no such session"),))
    thread.start()
    with pytest.raises(LookupError, match="no such session"):
        await reply.wait(timeout=2)
    thread.join(2)
    reply.resolve(1)  # harmless after failure
    await asyncio.sleep(0)  # one loop turn: the late answer, queued before it, lands
    with pytest.raises(LookupError):
        await reply.wait(timeout=1)


async def test_reply_wait_times_out_and_can_be_waited_again() -> None:
    reply: Reply[int] = Reply()
    with pytest.raises(TimeoutError):
        await reply.wait(timeout=0.02)
    assert not reply.done()  # the timeout did not cancel the shared future
    threading.Thread(target=reply.resolve, args=(7,)).start()
    assert await reply.wait(timeout=2) == 7


async def test_a_cancelled_waiter_leaves_the_answer_to_the_next_one() -> None:
    reply: Reply[int] = Reply()
    waiting = asyncio.create_task(reply.wait(timeout=5))
    await asyncio.sleep(0)  # a tick: the waiter's first step, it now waits
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not reply.done()  # the cancellation did not reach the shared future
    reply.resolve(3)
    assert await reply.wait(timeout=1) == 3


def test_reply_on_an_io_loop_resolved_by_a_plain_thread(io: IoLoop) -> None:
    async def make() -> Reply[str]:
        return Reply()

    reply = io.run(make(), timeout=2)
    reply.resolve("from the test thread")
    assert io.run(reply.wait(timeout=2), timeout=3) == "from the test thread"


def test_run_from_the_loop_thread_closes_the_coroutine(io: IoLoop) -> None:
    async def nested() -> str:
        inner = asyncio.sleep(0, result="never")
        with contextlib.suppress(RuntimeError):
            io.run(inner, timeout=1)
        state = inspect.getcoroutinestate(inner)
        inner.close()  # tidy up whatever run() left behind
        return state

    assert io.run(nested(), timeout=2) == inspect.CORO_CLOSED
