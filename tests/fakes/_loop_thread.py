"""A fake platform's server on its own event loop in a daemon thread, so a synchronous
test (or the daemon under test, on its loop) talks to it over real HTTP: start and stop it,
run a coroutine on its loop, read its state there. One mechanism for every such fake."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

T = TypeVar("T")


def run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """A loop thread's target: run ``loop`` until stopped, then cancel and unwind what is
    still pending (a long poll, a websocket handler) and close it. A task left pending on a
    closed loop is destroyed whenever the collector gets to it, and asyncio logs "Task was
    destroyed but it is pending!" into whichever later test is running then."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=5))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


class ServedOnLoop(Protocol):
    async def start(self) -> str: ...  # its base URL

    async def stop(self) -> None: ...


S = TypeVar("S", bound=ServedOnLoop)


class LoopThread(Generic[S]):
    def __init__(self, server: S, name: str, *, timeout: float = 30.0) -> None:
        self.server = server
        self._name = name
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the server's loop; its result."""
        if self._loop is None:
            coro.close()
            raise RuntimeError(f"{self._name} is not started")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(self._timeout if timeout is None else timeout)

    def read(self, fn: Callable[[S], T]) -> T:
        """``fn(server)``, called on the server's loop (its state is the loop's)."""

        async def run() -> T:
            return fn(self.server)

        return self.run(run())

    def start(self) -> str:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=run_until_stopped, args=(loop,), name=self._name, daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        return self.run(self.server.start())

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self.run(self.server.stop())
        finally:
            self._loop = self._thread = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)  # the thread closes the loop

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
