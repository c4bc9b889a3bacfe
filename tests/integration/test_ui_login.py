"""Logging in to the control room, and where it is served: failed logins are slowed per
address (even the right token waits), the webhook listener serves no control room, and
``ui.enabled: false`` removes it."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from netclaw.ui._auth import COOKIE
from tests.conftest import DaemonHandle, wait_until


def test_failed_logins_are_slowed_per_address(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon()
    client = httpx.Client(base_url=handle.base_url, timeout=30)
    first = client.post("/ui/login", data={"token": "guess-1"})
    assert first.status_code == 401 and "Next try in 1 s" in first.text
    # During the wait every try is refused unread, the right token too.
    early = client.post("/ui/login", data={"token": handle.token})
    assert early.status_code == 429 and early.headers["retry-after"] == "1"
    assert COOKIE not in early.headers.get("set-cookie", "")
    # Tries are refused unread until the wait is over (none of them counts): the first one
    # read is the first one after it.
    second = wait_until(
        lambda: (r := client.post("/ui/login", data={"token": "guess-2"})).status_code != 429 and r,
        timeout=5,
        what="the first wait to be over",
        interval=0.1,
    )
    assert second.status_code == 401 and "Next try in 2 s" in second.text
    assert client.post("/ui/login", data={"token": "guess-3"}).headers["retry-after"] in ("1", "2")
    signed_in = wait_until(
        lambda: (r := client.post("/ui/login", data={"token": handle.token})).status_code != 429 and r,
        timeout=5,
        what="the second wait to be over",
        interval=0.1,
    )
    assert signed_in.status_code == 303
    # A success clears the address: the next failure waits 1 s again.
    assert (
        "Next try in 1 s"
        in httpx.Client(base_url=handle.base_url, timeout=30).post("/ui/login", data={"token": "typo"}).text
    )


def test_the_webhook_listener_serves_no_control_room(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon(gateway={"webhook_host": "127.0.0.1", "webhook_port": 0})
    port = handle.daemon.webhook_port
    assert httpx.get(f"http://127.0.0.1:{port}/ui/login").status_code == 404
    assert httpx.get(f"http://127.0.0.1:{port}/ui/static/htmx.min.js").status_code == 404
    assert httpx.get(f"{handle.base_url}/ui/login").status_code == 200


def test_the_control_room_can_be_turned_off(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon(ui={"enabled": False})
    assert httpx.get(f"{handle.base_url}/ui/login").status_code == 404
    assert handle.http.get("/api/sessions").status_code == 200


def test_the_health_page_says_degraded_and_why(start_daemon: Callable[..., DaemonHandle]) -> None:
    handle = start_daemon(slack={"enabled": True, "bot_token_env": "UI_NO_SUCH_TOKEN"})
    client = httpx.Client(base_url=handle.base_url, timeout=30)
    assert client.post("/ui/login", data={"token": handle.token}).status_code == 303
    page = client.get("/ui/health").text
    assert "<strong>degraded</strong>: adapter slack is disabled" in page
    assert "UI_NO_SUCH_TOKEN" in page  # the reason names what to set
    assert handle.http.get("/healthz").json()["status"] == "degraded"
