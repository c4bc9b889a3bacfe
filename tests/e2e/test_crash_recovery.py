"""The acceptance flow: an acknowledged message survives a crash of the daemon.

"Acknowledged" is a 202 from ``POST /api/sessions/{id}/messages``: docs/http-api.md says the
message is durable then. The daemon runs as a subprocess and is killed with SIGKILL (no
shutdown code runs), then started again on the same data_dir.
"""

from __future__ import annotations

import collections
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import (
    DaemonProcess,
    Daemons,
    Setup,
    admitted_inputs,
    free_port,
    journal_rows,
    snapshot_count,
    subprocess_env,
    user_text,
    wait_until,
)
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread

pytestmark = pytest.mark.slow

SESSION = "cli:crash"


def settled(daemon: DaemonProcess, session_id: str, message_ids: list[str]) -> dict[str, Any] | None:
    """The session once every id in ``message_ids`` is in the transcript (not queued) and
    answered by an assistant message after it; else None."""
    session = daemon.session(session_id)
    messages = session["messages"]
    if any(m.get("pending") for m in messages):
        return None
    for mid in message_ids:
        at = next((i for i, m in enumerate(messages) if m["id"] == mid), None)
        if at is None or not any(m["role"] == "assistant" for m in messages[at + 1 :]):
            return None
    return session


def check_transcript(
    session: dict[str, Any], expected: list[tuple[str, str]], db_path: Any, session_id: str
) -> None:
    """``expected``: (message id, text) of every acknowledged message, in order. Each appears
    exactly once (by id and by content), answered by an echo of itself before the next one."""
    messages = session["messages"]
    users = [m for m in messages if m["role"] == "user"]
    by_id = collections.Counter(m["id"] for m in users)
    by_content = collections.Counter(m["content"] for m in users)
    for mid, text in expected:
        assert by_id[mid] == 1, f"acknowledged message {mid} ({text!r}) appears {by_id[mid]} times"
        assert by_content[text] == 1, f"user text {text!r} appears {by_content[text]} times"
    assert [m["id"] for m in users] == [mid for mid, _ in expected], "user messages out of order"
    for mid, text in expected:
        at = next(i for i, m in enumerate(messages) if m["id"] == mid)
        answer = messages[at + 1] if at + 1 < len(messages) else None
        assert answer is not None and answer["role"] == "assistant", f"{text!r} has no reply after it"
        assert answer["content"] == f"echo: {text}", f"{text!r} answered with {answer['content']!r}"

    admitted = admitted_inputs(db_path, session_id)
    ids = collections.Counter(m["id"] for m in admitted)
    contents = collections.Counter(m["content"] for m in admitted)
    assert [k for k, n in ids.items() if n > 1] == [], "duplicated InputAdmitted rows (by id)"
    assert [k for k, n in contents.items() if n > 1] == [], "duplicated InputAdmitted rows (by content)"
    assert [m["id"] for m in admitted] == [mid for mid, _ in expected]

    recorded = collections.Counter(r["message_id"] for r in journal_rows(db_path, session_id, "TurnRecorded"))
    assert all(recorded[mid] == 1 for mid, _ in expected), f"turns recorded per message: {recorded}"


@pytest.mark.parametrize(
    "setup",
    [{}, {"session": {"snapshot_interval": 2}}],
    indirect=True,
    ids=["replay", "from-snapshot"],
)
def test_sigkill_mid_turn_loses_nothing_and_resumes(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    first = start()
    expected: list[tuple[str, str]] = []
    replies: dict[str, str] = {}
    for text in ("first question", "second question", "third question"):
        response = first.post(SESSION, text, wait=True)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["reply"] == f"echo: {text}"
        expected.append((body["message_id"], text))
        replies[body["message_id"]] = body["reply"]

    # The next provider call hangs on the wire long enough for the kill to land mid-turn.
    scripted.enqueue(Reply(text="late", delay_s=5))
    seen_before = len(scripted.requests)
    slow_id = first.acked(SESSION, "slow one, interrupted by a crash")
    wait_until(
        lambda: any(
            user_text(r) == "slow one, interrupted by a crash" for r in scripted.requests[seen_before:]
        ),
        10,
        "the slow turn to reach the provider",
    )
    buffered_id = first.acked(SESSION, "buffered behind the slow one")
    queued = first.session(SESSION)["messages"]
    assert [m["id"] for m in queued if m.get("pending")] == [buffered_id]
    expected += [(slow_id, "slow one, interrupted by a crash"), (buffered_id, "buffered behind the slow one")]

    snapshots = snapshot_count(setup.db_path, SESSION)
    first.sigkill()
    assert scripted.pending() == 0  # the slow step was consumed by the killed daemon
    seen_at_crash = len(scripted.requests)

    # Restart and send nothing: the interrupted turn must resume on its own.
    second = start()
    session = wait_until(
        lambda: settled(second, SESSION, [slow_id, buffered_id]),
        20,
        "the interrupted turn and the buffered message to be answered after the restart",
    )
    check_transcript(session, expected, setup.db_path, SESSION)
    for mid, reply in replies.items():
        assert any(m["content"] == reply for m in session["messages"]), f"reply to {mid} lost"
    assert session["turns"] == 5
    # The from-snapshot variant recovers from a snapshot taken mid-conversation.
    assert (snapshots > 0) == ("snapshot_interval" in setup.config.read_text())

    after = [user_text(r) for r in scripted.requests[seen_at_crash:]]
    assert after == ["slow one, interrupted by a crash", "buffered behind the slow one"], (
        f"provider calls after the restart: {after} (a completed turn was re-run, or order is wrong)"
    )
    resumed = scripted.requests[seen_at_crash]
    contents = [m.get("content") for m in resumed["messages"] if m.get("role") == "user"]
    assert contents.count("slow one, interrupted by a crash") == 1
    assert "buffered behind the slow one" not in contents  # still queued when its turn ran


def test_sigkill_right_after_202_loses_nothing(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    expected: list[tuple[str, str]] = []
    for i in range(3):
        daemon = start()
        text = f"quick message {i}"
        expected.append((daemon.acked(SESSION, text, idempotency_key=f"key-{i}"), text))
        daemon.sigkill()

    final = start()
    # A client that lost the 202 in the crash retries with the same Idempotency-Key: it gets
    # the first message id back and nothing is admitted twice.
    for i, (mid, text) in enumerate(expected):
        retry = final.post(SESSION, text, idempotency_key=f"key-{i}")
        assert retry.status_code == 202, retry.text
        assert retry.json()["message_id"] == mid
        assert retry.json().get("duplicate") is True
    session = wait_until(
        lambda: settled(final, SESSION, [mid for mid, _ in expected]),
        20,
        "every acknowledged message to be answered",
    )
    check_transcript(session, expected, setup.db_path, SESSION)
    answered = [user_text(r) for r in scripted.requests]
    for _, text in expected:
        assert text in answered


def test_sigterm_stops_cleanly_and_restart_sees_everything(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    daemon = start()
    expected: list[tuple[str, str]] = []
    for text in ("before shutdown one", "before shutdown two"):
        body = daemon.post(SESSION, text, wait=True).json()
        assert body["reply"] == f"echo: {text}"
        expected.append((body["message_id"], text))
    # A turn in flight when SIGTERM arrives must neither block the stop nor be lost.
    scripted.enqueue(Reply(text="never delivered", delay_s=30))
    seen_before = len(scripted.requests)
    expected.append((daemon.acked(SESSION, "in flight at shutdown"), "in flight at shutdown"))
    wait_until(
        lambda: any(user_text(r) == "in flight at shutdown" for r in scripted.requests[seen_before:]),
        10,
        "the in-flight turn to reach the provider",
    )

    code, took = daemon.sigterm(timeout=8)
    assert code == 0, f"exit code {code} after SIGTERM ({took:.1f}s):\n{daemon.stderr()}"
    assert took < 5, f"SIGTERM took {took:.1f}s to stop the daemon"
    log = daemon.stderr()
    assert "Traceback" not in log, log
    assert "survived shutdown" not in log, log
    assert [ln for ln in log.splitlines() if " ERROR " in ln] == [], log

    again = start()
    session = wait_until(
        lambda: settled(again, SESSION, [mid for mid, _ in expected]),
        20,
        "the restarted daemon to finish the interrupted turn",
    )
    check_transcript(session, expected, setup.db_path, SESSION)
    listed = again.sessions()
    assert [s["id"] for s in listed] == [SESSION]
    assert listed[0]["turns"] == 3 and listed[0]["title"]


def test_sigterm_with_a_waiting_client_stops_promptly(
    scripted: ScriptedOpenAIThread, setup: Setup, start: Callable[[], DaemonProcess]
) -> None:
    """What `netclaw chat -p` does: POST ?wait=1 and wait for the turn. A SIGTERM then must
    still stop the daemon within a few seconds, cleanly, and the message must survive."""
    daemon = start()
    scripted.enqueue(Reply(text="never delivered", delay_s=30))
    answer: dict[str, Any] = {}

    def wait_for_reply() -> None:
        try:
            response = daemon.post(SESSION, "asked just before shutdown", wait=True, timeout=40)
            answer["status"] = response.status_code
        except httpx.HTTPError as exc:
            answer["error"] = repr(exc)

    waiter = threading.Thread(target=wait_for_reply, daemon=True)
    waiter.start()
    wait_until(
        lambda: any(user_text(r) == "asked just before shutdown" for r in scripted.requests),
        10,
        "the turn to reach the provider",
    )
    code, took = daemon.sigterm(timeout=6)
    assert code == 0, f"exit code {code} after {took:.1f}s:\n{daemon.stderr()}"
    assert took < 5, f"SIGTERM took {took:.1f}s to stop the daemon"
    waiter.join(5)
    assert answer, "the waiting client got neither an answer nor a closed connection"
    log = daemon.stderr()
    assert "shutdown: could not" not in log, log
    assert "survived shutdown" not in log, log
    assert "never retrieved" not in log, log

    again = start()
    session = wait_until(
        lambda: settled(again, SESSION, [m["id"] for m in admitted_inputs(setup.db_path, SESSION)]),
        20,
        "the interrupted turn to be answered after the restart",
    )
    assert [m["content"] for m in session["messages"]] == [
        "asked just before shutdown",
        "echo: asked just before shutdown",
    ]


def test_second_daemon_on_same_data_dir_refuses(
    setup: Setup, start: Callable[[], DaemonProcess], daemons: Daemons
) -> None:
    first = start()
    assert first.post(SESSION, "hello", wait=True).status_code == 200

    # Same config file, but another port (through the environment), so only the data_dir
    # is shared and the failure cannot be a port clash.
    other_port = free_port()
    second = daemons.spawn(
        setup.config,
        setup.data_dir,
        other_port,
        env=subprocess_env(NETCLAW_GATEWAY__PORT=str(other_port)),
    )
    try:
        code = second.proc.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second daemon started on a data_dir in use:\n{second.stderr()}")
    err = second.stderr()
    assert code != 0, err
    assert "lock" in err.lower() or "already" in err.lower(), err
    assert str(setup.data_dir) in err, f"the message does not name the data dir:\n{err}"
    assert "Traceback" not in err, err

    # The first daemon is unharmed and still writes.
    assert first.alive()
    response = first.post(SESSION, "still here", wait=True)
    assert response.status_code == 200 and response.json()["reply"] == "echo: still here"
