"""The control room in a real Chromium against the daemon and the scripted provider: a turn
streams into the page as it is written, a pending tool call is approved with a button and
runs, a running turn is stopped, a reminder added in the page fires, a memory is found and
deleted, and the usage charts follow new turns."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.browser._room import Room
from tests.conftest import wait_until
from tests.fakes.scripted_openai import Reply, ToolCallSpec

LONG_REPLY = " ".join(f"word{i}" for i in range(60))


def open_session(page: Any, room: Room, sid: str) -> None:
    """A session that exists (one answered message), opened in the page, its live stream joined."""
    response = room.handle.send(sid, "hello", wait=True)
    assert response.status_code == 200, response.text
    page.goto(f"/ui/sessions/{sid}")
    page.wait_for_selector("#recorded article.assistant")
    # The live stream is open once the page asked for its fragments after "joined".
    page.wait_for_function("() => document.querySelector('#live') !== null")


def test_a_turn_streams_into_the_page_as_it_is_written(page: Any, room: Room) -> None:
    sid = "cli:ui-stream"
    open_session(page, room, sid)
    room.scripted.enqueue(Reply(text=LONG_REPLY, chunk_size=6, chunk_delay_s=0.05))
    page.get_by_label("Message").fill("tell me a long story")
    page.get_by_role("button", name="Send").click()
    # Part of the reply is on the page while the rest is still being written.
    page.wait_for_function(
        "full => { const t = document.querySelector('#live .live-text .text');"
        " return t && t.textContent.length > 0 && t.textContent.length < full.length; }",
        arg=LONG_REPLY,
    )
    # Then all of it, recorded: the transcript fragment has the turn.
    page.wait_for_function(
        "full => [...document.querySelectorAll('#recorded article.assistant .text')]"
        ".some(e => e.textContent === full)",
        arg=LONG_REPLY,
    )
    assert page.locator("#recorded article.user .text", has_text="tell me a long story").count() == 1
    assert page.get_by_label("Message").input_value() == ""
