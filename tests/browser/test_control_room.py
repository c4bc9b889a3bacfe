"""The control room in a real Chromium against the daemon and the scripted provider: a turn
streams into the page as it is written, a pending tool call is approved with a button and
runs, a running turn is stopped, a reminder added in the page fires, a memory is found,
reworded and deleted, and the usage charts follow new turns."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from tests.browser._room import Room
from tests.conftest import wait_until
from tests.fakes.scripted_openai import Reply, ToolCallSpec
from tests.fakes.subagent_script import FamilyScript

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


def test_a_pending_tool_call_is_approved_with_the_keyboard_and_runs(page: Any, room: Room) -> None:
    sid = "cli:ui-approve"
    open_session(page, room, sid)
    room.scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {"what": "api"})]), Reply(text="deployed it")
    )
    assert room.handle.send(sid, "deploy the api").status_code == 202
    approve = page.locator("#approvals button.approve")
    approve.wait_for()
    assert "deploy" in page.locator("#approvals").inner_text()
    assert json.loads(page.locator("#approvals pre").inner_text()) == {"what": "api"}
    assert room.deploy.calls.count({"what": "api"}) == 0  # nothing runs before the decision
    approve.focus()
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#recorded details.tool .result')]"
        ".some(e => e.textContent === 'deployed api')"
    )
    page.wait_for_function(
        "() => [...document.querySelectorAll('#recorded article.assistant .text')]"
        ".some(e => e.textContent === 'deployed it')"
    )
    assert room.deploy.calls.count({"what": "api"}) == 1
    page.locator("#approvals", has_text="Nothing is waiting").wait_for()
    decided = [m for m in room.handle.transcript(sid) if m["role"] == "tool"]
    assert decided[-1]["content"] == "deployed api"


def test_the_approvals_page_lists_every_session_and_always_grants_the_tool(page: Any, room: Room) -> None:
    sid = "cli:ui-always"
    room.handle.send(sid, "hello", wait=True)
    room.scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("deploy", {"what": "web"})]),
        Reply(text="first done"),
        Reply(tool_calls=[ToolCallSpec("deploy", {"what": "db"})]),
        Reply(text="second done"),
    )
    page.goto("/ui/approvals")
    assert room.handle.send(sid, "deploy the web").status_code == 202
    item = page.locator("#all-approvals li.approval", has_text=sid)
    item.wait_for(timeout=30_000)  # the page refreshes itself every few seconds
    item.get_by_role("button", name="Always").click()
    page.locator("#all-approvals", has_text="Nothing is waiting").wait_for()
    wait_until(lambda: room.handle.transcript(sid)[-1]["content"] == "first done", what="the first reply")
    # "always": the next call of the tool in this session runs without asking.
    assert room.handle.send(sid, "deploy the db", wait=True).json()["reply"] == "second done"
    assert {"what": "db"} in room.deploy.calls


def test_stop_cancels_the_running_turn(page: Any, room: Room) -> None:
    sid = "cli:ui-stop"
    open_session(page, room, sid)
    stop = page.get_by_role("button", name="Stop")
    plain = stop.evaluate("b => getComputedStyle(b).backgroundColor")
    room.scripted.enqueue(Reply(hang=True))
    assert room.handle.send(sid, "think forever").status_code == 202
    page.locator("#phase", has_text="processing").wait_for()
    red = stop.evaluate("b => getComputedStyle(b).backgroundColor")
    assert red != plain, "Stop looks the same whether or not a turn runs"  # red only while one does
    page.get_by_role("button", name="Stop").click()
    page.locator("#control-result", has_text=re.compile(r"Stopped turn \d+")).wait_for()
    page.locator("#recorded .failure", has_text="cancelled").wait_for()
    page.locator("#phase", has_text="ready").wait_for()
    assert stop.evaluate("b => getComputedStyle(b).backgroundColor") == plain


def test_a_status_fragment_answering_late_does_not_undo_the_live_phase(page: Any, room: Room) -> None:
    sid = "cli:ui-late-status"
    assert room.handle.send(sid, "hello", wait=True).status_code == 200
    # The page asks for its status once its live stream has joined: after that answer, every
    # status answer is the fragment as it was then (the phase: ready), marked. So a busy
    # daemon answers a status request after the stream said the turn started.
    with page.expect_response(lambda r: r.url.endswith("/status")):
        page.goto(f"/ui/sessions/{sid}")
    stop = page.get_by_role("button", name="Stop")
    plain = stop.evaluate("b => getComputedStyle(b).backgroundColor")
    before = page.locator("#status").evaluate("s => s.outerHTML")
    marked = before.replace('<section id="status"', '<section id="status" data-late="1"', 1)
    page.route("**/status", lambda route: route.fulfill(status=200, content_type="text/html", body=marked))
    room.scripted.route("answer never", lambda body: Reply(hang=True))  # this turn's calls only
    assert room.handle.send(sid, "answer never").status_code == 202
    # The stream's phase event asked for the status again, and the late answer came in.
    page.wait_for_selector("#status[data-late]:not(.htmx-settling)", state="attached")
    assert page.locator("#phase").inner_text() == "processing"
    assert stop.evaluate("b => getComputedStyle(b).backgroundColor") != plain
    page.unroute("**/status")
    stop.click()
    page.locator("#phase", has_text="ready").wait_for()


def test_reset_is_marked_live_and_in_the_record(page: Any, room: Room) -> None:
    sid = "cli:ui-reset"
    open_session(page, room, sid)
    page.get_by_role("button", name="Reset").click()
    page.locator("#control-result", has_text="Started afresh").wait_for()
    page.locator("#live .marker", has_text="Reset by control room").wait_for()
    page.get_by_label("Message").fill("are you new?")
    page.get_by_role("button", name="Send").click()
    marker = page.locator("#recorded .marker", has_text="The model no longer sees the messages above: reset")
    marker.wait_for()
    # The marker stands between the old conversation and the new one.
    texts = page.locator("#recorded .entry").all_inner_texts()
    at = next(i for i, t in enumerate(texts) if "no longer sees" in t)
    assert "hello" in " ".join(texts[:at]) and "are you new?" in " ".join(texts[at:])


def test_a_reminder_added_in_the_page_can_be_paused_and_fires(page: Any, room: Room) -> None:
    sid = "cli:ui-remind"
    page.goto("/ui/reminders")
    page.get_by_label("Session").fill(sid)
    page.get_by_label("What to say").fill("stretch your legs")
    page.get_by_label("Kind of time").select_option("in")
    page.get_by_label("Time", exact=True).fill("10m")
    page.get_by_label("Name (optional)").fill("legs")
    page.get_by_role("button", name="Add").click()
    row = page.locator("#reminder-list tr", has_text="stretch your legs")
    row.wait_for()
    assert "in 10m" in row.inner_text() or "at " in row.inner_text()
    row.get_by_role("button", name="Pause reminder legs").click()
    page.locator("#reminder-list tr", has_text="paused").wait_for()
    room.clock.advance(1200)  # paused: its time passes, nothing fires
    wait_until(room.clock.settled, what="the scheduler to look at the new time")
    assert room.handle.http.get(f"/api/sessions/{sid}").status_code == 404
    page.locator("#reminder-list tr", has_text="stretch").get_by_role(
        "button", name="Resume reminder legs"
    ).click()
    page.locator("#reminder-list tr", has_text="paused").wait_for(state="detached")
    room.clock.advance(1)  # a one-shot whose time passed while paused fires when resumed
    wait_until(lambda: room.handle.http.get(f"/api/sessions/{sid}").status_code == 200, what="the fire")
    page.goto(f"/ui/sessions/{sid}")
    page.locator("#recorded article.user", has_text="stretch your legs").wait_for(timeout=30_000)
    page.reload()
    page.locator("#recorded article.assistant").first.wait_for()
    assert "Scheduled reminder" in page.locator("#recorded article.user").first.inner_text()


def reword(item: Any, text: str) -> None:
    """Open a memory's editor (a <details>: opened, never toggled shut), type, save."""
    editor = item.locator("details.edit")
    if not editor.evaluate("d => d.open"):
        editor.locator("summary").click()
    box = item.get_by_label(re.compile("New wording of memory"))
    box.wait_for(state="visible")
    box.fill(text)
    item.get_by_role("button", name=re.compile("Save memory")).click()


def test_a_memory_is_found_with_where_it_came_from_edited_and_deleted(page: Any, room: Room) -> None:
    sid = "cli:ui-memory"
    for said, remembered in (
        ("remember how I take my coffee", "Ana drinks her coffee black"),
        ("and how I get to work", "Ana takes the train to work"),
    ):
        room.scripted.enqueue(
            Reply(tool_calls=[ToolCallSpec("remember", {"text": remembered})]),
            Reply(text="noted"),
        )
        assert room.handle.send(sid, said, wait=True).json()["reply"] == "noted"
    page.goto("/ui/memories")
    page.get_by_label("Search").fill("coffee")
    page.wait_for_url(re.compile(r"[?&]q=coffee"))  # the search's own swap is in: no late one
    item = page.locator("#memory-list li.memory", has_text="Ana drinks her coffee black")
    item.wait_for()
    assert f"learnt in {sid}, turn 1" in item.inner_text()
    memory_id = item.get_attribute("id")
    assert memory_id is not None
    # A correction: reworded in place, the same memory (id, provenance).
    reword(item, "Ana drinks her coffee with oat milk")
    edited = page.locator(f"#{memory_id}", has_text="Ana drinks her coffee with oat milk")
    edited.wait_for()
    assert f"learnt in {sid}, turn 1" in edited.inner_text()
    found = room.handle.http.get("/api/memories", params={"q": "oat milk"}).json()
    assert found[0]["text"] == "Ana drinks her coffee with oat milk"
    # Reworded into what another memory says: refused, with why, under the memory.
    reword(edited, "Ana takes the train to work")
    alert = page.locator(f"#{memory_id} [role=alert]")
    alert.wait_for()
    assert "of the same audience already says this" in alert.inner_text()
    assert "Ana drinks her coffee with oat milk" in page.locator(f"#{memory_id} p.text").inner_text()
    page.locator(f"#{memory_id}").get_by_role("button", name=re.compile("Delete memory")).click()
    page.locator(f"#{memory_id}").wait_for(state="detached")
    found = room.handle.http.get("/api/memories", params={"q": "coffee"}).json()
    assert memory_id.removeprefix("memory-") not in {str(m["id"]) for m in found}


def test_the_usage_charts_follow_new_turns(page: Any, room: Room) -> None:
    page.goto("/ui/usage")
    before = int(page.locator("#total-turns").inner_text())
    today_total = page.locator("#tokens-by-day-table tbody tr").last.locator("td").last  # in <details>
    tokens_before = today_total.text_content()
    cost_before = page.locator("#total-cost").inner_text()
    for i in range(2):
        room.scripted.enqueue(Reply(text=f"counted {i}", usage=(4000, 100)))
        assert room.handle.send("cli:ui-usage", f"count {i}", wait=True).status_code == 200
    # The charts refresh themselves (every 5 s): the totals, the bars and their numbers move.
    page.wait_for_function(
        "n => Number(document.querySelector('#total-turns').textContent) >= n", arg=before + 2, timeout=30_000
    )
    assert today_total.text_content() != tokens_before
    bars = page.locator("#tokens-by-session rect title").all_text_contents()
    assert any(t.startswith("cli:ui-usage · uncached input: 8,000") for t in bars), bars
    # Priced: 2 x (4,000 in x $3 + 100 out x $15) per million = $0.027 more, in the total and the charts.
    page.wait_for_function("t => document.querySelector('#total-cost').textContent !== t", arg=cost_before)
    assert page.locator("#total-cost").inner_text().endswith("USD")
    costs = page.locator("#cost-by-session rect title").all_text_contents()
    assert any(t.startswith("cli:ui-usage · cost:") for t in costs), costs


def test_a_sub_agents_session_opens_from_the_list_and_its_controls_reach_it(page: Any, room: Room) -> None:
    # Its id holds a "/" (agent:cli:ui-parent/1): every link and form of its page must keep it
    # one path segment, or the page, its transcript and its controls are a 404.
    family = FamilyScript(rounds=1)
    room.scripted.route("[spawn-ui]", family)
    room.scripted.route("TASK ui-", family)
    assert room.handle.send("cli:ui-parent", "SPAWN 1 ui [spawn-ui]", wait=True).status_code == 200
    child = "agent:cli:ui-parent/1"
    wait_until(
        lambda: room.handle.http.get(f"/api/sessions/{quote(child, safe=':')}").status_code == 200,
        20,
        "the sub-agent's session",
    )
    # The parent's page lists it among its sub-agents.
    page.goto("/ui/sessions/cli:ui-parent")
    page.get_by_role("heading", name="Sub-agents").wait_for()
    page.goto("/ui/sessions")
    page.locator(f'a[href="/ui/sessions/{quote(child, safe=":")}"]').first.click()
    page.wait_for_selector("#recorded article.assistant")  # its transcript, fetched by the page
    page.locator("#recorded", has_text="RESULT ui-1").wait_for()
    page.get_by_role("button", name="Reset").click()
    page.locator("#control-result", has_text="Started afresh").wait_for()


def test_the_session_page_chooses_the_sessions_model(page: Any, room: Room) -> None:
    sid = "cli:ui-model"
    open_session(page, room, sid)
    page.get_by_label("Model").select_option("big")
    page.get_by_role("button", name="Choose").click()
    page.locator("#control-result", has_text="From the next turn on: big (scripted-big)").wait_for()
    assert room.handle.send(sid, "which model now?", wait=True).status_code == 200
    assert room.scripted.requests[-1]["model"] == "scripted-big"
    page.reload()
    assert page.get_by_label("Model").input_value() == "big"


def test_the_timeline_of_a_slow_turn_shows_where_its_time_went(page: Any, room: Room) -> None:
    sid = "cli:ui-slow"
    room.scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("current_time", {})]),
        Reply(text="here you are", delay_s=1.2),  # the model takes its time over the answer
    )
    assert room.handle.send(sid, "what time is it?", wait=True).status_code == 200
    page.goto(f"/ui/sessions/{sid}")
    page.get_by_role("link", name="Timeline").click()
    heading = page.locator(".turn-timeline h3").first
    assert "Turn 1" in heading.inner_text() and "completed" in heading.inner_text()
    assert "slowest: model: the answer" in heading.inner_text()
    rows = page.locator(".turn-timeline table tbody tr")
    labels = [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())]
    assert labels[-3:] == ["model: asks for tools", "tools: current_time", "model: the answer"]
    took = float(rows.nth(rows.count() - 1).locator("td").nth(2).inner_text().split()[0])
    assert 1.2 <= took < 5
    # The waterfall: the answer's bar is the widest, and starts where the tools' bar does or
    # after (a quick tool's bar is drawn a pixel or two wide whatever it took).
    bars = page.locator(".turn-timeline svg rect")
    boxes = [bars.nth(i).bounding_box() for i in range(bars.count())]
    answer, tools = boxes[-1], boxes[-2]
    assert answer is not None and tools is not None
    assert answer["width"] == max(b["width"] for b in boxes if b is not None)
    assert answer["x"] >= tools["x"]
