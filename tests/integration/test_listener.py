"""The listener's defences over real sockets: slow-loris connections evicted at the cap
while real requests get through, request heads with a deadline, malformed requests and
unknown ``Expect`` headers answered in the JSON error shape, and clients that hang up at
any point costing at most one DEBUG line and no traceback."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler

from netclaw.http import listener
from netclaw.http.web import errors_middleware, read_body, read_json_object

AT_WORK = web.AppKey("at_work", asyncio.Event)  # a handler began on a request
RECEIVED = web.AppKey("received", list)  # byte counts the listener took in, in order


@web.middleware
async def at_work(request: web.Request, handler: Handler) -> web.StreamResponse:
    request.app[AT_WORK].set()
    return await handler(request)


async def until(predicate: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    """Let the loop run until ``predicate`` holds (the server shares this test's loop)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def ping(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def echo(request: web.Request) -> web.Response:
    body = read_json_object(await read_body(request, 8192))
    return web.json_response(body)


async def stream(request: web.Request) -> web.StreamResponse:
    """An event stream that writes until the client goes (no handling of its own)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    while True:
        await response.write(b": tick\n\n")
        await asyncio.sleep(0.01)


async def gone_before_prepare(request: web.Request) -> web.StreamResponse:
    """The client leaves just as the answer's head is written (made deterministic)."""
    assert request.transport is not None
    request.transport.close()
    response = web.StreamResponse()
    await response.prepare(request)
    return response


async def gone_after_prepare(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    assert request.transport is not None
    request.transport.close()
    await response.write(b"more")
    return response


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(1.0)  # at work, while the client hangs up
    return web.json_response({"ok": True})


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, web.AppRunner]]:
    monkeypatch.setattr(listener, "connection_limit", lambda configured=512: 8)
    monkeypatch.setattr(listener, "HEAD_TIMEOUT_S", 1.0)
    app = web.Application(middlewares=[errors_middleware, at_work])
    app[AT_WORK], app[RECEIVED] = asyncio.Event(), []
    data_received = listener.GuardedConnection.data_received

    def counted(self: listener.GuardedConnection, data: bytes) -> None:
        app[RECEIVED].append(len(data))
        data_received(self, data)

    monkeypatch.setattr(listener.GuardedConnection, "data_received", counted)
    app.router.add_get("/ping", ping)
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_get("/gone-before-prepare", gone_before_prepare)
    app.router.add_get("/gone-after-prepare", gone_after_prepare)
    app.router.add_get("/slow", slow)
    runner, port = await listener.listen(app, "127.0.0.1", 0, "test.port")
    yield port, runner
    await runner.cleanup()


async def raw(
    port: int, data: bytes, *, read: bool = True
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), 5) if read else b""
    return reader, writer, answer


def status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"application/json" in head, head
    return int(head.split(b" ")[1]), json.loads(body)


async def test_slow_loris_connections_are_evicted_for_real_requests(
    served: tuple[int, web.AppRunner],
) -> None:
    port, _ = served
    dawdlers = [await raw(port, b"GET /ping HTTP/1.1\r\nHost: x\r\n", read=False) for _ in range(30)]
    for _ in range(5):
        _, writer, answer = await raw(port, b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_and_body(answer) == (200, {"ok": True})
        writer.close()
    # Most dawdlers were closed to make room (at most the cap stays open).
    closed = 0
    for reader, writer, _ in dawdlers:
        if await asyncio.wait_for(reader.read(1), 3) == b"":
            closed += 1
        writer.close()
    assert closed >= 30 - 8


async def test_a_request_head_has_a_deadline(served: tuple[int, web.AppRunner]) -> None:
    port, _ = served
    reader, writer, _ = await raw(port, b"GET /ping HTTP/1.1\r\nHo", read=False)
    assert await asyncio.wait_for(reader.read(1), 5) == b""  # closed after HEAD_TIMEOUT_S
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NOT AN HTTP REQUEST\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
    ],
    ids=["bad request line", "header too long", "broken chunking", "nul in path"],
)
async def test_malformed_requests_get_the_json_error_shape(
    served: tuple[int, web.AppRunner], request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    port, _ = served
    _, writer, answer = await raw(port, request_bytes)
    status, body = status_and_body(answer)
    writer.close()
    assert 400 <= status < 500
    assert set(body["error"]) == {"code", "message"}  # type: ignore[arg-type]
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (b"\x1f\x8b not gzip at all", {"Content-Encoding": "gzip"}, "invalid_body"),
        (b"garbage", {"Content-Encoding": "deflate"}, "invalid_body"),
        (b'{"n": ' + b"9" * 4400 + b"}", {}, "invalid_json"),
        (b"[" * 5000, {}, "invalid_json"),
        (b"\xff\xfe\xfa", {}, "invalid_json"),
        (gzip.compress(b"x" * 10_000), {"Content-Encoding": "gzip"}, "body_too_large"),
    ],
    ids=["bad gzip", "bad deflate", "int past the digit limit", "nested", "not utf-8", "gzip bomb"],
)
async def test_bad_bodies_are_4xx_never_500(
    served: tuple[int, web.AppRunner], body: bytes, headers: dict[str, str], code: str
) -> None:
    port, _ = served
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n{head}\r\n"
    ).encode() + body
    _, writer, answer = await raw(port, request)
    status, parsed = status_and_body(answer)
    writer.close()
    assert 400 <= status < 500 and parsed["error"]["code"] == code, parsed  # type: ignore[index]


async def test_an_unknown_expect_gets_the_json_error_shape(served: tuple[int, web.AppRunner]) -> None:
    port, _ = served
    for path in (b"/echo", b"/nowhere"):
        request = (
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: bogus-thing\r\n\r\n{}"
        )
        _, writer, answer = await raw(port, request)
        writer.close()
        status, body = status_and_body(answer)
        assert status == 417 and body["error"] == {  # type: ignore[comparison-overlap]
            "code": "expectation_failed",
            "message": "Unknown Expect: bogus-thing",
        }


# How each hang-up comes: after reading the answer's first byte, once the server has read the
# request (and begun handling a whole head), or at once
# (the server meets the closed connection when it writes "100 Continue").
HANG_UPS = {
    "mid-head": (b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Half", "wait"),
    "after the head of a body": (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", "wait"),
    "mid-body": (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"a": "', "wait"),
    "while told 100 Continue": (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nExpect: 100-continue\r\n\r\n",
        "now",
    ),
    "after 100 Continue": (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nExpect: 100-continue\r\n\r\n",
        "read",
    ),
    "before the answer": (b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", "wait"),
    "during prepare": (b"GET /gone-before-prepare HTTP/1.1\r\nHost: x\r\n\r\n", "read"),
    "after prepare": (b"GET /gone-after-prepare HTTP/1.1\r\nHost: x\r\n\r\n", "read"),
    "mid-stream": (b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", "read"),
}


@pytest.mark.parametrize(("request_bytes", "when"), list(HANG_UPS.values()), ids=list(HANG_UPS))
async def test_a_client_hanging_up_costs_at_most_one_debug_line(
    served: tuple[int, web.AppRunner],
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
    when: str,
) -> None:
    port, runner = served
    caplog.set_level(logging.DEBUG)
    idle = len(asyncio.all_tasks())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    await writer.drain()
    if when == "read":  # until the answer has begun (or the server closed)
        await asyncio.wait_for(reader.read(1), 5)
    elif when == "wait":  # until the server has it all (and a whole head is being handled)
        await until(lambda: sum(runner.app[RECEIVED]) >= len(request_bytes), "the server to read it")
        if b"\r\n\r\n" in request_bytes:
            await asyncio.wait_for(runner.app[AT_WORK].wait(), 5)
    writer.transport.abort()  # a hang-up, as abrupt as a crashed client's
    # The server is done with the connection once every task it ran for it has ended.
    await until(lambda: len(asyncio.all_tasks()) <= idle, "the server to finish with the connection")
    ours = [r for r in caplog.records if r.name.startswith(("netclaw", "aiohttp"))]
    assert len(ours) <= 1, [r.getMessage() for r in ours]
    assert all(r.levelno == logging.DEBUG and not r.exc_info for r in ours), [
        (r.levelname, r.getMessage()) for r in ours
    ]
    # ... and the listener still answers.
    _, writer, answer = await raw(port, b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    writer.close()
    assert status_and_body(answer) == (200, {"ok": True})
