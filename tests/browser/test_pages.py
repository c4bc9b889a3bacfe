"""Every page in a real Chromium: labelled controls, usable by keyboard, readable at a phone's
width, readable and usable without JavaScript, and a form posted from another origin is
refused even though the browser sends the login cookie with it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from netclaw.process.runtime import IoLoop
from tests.browser._room import Room, log_in
from tests.fakes.scripted_openai import Reply, ToolCallSpec

PAGES = [
    "/ui/sessions",
    "/ui/sessions/cli:pages",
    "/ui/sessions/cli:pages?view=context",
    "/ui/approvals",
    "/ui/reminders",
    "/ui/memories",
    "/ui/usage",
    "/ui/health",
]

UNLABELLED = """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
  .map(e => e.outerHTML)"""


@pytest.fixture(scope="module", autouse=True)
def content(room: Room) -> None:
    """Something on every page: a session with a tool call waiting, a memory, a reminder."""
    room.scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("remember", {"text": "the pages test likes tea"})]), Reply(text="ok")
    )
    assert room.handle.send("cli:pages", "remember tea", wait=True).status_code == 200
    room.scripted.enqueue(Reply(tool_calls=[ToolCallSpec("deploy", {"what": "pages"})]), Reply(text="done"))
    assert room.handle.send("cli:pages", "deploy").status_code == 202
    added = room.handle.http.post(
        "/api/sessions/cli:pages/reminders", json={"text": "tea time", "in_s": "1h"}
    )
    assert added.status_code == 201


def test_every_control_has_a_label_and_every_page_fits_a_phone(page: Any) -> None:
    page.set_viewport_size({"width": 375, "height": 740})
    for path in PAGES:
        page.goto(path)
        assert page.evaluate(UNLABELLED) == [], path
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"{path} is wider than the phone: {width}"
        assert page.locator("h1").count() == 1, path


def test_the_keyboard_reaches_the_content_and_the_pages(page: Any) -> None:
    page.goto("/ui/sessions")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.goto("/ui/sessions")
    for _ in range(3):
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "/ui/sessions"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/approvals")


def test_pages_read_and_forms_work_without_javascript(browser: Any, room: Room) -> None:
    context = browser.new_context(base_url=room.base_url, java_script_enabled=False)
    try:
        page = context.new_page()
        log_in(page, room)
        page.goto("/ui/sessions?q=pages")
        assert (
            page.locator("table.sessions a", has_text="cli:pages").count() >= 1
            or "cli:pages" in page.content()
        )
        page.goto("/ui/sessions/cli:pages")
        assert page.locator("#recorded article.assistant", has_text="ok").count() == 1
        page.goto("/ui/reminders")
        row = page.locator("#reminder-list tr", has_text="tea time")
        row.get_by_role("button", name="Pause reminder").click()  # a plain post, then back here
        page.wait_for_url("**/ui/reminders")
        assert "paused" in page.locator("#reminder-list tr", has_text="tea time").inner_text()
    finally:
        context.close()


@pytest.fixture
def other_site() -> Iterator[tuple[str, list[str]]]:
    """A page on another origin (same host, another port) whose form posts to the daemon."""
    io = IoLoop().start()
    target: list[str] = []

    async def evil(request: web.Request) -> web.Response:
        html = (
            f'<form id="f" method="post" action="{target[0]}">'
            '<input name="csrf" value="guessed"><button>go</button></form>'
            "<script>document.getElementById('f').submit()</script>"
        )
        return web.Response(text=html, content_type="text/html")

    async def start() -> tuple[web.AppRunner, int]:
        app = web.Application()
        app.router.add_get("/", evil)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, runner.addresses[0][1]

    runner, port = io.run(start())
    try:
        yield f"http://127.0.0.1:{port}/", target
    finally:
        io.run(runner.cleanup())
        io.stop()


def test_a_form_posted_from_another_origin_is_refused(
    page: Any, room: Room, other_site: tuple[str, list[str]], console_errors: list[str]
) -> None:
    memories = room.handle.http.get("/api/memories", params={"q": "tea"}).json()
    assert memories, "the module's memory"
    url, target = other_site
    target.append(f"{room.base_url}/ui/memories/{memories[0]['id']}/delete")
    refused = threading.Event()
    page.on("response", lambda r: refused.set() if "/delete" in r.url and r.status == 403 else None)
    page.goto(url)
    page.wait_for_url("**/delete")
    assert refused.is_set()
    assert "refused" in page.content()
    assert room.handle.http.get("/api/memories", params={"q": "tea"}).json() == memories
    console_errors.remove("Failed to load resource: the server responded with a status of 403 (Forbidden)")


def test_the_sessions_page_searches_filters_and_pages(page: Any, room: Room) -> None:
    api = room.handle
    for i in range(52):
        assert api.send(f"webhook:many:{i:02d}", f"hello {i}", wait=True).status_code == 200
    page.goto("/ui/sessions")
    assert "page 1 of 2" in page.locator("#session-table .count").inner_text()
    page.get_by_role("link", name="Older →").click()
    page.locator("#session-table .count", has_text="page 2 of 2").wait_for()
    assert "page=2" in page.url
    page.get_by_label("Search").fill("MANY:0")
    page.locator("#session-table .count", has_text="10 sessions").wait_for()
    assert "q=MANY" in page.url
    page.get_by_label("Search").fill("")
    page.get_by_label("Channel").select_option("webhook")
    page.locator("#session-table .count", has_text="52 sessions").wait_for()
    page.get_by_label("Phase").select_option("passivated")
    page.locator("#session-table .count", has_text="0 sessions").wait_for()  # all resident here
    page.get_by_label("Phase").select_option("ready")
    page.locator("#session-table .count", has_text="52 sessions · page 1 of 2").wait_for()
