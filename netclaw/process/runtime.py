"""The I/O loop thread and the actor↔loop bridge (docs/architecture.md, "Threads").

Actors own state; the loop owns I/O. An actor hands a coroutine to
:meth:`IoLoop.submit` and gets the outcome back as a message told to it (never
by waiting on the loop). Loop code reaches an actor with ``tell`` only, and an
actor answers loop code through a :class:`Reply`, which resolves an asyncio
future with ``call_soon_threadsafe`` — so neither side ever blocks the other.

While an actor handles one message (:meth:`IoLoop.batched`), what it hands the loop —
``call``, replies, subscriber outputs, timers — waits in a per-thread batch and crosses
in ONE ``call_soon_threadsafe`` (one loop wake-up, not one per output), in order, when
the message is done or before the actor submits work or waits for anything.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Tellable(Protocol):
    """What the bridge needs of an actor: pykka's ``ActorRef.tell``."""

    def tell(self, message: object) -> None: ...


class Cancellable(Protocol):
    """Work in flight on the loop that its owner may call off (a ``Future``)."""

    def cancel(self) -> bool: ...


class _Batch(threading.local):
    """This thread's loop calls waiting to cross (see the module docstring)."""

    loop: asyncio.AbstractEventLoop | None = None
    calls: list[tuple[Callable[..., object], tuple[object, ...]]] | None = None


_batch = _Batch()


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    """``loop.call_soon_threadsafe(fn, *args)``, joined to this thread's batch for ``loop`` if
    one is open. RuntimeError when the loop is closed, as there."""
    calls = _batch.calls
    if calls is not None and _batch.loop is loop:
        if loop.is_closed():
            raise RuntimeError("Event loop is closed")
        calls.append((fn, args))
    else:
        loop.call_soon_threadsafe(fn, *args)


def flush_batch() -> None:
    """Send this thread's waiting loop calls now (before it blocks or submits work)."""
    calls, loop = _batch.calls, _batch.loop
    if calls and loop is not None:
        _batch.calls = []
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            loop.call_soon_threadsafe(_run_batch, calls)


def _run_batch(calls: list[tuple[Callable[..., object], tuple[object, ...]]]) -> None:
    for fn, args in calls:
        try:
            fn(*args)
        except Exception:  # one failing call must not cost the others theirs
            log.exception("loop call %r failed", fn)


def _start(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], future: concurrent.futures.Future[T]
) -> None:
    """On the loop: ``coro`` as a task whose outcome settles ``future``, and cancelling
    ``future`` cancels the task — ``asyncio.run_coroutine_threadsafe``'s contract, started by
    a call that can cross with others."""
    if future.cancelled():  # called off before it started
        coro.close()
        return
    try:
        task = loop.create_task(coro)
    except BaseException as exc:
        if future.set_running_or_notify_cancel():
            future.set_exception(exc)
        raise

    def settle(done: asyncio.Task[T]) -> None:
        if done.cancelled():
            future.cancel()
        if not future.set_running_or_notify_cancel():  # cancelled, by either side
            return
        error = done.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result())

    def cancel_task(settled: concurrent.futures.Future[T]) -> None:
        if settled.cancelled() and not task.done():
            with contextlib.suppress(RuntimeError):  # the loop closed: the task went with it
                loop.call_soon_threadsafe(task.cancel)

    task.add_done_callback(settle)
    future.add_done_callback(cancel_task)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop the daemon's I/O runs on: uvloop's (libuv under asyncio's API) where it is
    installed, as it is with netclaw on Linux and macOS; asyncio's own elsewhere. At 100
    sessions (bench/turns.py's in-process run, six alternating pairs) it served 5-16 % more
    turns/s for 2-13 % less CPU per turn than asyncio's selector loop: its transports,
    timers and wake-ups are C, not Python."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class IoLoop:
    """One asyncio event loop (:func:`new_event_loop`) running in its own daemon thread."""

    def __init__(self, name: str = "netclaw-io") -> None:
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def start(self) -> IoLoop:
        self._thread.start()
        self._started.wait()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._started.set)
        self._loop.run_forever()
        # Let cancelled tasks unwind before the loop closes.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; callable from any thread. What this thread's batch holds
        goes first, in the same crossing (an actor starting a model call after answering
        its caller wakes the loop once, not twice)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        calls = _batch.calls
        if calls and _batch.loop is self._loop:
            _batch.calls = []
            calls.append((_start, (self._loop, coro, future)))
            self._loop.call_soon_threadsafe(_run_batch, calls)
        else:
            flush_batch()  # a batch for another loop: it still goes first
            self._loop.call_soon_threadsafe(_start, self._loop, coro, future)
        return future

    def call(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the loop soon; callable from any thread."""
        call_soon(self._loop, fn, *args)

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Collect this thread's loop calls for the block and send them as one (an actor
        around each message). Nested blocks join the outer one."""
        if _batch.calls is not None or self.in_loop_thread():
            yield
            return
        _batch.loop, _batch.calls = self._loop, []
        try:
            yield
        finally:
            flush_batch()
            _batch.loop, _batch.calls = None, None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Block the *calling* thread until ``coro`` finishes on the loop.

        Only for threads that may block: start-up code, tests, and an actor's
        persist (the one blocking call an actor makes). Never from the loop.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("IoLoop.run() called on the loop thread; it would deadlock")
        return self.submit(coro).result(timeout)

    def submit_and_tell(
        self,
        coro: Coroutine[Any, Any, T],
        actor: Tellable,
        on_result: Callable[[T], object],
        on_error: Callable[[BaseException], object],
    ) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop and tell ``actor`` the message built from its outcome."""
        future = self.submit(coro)

        def done(fut: concurrent.futures.Future[T]) -> None:
            try:
                message = on_result(fut.result())
            except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
                # CancelledError is a BaseException in asyncio; it must never reach pykka.
                message = on_error(exc)
            except Exception as exc:  # noqa: BLE001 - every failure goes back to the actor as a message
                message = on_error(exc)
            with contextlib.suppress(Exception):  # the actor may have stopped; its result is stale
                actor.tell(message)

        future.add_done_callback(done)
        return future

    def stop(self, timeout: float = 5.0) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("I/O loop thread did not stop within %.1fs", timeout)


class Timer:
    """A cancellable ``tell`` after a delay, schedulable from any thread."""

    __slots__ = ("_cancelled", "_handle", "_io")

    def __init__(self, io: IoLoop, delay: float, actor: Tellable, message: object) -> None:
        self._io = io
        self._handle: asyncio.TimerHandle | None = None
        self._cancelled = False
        try:
            io.call(self._schedule, delay, actor, message)
        except RuntimeError:  # the loop is closed: the daemon is stopping, the tick is moot
            self._cancelled = True

    def _schedule(self, delay: float, actor: Tellable, message: object) -> None:
        if not self._cancelled:
            self._handle = self._io.loop.call_later(delay, _tell_quietly, actor, message)

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._io.call(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task on this loop and wait until it has unwound."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _tell_quietly(actor: Tellable, message: object) -> None:
    with contextlib.suppress(Exception):  # a stopped actor has no use for its timer
        actor.tell(message)


class Reply(Generic[T]):
    """A one-shot answer from an actor to a coroutine waiting on the loop.

    Created on the loop; resolved from any thread. Resolving twice is a no-op,
    so an actor can answer "durable" and later "failed" without care.
    """

    __slots__ = ("_future", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._future: asyncio.Future[T] = self._loop.create_future()

    def resolve(self, value: T) -> None:
        call_soon(self._loop, self._set, value, None)

    def fail(self, exc: BaseException) -> None:
        call_soon(self._loop, self._set, None, exc)

    def _set(self, value: T | None, exc: BaseException | None) -> None:
        if self._future.done():
            return
        if exc is not None:
            self._future.set_exception(exc)
            # The waiter may have given up (timeout, cancelled request); don't let asyncio
            # log "exception was never retrieved" for an answer nobody is waiting for.
            self._future.exception()
        else:
            self._future.set_result(value)  # type: ignore[arg-type]

    async def wait(self, timeout: float | None = None) -> T:
        """The answer; TimeoutError after ``timeout`` s. Neither a timeout nor the waiter's
        cancellation touches the answer, which can be waited for again. (What
        ``wait_for(shield(...))`` does, with one future and one timer, not four futures and
        their callbacks: every turn waits twice.)"""
        future = self._future
        if not future.done():
            woken = self._loop.create_future()

            def wake(_: object = None) -> None:
                if not woken.done():
                    woken.set_result(None)

            future.add_done_callback(wake)
            timer = self._loop.call_later(timeout, wake) if timeout is not None else None
            try:
                await woken
            finally:
                future.remove_done_callback(wake)
                if timer is not None:
                    timer.cancel()
            if not future.done():
                raise TimeoutError
        return future.result()

    def done(self) -> bool:
        return self._future.done()
