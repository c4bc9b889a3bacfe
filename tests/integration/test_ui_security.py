"""The control room's defences, over real HTTP against the daemon: nothing under /ui but the
login page and static files answers without the login cookie; a state change needs the
login's CSRF token and our own origin; the control token (and every configured secret) never
appears in a page, a fragment, a live event, a URL or a log line; the bearer API is unchanged
(failed logins and the listeners: test_ui_login.py)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.tools import Tool, ToolContext
from netclaw.ui import control_room
from netclaw.ui._auth import COOKIE, Logins
from tests.conftest import DaemonHandle, settings_data, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

PROVIDER_KEY = "sk-provider-secret-4d1f9a"
WEBHOOK_SECRET = "whsec-9b8c7d6e5f"
SID = "cli:guarded"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonHandle, ScriptedOpenAIThread]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("UI_TEST_PROVIDER_KEY", PROVIDER_KEY)
    mp.setenv("UI_TEST_WEBHOOK_SECRET", WEBHOOK_SECRET)
    with ScriptedOpenAIThread() as scripted:
        config = settings_data(
            tmp_path_factory.mktemp("guarded") / "data",
            scripted.base_url,
            audiences={"personal": {"approve": ["deploy"]}},
            webhooks={"routes": {"hook": {"auth": {"type": "hmac", "secret_env": "UI_TEST_WEBHOOK_SECRET"}}}},
        )
        config["providers"]["local"]["api_key_env"] = "UI_TEST_PROVIDER_KEY"
        daemon = Daemon(Settings(**config))
        daemon.start()
        handle = DaemonHandle(daemon)

        async def deploy(args: Mapping[str, Any], context: ToolContext) -> str:
            return "deployed"

        # Approvals are asked only for tools that exist and are offered.
        daemon.tools.register(Tool("deploy", "Deploy something.", {"type": "object"}, deploy))
        try:
            assert handle.send(SID, "hello", wait=True).status_code == 200
            added = handle.http.post(f"/api/sessions/{SID}/reminders", json={"text": "tick", "in_s": "1h"})
            assert added.status_code == 201
            yield handle, scripted
        finally:
            handle.stop()
            mp.undo()


@pytest.fixture
def handle(guarded: tuple[DaemonHandle, ScriptedOpenAIThread]) -> DaemonHandle:
    return guarded[0]


def browser(handle: DaemonHandle) -> httpx.Client:
    return httpx.Client(base_url=handle.base_url, timeout=30)


def logged_in(handle: DaemonHandle) -> httpx.Client:
    client = browser(handle)
    answer = client.post("/ui/login", data={"token": handle.token, "next": "/ui/sessions"})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/sessions", answer.text
    return client


def csrf_of(client: httpx.Client) -> str:
    page = client.get("/ui/sessions").text
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def concrete_routes(handle: DaemonHandle) -> list[tuple[str, str]]:
    """(method, path) of every route the control room has, with real ids in the placeholders."""
    assert handle.daemon.gateway is not None
    app = control_room(handle.daemon.gateway.operator, handle.token)
    reminder = handle.http.get("/api/reminders").json()[0]["id"]
    values = {"id": SID, "approval_id": "appr-1"}
    found = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path") or info.get("prefix", "")
        if route.method == "HEAD":
            continue
        if "/reminders/{id}" in path:
            path = path.replace("{id}", reminder)
        elif "/memories/{id}" in path:
            path = path.replace("{id}", "1")
        for key, value in values.items():
            path = path.replace("{" + key + "}", value)
        if path.startswith("/static"):
            path += "/ui.css"
        found.append((route.method, "/ui" + path))
    return found


def test_nothing_but_the_login_page_answers_without_the_cookie(handle: DaemonHandle) -> None:
    routes = concrete_routes(handle)
    assert len(routes) >= 25, routes  # the enumeration found the pages, fragments and forms
    forged = Logins("not-the-token", 3600).issue()[0]
    expired = Logins(handle.token, 3600, clock=lambda: time.time() - 7200).issue()[0]
    for cookie in (None, forged, expired, "v1.9999999999.x.y"):
        client = browser(handle)
        if cookie is not None:
            client.cookies.set(COOKIE, cookie, path="/ui")
        for method, path in routes:
            if path == "/ui/login" or path.startswith("/ui/static/"):
                continue  # public: the login form and the page's own script and style
            answer = client.request(method, path)
            assert answer.status_code in (303, 401), (cookie, method, path, answer.status_code)
            if answer.status_code == 303:
                assert answer.headers["location"].startswith("/ui/login?next="), (path, answer.headers)
            assert SID not in answer.text and "hello" not in answer.text, (method, path)


def test_a_link_from_another_site_asks_to_continue_rather_than_showing_anything(handle: DaemonHandle) -> None:
    answer = browser(handle).get(f"/ui/sessions/{SID}", headers={"Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 200 and "Continue to the control room" in answer.text
    assert "hello" not in answer.text


def test_the_login_cookie_is_httponly_samesite_strict_and_expires(handle: DaemonHandle) -> None:
    client = browser(handle)
    answer = client.post("/ui/login", data={"token": handle.token})
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert "Max-Age=43200" in cookie and "Secure" not in cookie  # 12 h by default; plain HTTP
    behind_tls = client.post(
        "/ui/login", data={"token": handle.token}, headers={"X-Forwarded-Proto": "https"}
    )
    assert "Secure" in behind_tls.headers["set-cookie"]
    assert handle.token not in answer.headers["location"] and handle.token not in cookie


def test_a_state_change_needs_the_csrf_token_and_our_own_origin(handle: DaemonHandle) -> None:
    client = logged_in(handle)
    token = csrf_of(client)
    path = f"/ui/sessions/{SID}/reset"
    origin = handle.base_url

    def post(**kw: Any) -> httpx.Response:
        return client.post(path, **kw)

    assert post(data={}).status_code == 403  # no token
    assert post(data={"csrf": "forged"}).status_code == 403
    assert "security token" in post(data={"csrf": "forged"}).text
    assert post(data={"csrf": token}, headers={"Origin": "http://evil.example"}).status_code == 403
    assert post(data={"csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert post(data={"csrf": token}, headers={"Sec-Fetch-Site": "same-site"}).status_code == 403
    other = logged_in(handle)  # another login's token is not this one's
    assert other.post(path, data={"csrf": token}).status_code == 403
    done = post(data={"csrf": token}, headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"})
    assert done.status_code == 303 and done.headers["location"] == f"/ui/sessions/{SID}"
    htmx = post(headers={"X-CSRF-Token": token, "HX-Request": "true", "Origin": origin})
    assert htmx.status_code == 200 and "Started afresh" in htmx.text


def test_logging_out_ends_the_login(handle: DaemonHandle) -> None:
    client = logged_in(handle)
    cookie = client.cookies[COOKIE]
    assert client.post("/ui/logout", data={"csrf": csrf_of(client)}).status_code == 303
    replay = browser(handle)
    replay.cookies.set(COOKIE, cookie, path="/ui")
    assert replay.get("/ui/sessions").status_code == 303


def test_the_bearer_api_and_the_cookie_do_not_stand_in_for_each_other(handle: DaemonHandle) -> None:
    client = logged_in(handle)
    assert client.get("/api/sessions").status_code == 401
    assert handle.http.get("/api/sessions").status_code == 200
    bearer = browser(handle)
    bearer.headers["Authorization"] = f"Bearer {handle.token}"
    assert bearer.get("/ui/sessions").status_code == 303


def test_what_people_and_the_model_wrote_is_shown_as_text_never_as_html(
    guarded: tuple[DaemonHandle, ScriptedOpenAIThread],
) -> None:
    handle, scripted = guarded
    sid = "cli:markup"
    scripted.enqueue(Reply(text="<script>alert('model')</script>"))
    assert handle.send(sid, '<img src=x onerror="alert(1)">', wait=True).status_code == 200
    client = logged_in(handle)
    for path in (f"/ui/sessions/{sid}", f"/ui/sessions/{sid}/transcript", "/ui/sessions?q=markup"):
        html = client.get(path).text
        assert "<img src=x" not in html and "<script>alert" not in html, path
        assert "&lt;img src=x" in html, path


def test_pages_carry_strict_security_headers(handle: DaemonHandle) -> None:
    answer = logged_in(handle).get("/ui/sessions")
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["cache-control"] == "no-store"


def test_no_secret_appears_in_a_page_a_fragment_a_live_event_a_url_or_a_log_line(
    guarded: tuple[DaemonHandle, ScriptedOpenAIThread], caplog: pytest.LogCaptureFixture
) -> None:
    handle, scripted = guarded
    caplog.set_level(logging.DEBUG)
    secrets = (handle.token, PROVIDER_KEY, WEBHOOK_SECRET)
    client = logged_in(handle)
    seen: list[str] = []
    with client.stream("GET", f"/ui/sessions/{SID}/events") as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("event: joined")
        # Secrets said in the conversation itself, by the person and by the model (in a tool call).
        scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("deploy", {"what": PROVIDER_KEY})]),
            Reply(text=f"the token is {handle.token}"),
        )
        assert handle.send(SID, f"keys: {handle.token} {PROVIDER_KEY} {WEBHOOK_SECRET}").status_code == 202
        for line in lines:
            seen.append(line)
            if line.startswith("event: approval_requested"):
                break
    pending = handle.http.get(f"/api/sessions/{SID}/approvals").json()
    pages = [
        "/ui/sessions",
        f"/ui/sessions/{SID}",
        f"/ui/sessions/{SID}?view=context",
        f"/ui/sessions/{SID}/transcript",
        f"/ui/sessions/{SID}/status",
        f"/ui/sessions/{SID}/approvals",
        "/ui/approvals",
        "/ui/reminders",
        "/ui/memories",
        "/ui/usage",
        "/ui/health",
        "/ui/login",
    ]
    answers = {path: client.get(path) for path in pages}
    # The message was shown, its secrets not (redacted before it was recorded); the tool
    # call's arguments neither.
    assert "[redacted: Daemon Secret]" in answers[f"/ui/sessions/{SID}"].text
    assert "[redacted: Daemon Secret]" in answers["/ui/approvals"].text
    assert "UI_TEST_PROVIDER_KEY" in answers["/ui/health"].text  # the config names the variable
    decided = client.post(
        f"/ui/sessions/{SID}/approvals/{pending[0]['id']}", data={"csrf": csrf_of(client), "decision": "deny"}
    )
    assert decided.status_code == 303
    wait_until(lambda: handle.transcript(SID)[-1]["role"] == "assistant", what="the turn's end")
    answers["after"] = client.get(f"/ui/sessions/{SID}")
    urls = [str(r.url) for r in answers.values()] + [decided.headers["location"]]
    for secret in secrets:
        for path, answer in answers.items():
            assert secret not in answer.text, path
            assert secret not in str(answer.headers), path
        assert not any(secret in line for line in seen)
        assert not any(secret in url for url in urls)
        assert not any(secret in record.getMessage() for record in caplog.records)
