"""The forwarder races a slow answer with the session's lease: a request the owner holds
while the lease leaves it is given up as unreachable — except a move, whose answer comes
once the lease has left the owner (that is its success). Over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from netclaw.cluster import _forwarder
from netclaw.cluster._forwarder import Forwarder, Unreachable
from netclaw.persistence import Owner

SLOW_S = 0.5  # the owner's answer comes after the lease watch has looked


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def front(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(_forwarder, "WATCH_AFTER_S", 0.05)

    async def slowly(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_S)
        return web.json_response({"answered": request.path})

    owner_app = web.Application()
    owner_app.router.add_route("*", "/{tail:.*}", slowly)
    owner_runner, owner_url = await _serve(owner_app)
    forwarder = Forwarder("b", "token")

    async def gone(session_id: str) -> Owner | None:
        return None  # the session's lease has left node a (moved, or expired)

    forwarder.lookup = gone
    owner = Owner("a", owner_url, 10.0)

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            return await forwarder.proxy(request, "cli:s", owner)
        except Unreachable as exc:
            return web.json_response({"unreachable": str(exc)}, status=503)

    front_app = web.Application()
    front_app.router.add_route("*", "/{tail:.*}", forward)
    front_runner, front_url = await _serve(front_app)
    try:
        yield front_url
    finally:
        await forwarder.close()
        await front_runner.cleanup()
        await owner_runner.cleanup()


async def test_a_request_held_while_the_lease_leaves_the_owner_is_given_up(front: str) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as client, client.get(f"{front}/api/sessions/cli:s") as answer:
        assert answer.status == 503 and "lease on the session ended" in (await answer.json())["unreachable"]


async def test_a_moves_answer_is_not_raced_with_the_lease_it_moves(front: str) -> None:
    import aiohttp

    async with (
        aiohttp.ClientSession() as client,
        client.post(f"{front}/api/sessions/cli:s/move?to=b") as answer,
    ):
        assert answer.status == 200, await answer.text()
        assert (await answer.json()) == {"answered": "/api/sessions/cli:s/move"}
