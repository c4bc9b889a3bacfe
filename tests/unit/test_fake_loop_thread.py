"""The fakes' loop thread leaves nothing pending: a handler whose client went away before
the server stopped is unwound, not left for the collector to destroy (asyncio then logs
"Task was destroyed but it is pending!" into whichever later test runs, and fails it)."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket

import pytest
from aiohttp import web

from tests.fakes._loop_thread import LoopThread


class Hanging:
    """Answers nothing: every request waits on a future nobody else holds."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.waiting: asyncio.Event | None = None

    async def start(self) -> str:
        self.waiting = asyncio.Event()
        waiting = self.waiting

        async def hang(request: web.Request) -> web.Response:
            waiting.set()
            await asyncio.get_running_loop().create_future()
            raise AssertionError("unreachable")

        app = web.Application()
        app.router.add_get("/", hang)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def test_a_handler_whose_client_left_is_unwound_at_stop(caplog: pytest.LogCaptureFixture) -> None:
    thread = LoopThread(Hanging(), "hanging")
    thread.start()
    waiting = thread.server.waiting
    assert waiting is not None
    with socket.create_connection(("127.0.0.1", thread.server.port)) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        thread.run(asyncio.wait_for(waiting.wait(), 10))
    # The client is gone; aiohttp no longer tracks the handler's task (handler_cancellation
    # is off by default), so the server's shutdown does not cancel it.
    thread.stop()
    del thread, waiting
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert not [r.getMessage() for r in caplog.records], "a task was left pending on the closed loop"
