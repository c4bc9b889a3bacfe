"""The scheduler on the real daemon, with a clock the test moves (no sleeping tests):
reminders from the API, the config and the model fire once each on time; a fire repeated
after a crash is admitted once; missed fires follow ``catch_up``; bad input names the
field."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from netclaw.config import Settings
from netclaw.daemon import Daemon
from netclaw.reminders import identity
from tests.conftest import DaemonHandle, wait_until
from tests.fakes.clock import FakeClock
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec

START = 1_800_000_000.0  # 2027-01-15T08:00Z, a Friday

Start = Callable[..., tuple[DaemonHandle, FakeClock]]


@pytest.fixture
def start(make_settings: Callable[..., Settings]) -> Iterator[Start]:
    handles: list[DaemonHandle] = []

    def run(clock: FakeClock | None = None, **sections: Any) -> tuple[DaemonHandle, FakeClock]:
        clock = clock or FakeClock(START)
        daemon = Daemon(make_settings(**sections), clock=clock)
        daemon.start()
        handle = DaemonHandle(daemon)
        handles.append(handle)
        return handle, clock

    yield run
    for handle in handles:
        handle.stop()


def reminder_messages(handle: DaemonHandle, sid: str) -> list[str]:
    if handle.http.get(f"/api/sessions/{sid}").status_code == 404:
        return []
    return [m["content"] for m in handle.transcript(sid) if m["role"] == "user"]


def add(handle: DaemonHandle, sid: str, **fields: Any) -> dict[str, Any]:
    response = handle.http.post(f"/api/sessions/{sid}/reminders", json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_one_shot_reminder_fires_once_when_its_time_comes(start: Start) -> None:
    handle, clock = start()
    sid = "cli:remind"
    created = add(handle, sid, text="stretch your legs", in_s="10m")
    assert created["next_fire"] == START + 600
    listed = handle.http.get("/api/reminders", params={"session": sid}).json()
    assert [(r["id"], r["text"], r["created_by"]) for r in listed] == [
        (created["id"], "stretch your legs", "api")
    ]

    clock.advance(599)
    wait_until(clock.settled, what="the scheduler to look at 08:09:59")
    assert reminder_messages(handle, sid) == []  # not yet
    clock.advance(1)
    [text] = wait_until(lambda: reminder_messages(handle, sid), what="the fire")
    assert text.startswith("[Scheduled reminder, due 2027-01-15T08:10+00:00.") and "stretch your legs" in text
    wait_until(lambda: handle.transcript(sid)[-1]["role"] == "assistant", what="the turn")
    assert handle.http.get("/api/reminders").json() == []  # a one-shot is done
    clock.advance(3600)
    wait_until(clock.settled, what="the scheduler to look at an hour later")
    assert len(reminder_messages(handle, sid)) == 1


def test_a_recurring_reminder_fires_each_period_and_can_be_cancelled(start: Start) -> None:
    handle, clock = start()
    sid = "cli:hourly"
    created = add(handle, sid, text="check the queue", every_s="1h")
    for fires in (1, 2):
        clock.advance(3600)
        wait_until(lambda n=fires: len(reminder_messages(handle, sid)) == n, what=f"fire {fires}")  # type: ignore[misc]
    # A fire is admitted before next_fire moves on (so a crash between repeats it): wait for
    # the row, not only the message.
    listed = wait_until(
        lambda: (rows := handle.http.get("/api/reminders").json()) and rows[0]["fired"] == 2 and rows[0],
        what="the second fire recorded",
    )
    assert listed["next_fire"] == START + 3 * 3600
    assert "1 reminder(s)" in handle.send(sid, "/status").json()["notice"]
    assert handle.http.delete(f"/api/reminders/{created['id']}").status_code == 204
    assert handle.http.delete(f"/api/reminders/{created['id']}").status_code == 404
    clock.advance(3600)
    wait_until(clock.settled, what="the scheduler to look at the next hour")
    assert len(reminder_messages(handle, sid)) == 2


def test_a_fire_repeated_after_a_crash_is_admitted_once(start: Start) -> None:
    """The crash between the admission and moving next_fire on: the same scheduled time
    fires again, and the session's replay identity turns it into nothing."""
    handle, clock = start()
    sid = "cli:once"
    created = add(handle, sid, text="only once", in_s=60)
    scheduler, store, io = handle.daemon.scheduler, handle.daemon.reminders, handle.daemon.io
    assert scheduler is not None and store is not None and io is not None
    reminder = io.run(store.get(created["id"]))
    assert reminder is not None
    clock.advance(60)
    wait_until(lambda: reminder_messages(handle, sid), what="the fire")
    assert io.run(scheduler._fire(reminder, clock.now())) == 0  # noqa: SLF001 - the crash-repeated fire
    assert len(reminder_messages(handle, sid)) == 1  # the fire above was answered: not admitted
    admitted = [m for m in handle.transcript(sid) if m["role"] == "user"]
    assert len(admitted) == 1
    assert identity(created["id"], START + 60).startswith(f"reminder:{created['id']}:")


@pytest.mark.parametrize(("mode", "fires"), [("latest", 1), ("all", 3), ("skip", 0)])
def test_fires_missed_while_down_follow_catch_up(
    start: Start, mode: str, fires: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="netclaw.workers.scheduler")
    handle, clock = start()
    sid = f"cli:missed-{mode}"
    add(handle, sid, text="hourly report", every_s=3600, catch_up=mode)
    handle.stop()  # the daemon is down over three fire times
    clock.advance(3 * 3600 + 600)
    handle, _ = start(clock, schedules={})
    settle = "notice" if mode != "all" else "fires"
    wait_until(lambda: len(reminder_messages(handle, sid)) == fires or fires == 0, what=settle)
    wait_until(clock.settled, what="the scheduler to have caught up and gone back to sleep")
    assert len(reminder_messages(handle, sid)) == fires
    [listed] = handle.http.get("/api/reminders").json()
    assert listed["next_fire"] == START + 4 * 3600
    announced = [
        r.getMessage() for r in caplog.records if "passed while netclaw was not running" in r.getMessage()
    ]
    if mode == "all":
        assert announced == []
    else:
        assert len(announced) == 1 and f"catch_up: {mode}" in announced[0]


def test_config_schedules_are_synced_and_fire(start: Start) -> None:
    schedules = {
        "standup": {"cron": "5 8 * * 1-5", "text": "Post the stand-up summary.", "session": "cli:standup"}
    }
    handle, clock = start(schedules=schedules)
    [listed] = handle.http.get("/api/reminders").json()
    assert (listed["id"], listed["cron"], listed["created_by"]) == (
        "config:standup",
        "5 8 * * 1-5",
        "config:standup",
    )
    assert listed["next_fire"] == START + 300
    clock.advance(300)
    [text] = wait_until(lambda: reminder_messages(handle, "cli:standup"), what="the stand-up")
    assert text.startswith("[Scheduled reminder 'standup'")
    handle.stop()
    handle, _ = start(clock, schedules={})  # removed from the config: gone
    assert handle.http.get("/api/reminders").json() == []


def test_the_model_schedules_lists_and_cancels_its_own_reminders(
    start: Start, scripted: ScriptedOpenAIThread
) -> None:
    handle, _clock = start()
    sid = "cli:model"
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "water the plants", "in_s": "2h"})]),
        Reply(text="I will remind you"),
    )
    assert handle.send(sid, "remind me in 2 hours to water the plants", wait=True).status_code == 200
    [listed] = handle.http.get("/api/reminders").json()
    assert (listed["session_id"], listed["created_by"], listed["next_fire"]) == (
        sid,
        f"model:{sid}",
        START + 7200,
    )
    result = next(m for m in handle.transcript(sid) if m["role"] == "tool")["content"]
    assert result.startswith(f"scheduled {listed['id']}")

    scripted.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec("list_reminders", {}),
                ToolCallSpec("cancel_reminder", {"id": "rem-nope"}),
            ]
        ),
        Reply(tool_calls=[ToolCallSpec("cancel_reminder", {"id": listed["id"]})]),
        Reply(text="cancelled"),
    )
    assert handle.send(sid, "never mind", wait=True).status_code == 200
    results = [m for m in handle.transcript(sid) if m["role"] == "tool"][1:]
    assert "water the plants" in results[0]["content"]
    assert results[1]["is_error"] and "no reminder 'rem-nope'" in results[1]["content"]
    assert results[2]["content"] == f"cancelled {listed['id']}"
    assert handle.http.get("/api/reminders").json() == []

    # A bad schedule is a tool error the model can act on.
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "x", "cron": "every day"})]),
        Reply(text="sorry"),
    )
    assert handle.send(sid, "remind me daily", wait=True).status_code == 200
    error = [m for m in handle.transcript(sid) if m["role"] == "tool"][-1]
    assert error["is_error"] and "cron" in error["content"]


def test_public_sessions_may_not_schedule(start: Start, scripted: ScriptedOpenAIThread) -> None:
    handle, _ = start(audiences={"public": {"tools": ["schedule_reminder"], "memory_recall": False}})
    assert handle.daemon.scheduler is not None and handle.daemon.io is not None
    from netclaw.errors import InvalidInput

    with pytest.raises(InvalidInput, match="public sessions may not schedule"):
        handle.daemon.io.run(
            handle.daemon.scheduler.add_for_model("webhook:x:1", "public", {"text": "x", "in_s": 60})
        )


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"in_s": 60}, "invalid_text"),
        ({"text": "x"}, "invalid_schedule"),
        ({"text": "x", "at": "2001-01-01T00:00"}, "invalid_at"),
        ({"text": "x", "cron": "61 * * * *"}, "invalid_cron"),
        ({"text": "x", "cron": "0 9 * * *", "timezone": "Atlantis/Capital"}, "invalid_timezone"),
        ({"text": "x", "in_s": 60, "catch_up": "sometimes"}, "invalid_catch_up"),
        ({"text": "x", "in_s": 60, "colour": "red"}, "invalid_field"),
    ],
)
def test_bad_reminders_are_400s_naming_the_field(start: Start, body: dict[str, Any], code: str) -> None:
    handle, _ = start()
    response = handle.http.post("/api/sessions/cli:bad/reminders", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code


def test_too_many_reminders_for_one_session(start: Start) -> None:
    handle, _ = start(session={"max_reminders": 2})
    add(handle, "cli:busy", text="a", in_s=60)
    add(handle, "cli:busy", text="b", in_s=60)
    third = handle.http.post("/api/sessions/cli:busy/reminders", json={"text": "c", "in_s": 60})
    assert third.status_code == 400 and third.json()["error"]["code"] == "invalid_reminders"
    add(handle, "cli:other", text="elsewhere", in_s=60)


def test_deleting_a_session_deletes_its_reminders(start: Start) -> None:
    handle, _ = start()
    assert handle.send("cli:gone", "hi", wait=True).status_code == 200
    add(handle, "cli:gone", text="never", in_s=60)
    assert handle.http.delete("/api/sessions/cli:gone").status_code == 204
    assert handle.http.get("/api/reminders").json() == []


def test_a_fire_that_cannot_be_delivered_is_retried_without_spinning(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="netclaw.workers.scheduler")
    target = {"channel": "discord", "to": "123"}  # Discord is not running: no thread can be opened
    handle, clock = start(schedules={"ping": {"every_s": 3600, "text": "ping", "deliver": target}})
    clock.advance(3600)
    wait_until(lambda: caplog.records, what="the failed fire")
    waits = clock.waits
    # Asleep until the retry time, not spinning: a scheduler that spins never settles.
    wait_until(clock.settled, what="the scheduler to sleep until the retry")
    assert clock.waits - waits <= 1
    assert len(caplog.records) == 1 and "discord is not connected" in caplog.records[0].getMessage()
    [listed] = handle.http.get("/api/reminders").json()
    assert listed["next_fire"] == START + 3600  # still owed
    clock.advance(5)
    wait_until(lambda: len(caplog.records) == 2, what="the retry")


def test_a_paused_reminder_skips_its_times_and_resumes_from_the_next_one(start: Start) -> None:
    """Pausing (the control room's button): times that pass while paused are not fired
    later; resuming fires from the next scheduled time after now. A paused config reminder
    stays paused across a restart that reads the same config."""
    schedules = {"nightly": {"every_s": 3600, "text": "nightly report", "session": "cli:nightly"}}
    handle, clock = start(schedules=schedules)
    scheduler, io = handle.daemon.scheduler, handle.daemon.io
    assert scheduler is not None and io is not None
    sid = "cli:paused"
    created = add(handle, sid, text="water the plants", every_s="1h")
    assert io.run(scheduler.pause(created["id"])) and io.run(scheduler.pause("config:nightly"))
    assert not io.run(scheduler.pause("rem-missing"))
    clock.advance(3 * 3600)
    wait_until(clock.settled, what="the scheduler to look at three hours later")
    assert reminder_messages(handle, sid) == [] and reminder_messages(handle, "cli:nightly") == []
    resumed = io.run(scheduler.resume(created["id"]))
    assert resumed is not None and resumed.next_fire == clock.now() + 3600
    clock.advance(3600)
    wait_until(lambda: len(reminder_messages(handle, sid)) == 1, what="the first fire after resuming")
    handle.stop()
    handle, _ = start(clock, schedules=schedules)
    nightly = next(r for r in handle.http.get("/api/reminders").json() if r["id"] == "config:nightly")
    assert nightly["next_fire"] is None  # still paused
