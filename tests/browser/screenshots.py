"""Screenshots of every page of the control room, for docs/ui/.

    python -m tests.browser.screenshots docs/ui

starts the daemon against the scripted provider, gives it something to show (sessions of a
few channels, a turn with tool calls, a tool call waiting for approval, reminders, memories,
usage over several turns), and saves each page at a desktop width and the busiest ones at a
phone's width, in Debian's Chromium.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.browser._room import Room, chromium_missing, launch, log_in, open_room
from tests.conftest import wait_until
from tests.fakes.scripted_openai import Reply, ToolCallSpec

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
SHOTS = [
    ("sessions", "/ui/sessions"),
    ("session", "/ui/sessions/cli:release"),
    ("session-context", "/ui/sessions/cli:release?view=context"),
    ("session-timeline", "/ui/sessions/cli:release?view=timeline"),
    ("approvals", "/ui/approvals"),
    ("reminders", "/ui/reminders"),
    ("memories", "/ui/memories"),
    ("usage", "/ui/usage"),
    ("health", "/ui/health"),
]
PHONE_SHOTS = [("sessions-phone", "/ui/sessions"), ("session-phone", "/ui/sessions/cli:release")]


def populate(room: Room) -> None:
    send = room.handle.send
    for sid, text, usage in [
        ("cli:default", "What's on my calendar today?", (1800, 120)),
        ("webhook:alerts:disk-full", "Disk /var is 95% full on db-2", (2400, 300)),
        ("cli:research", "Summarise the three papers I sent yesterday", (9000, 800)),
        ("cli:travel", "Find me a train to Lyon on Friday morning", (3100, 260)),
    ]:
        room.scripted.enqueue(Reply(text=f"Sure — here is what I found about: {text.lower()}", usage=usage))
        assert send(sid, text, wait=True).status_code == 200
    room.scripted.enqueue(
        Reply(
            text="Let me check the build and remember your preference.",
            tool_calls=[
                ToolCallSpec("current_time", {}),
                ToolCallSpec("remember", {"text": "Ana prefers releases on Tuesday mornings"}),
            ],
            usage=(4200, 150),
        ),
        Reply(text="Noted. The build is green; shall I deploy version 2.4 to production?", usage=(4600, 90)),
        Reply(tool_calls=[ToolCallSpec("deploy", {"what": "api", "version": "2.4"})], usage=(4900, 40)),
    )
    assert (
        send("cli:release", "Is the build green? I like releasing on Tuesdays.", wait=True).status_code == 200
    )
    assert send("cli:release", "Yes, deploy 2.4 to production.").status_code == 202
    wait_until(lambda: room.handle.http.get("/api/approvals").json(), what="the approval")
    for fields in (
        {
            "text": "Post the stand-up summary",
            "cron": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "name": "standup",
        },
        {"text": "Check the disk on db-2 again", "in_s": "2h"},
    ):
        assert room.handle.http.post("/api/sessions/cli:default/reminders", json=fields).status_code == 201


def take(browser: Any, room: Room, out: Path) -> list[Path]:
    saved = []
    for viewport, shots in ((DESKTOP, SHOTS), (PHONE, PHONE_SHOTS)):
        context = browser.new_context(base_url=room.base_url, viewport=viewport)
        page = context.new_page()
        log_in(page, room)
        for name, path in shots:
            page.goto(path)
            if "/sessions/" in path:
                # Its live stream never lets the network idle: a moment for the fragments it
                # asks for once joined (what the picture shows, not what a test asserts).
                page.wait_for_timeout(800)
            else:
                page.wait_for_load_state("networkidle")
            for details in page.locator("details.numbers").all()[:1]:
                details.evaluate("d => d.open = true")
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            saved.append(target)
        context.close()
    return saved


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    missing = chromium_missing()
    if missing is not None:
        print(f"cannot take screenshots: {missing}", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, open_room(Path(tmp) / "data") as room, sync_playwright() as pw:
        populate(room)
        browser = launch(pw)
        try:
            for path in take(browser, room, out):
                print(path)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
