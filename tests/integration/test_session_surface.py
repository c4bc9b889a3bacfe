"""The gateway as the one session surface, against the real daemon: subscriptions that
never wake a stopped session and never hang on a broken one, a broken session that
restarts by itself while it owes a reply, a write whose outcome is unknown, and CPU
work kept off the I/O loop."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from netclaw import outputs as out
from netclaw.history import tokens
from netclaw.sessions import SessionState
from netclaw.sessions._core.journal import snapshot as _snapshot
from netclaw.sessions._shell import recorder as _recorder
from netclaw.sessions._shell import recovery as _recovery
from tests.conftest import DaemonHandle
from tests.fakes.faulty_journal import JournalFaults, has
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread
from tests.integration.test_sse import SseStream, sse_streams

T = TypeVar("T")
StartDaemon = Callable[..., DaemonHandle]
LOOP_THREAD = "netclaw-io"


@pytest.fixture
def sse() -> Iterator[Callable[..., SseStream]]:
    yield from sse_streams()


def on_loop(handle: DaemonHandle, make: Callable[[], Awaitable[T]], timeout: float = 10) -> T:
    assert handle.daemon.io is not None

    async def run() -> T:
        return await make()

    return handle.daemon.io.run(run(), timeout)


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)
    return value


def started(handle: DaemonHandle) -> int:
    assert handle.daemon.manager is not None
    return handle.daemon.manager.started


def resident(handle: DaemonHandle, session_id: str) -> bool:
    assert handle.daemon.manager is not None
    manager = handle.daemon.manager
    return on_loop(handle, lambda: _value(manager.is_resident(session_id)))


async def _value(value: T) -> T:
    return value


def replies(handle: DaemonHandle, session_id: str) -> list[str]:
    return [m["content"] for m in handle.transcript(session_id) if m["role"] == "assistant"]


# -- subscriptions ------------------------------------------------------------------------------


def test_closing_a_subscription_after_its_session_stopped_does_not_wake_it(daemon: DaemonHandle) -> None:
    sid = "cli:closed-late"
    assert daemon.send(sid, "one", wait=True).status_code == 200
    gateway, manager = daemon.daemon.gateway, daemon.daemon.manager
    assert gateway is not None and manager is not None

    subscription = on_loop(daemon, lambda: _value(gateway.reads.subscribe(sid, out.OutputFilter.TEXT)))
    assert isinstance(on_loop(daemon, lambda: subscription.get(5)), out.Joined)
    # The session breaks (nothing owed, so it stays down) and takes its subscribers with it.
    JournalFaults(daemon).fail_when = has("InputAdmitted")
    assert daemon.send(sid, "two").status_code == 503
    error = on_loop(daemon, lambda: subscription.get(5))
    assert isinstance(error, out.Error) and error.code == "session_failed"
    assert on_loop(daemon, lambda: subscription.get(5)) is None
    assert subscription.ended

    before = started(daemon)
    on_loop(daemon, lambda: _value(subscription.close()))
    time.sleep(0.3)  # absence is the behaviour here: closing does not wake the session
    assert started(daemon) == before, "closing the subscription recovered the session"
    assert not resident(daemon, sid)


def test_an_sse_client_leaving_a_stopped_session_does_not_wake_it(
    daemon: DaemonHandle, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:sse-left"
    assert daemon.send(sid, "one", wait=True).status_code == 200
    stream = sse(daemon, sid)
    stream.wait_joined()
    before = started(daemon)
    JournalFaults(daemon).fail_when = has("InputAdmitted")
    assert daemon.send(sid, "two").status_code == 503
    stream.wait_finished()
    time.sleep(0.3)  # absence is the behaviour here: the client leaving does not wake the session
    assert started(daemon) == before
    assert not resident(daemon, sid)


def test_a_subscription_to_a_broken_session_ends_with_an_error(
    daemon: DaemonHandle, sse: Callable[..., SseStream]
) -> None:
    sid = "cli:corrupt"
    db = sqlite3.connect(daemon.daemon.settings.database_path)
    with db:
        db.execute(
            "INSERT INTO events (persistence_id, seq, type, payload, ts) VALUES (?, 1, 'InputAdmitted', '{', 0)",
            (sid,),
        )
    db.close()
    stream = sse(daemon, sid)
    error = stream.wait_event("error")
    assert error["code"] == "session_failed"
    assert "cannot decode" in error["message"]
    stream.wait_finished()  # not an open stream of keep-alives


def test_a_subscription_sees_one_typed_output_stream(
    daemon: DaemonHandle, scripted: ScriptedOpenAIThread
) -> None:
    sid = "cli:typed"
    gateway = daemon.daemon.gateway
    assert gateway is not None
    scripted.enqueue(Reply(text="hello there, one two three four five"))

    async def watch() -> list[out.Output]:
        subscription = gateway.reads.subscribe(sid, out.OutputFilter.TEXT | out.OutputFilter.TEXT_STREAMING)
        seen: list[out.Output] = []
        try:
            async for output in subscription:
                seen.append(output)
                if isinstance(output, out.Joined):
                    await gateway.intake.submit(__import__("netclaw.gateway").gateway.Inbound(sid, "hi"))
                if isinstance(output, out.TurnCompleted):
                    return seen
        finally:
            subscription.close()
        return seen

    seen = on_loop(daemon, watch)
    kinds = [type(o) for o in seen]
    assert kinds[0] is out.Joined
    text = next(o for o in seen if isinstance(o, out.Text))
    streamed = "".join(o.delta for o in seen if isinstance(o, out.TextDelta))
    assert streamed == text.text == "hello there, one two three four five"
    completed = seen[-1]
    assert isinstance(completed, out.TurnCompleted)
    assert completed.status == "completed"
    user = [m for m in daemon.transcript(sid) if m["role"] == "user"]
    assert completed.message_id == user[0]["id"]


# -- a broken session -------------------------------------------------------------------------


def test_a_session_that_broke_while_owing_a_reply_restarts_by_itself(daemon: DaemonHandle) -> None:
    sid = "cli:restarts"
    faults = JournalFaults(daemon)
    faults.fail_when = has("TurnRecorded")  # the reply cannot be recorded: the actor breaks
    assert daemon.send(sid, "one").status_code == 202
    wait_until(lambda: faults.failed == 1)
    # Nobody sends anything else: the session comes back on its own and answers.
    wait_until(lambda: replies(daemon, sid) == ["echo: one"], timeout=8)
    assert daemon.daemon.manager is not None
    assert daemon.daemon.manager.restarts == 1
    rows = [(m["role"], m["content"]) for m in daemon.transcript(sid)]
    assert rows == [("user", "one"), ("assistant", "echo: one")]


def test_a_session_without_pending_input_is_not_restarted_after_breaking(daemon: DaemonHandle) -> None:
    sid = "cli:no-restart"
    assert daemon.send(sid, "one", wait=True).status_code == 200
    faults = JournalFaults(daemon)
    faults.fail_when = has("InputAdmitted")  # the next message is refused: nothing is owed
    assert daemon.send(sid, "two").status_code == 503
    # A witness that breaks after it owing a reply: once that one restarted, the look at the
    # first (on the same first backoff, due before) found nothing owed.
    faults.fail_when = has("TurnRecorded")
    assert daemon.send("cli:owes", "one").status_code == 202
    wait_until(lambda: replies(daemon, "cli:owes") == ["echo: one"], timeout=8)
    assert daemon.daemon.manager is not None
    assert daemon.daemon.manager.restarts == 1  # the witness only
    assert not resident(daemon, sid)


def test_a_write_whose_outcome_is_unknown_can_be_retried_with_the_key_it_names(
    daemon: DaemonHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = "cli:unknown"
    monkeypatch.setattr(_recorder, "PERSIST_TIMEOUT_S", 0.3)
    faults = JournalFaults(daemon)
    faults.delay_first_s = 1.0  # the message is durable, but the actor is not told in time
    first = daemon.send(sid, "hello")
    assert first.status_code == 503, first.text
    body = first.json()
    assert body["error"]["code"] == "outcome_unknown"
    key = body["idempotency_key"]
    assert key in body["error"]["message"]

    assert faults.answered_late.wait(5)  # the write's answer came back meanwhile
    again = daemon.send(sid, "hello", headers={"Idempotency-Key": key})
    assert again.status_code == 202, again.text
    assert again.json()["duplicate"] is True
    wait_until(lambda: replies(daemon, sid) == ["echo: hello"], timeout=8)
    users = [m["content"] for m in daemon.transcript(sid) if m["role"] == "user"]
    assert users == ["hello"]  # recorded once


# -- CPU work off the I/O loop ------------------------------------------------------------------


def test_recovery_and_api_reads_decode_off_the_loop(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = start_daemon(
        session={"snapshot_interval": 1, "idle_timeout_s": 0.3, "passivation_grace_s": 0.05}
    )
    sid = "cli:decode"
    assert handle.send(sid, "one", wait=True).status_code == 200
    wait_until(lambda: not resident(handle, sid), timeout=5)

    threads: list[str] = []
    real_from_snapshot = _snapshot.decode
    real_decode = _recovery.decode

    def from_snapshot(text: str, rows: Any) -> SessionState:
        threads.append(threading.current_thread().name)
        return real_from_snapshot(text, rows)

    def decode(type_name: str, payload: str) -> Any:
        threads.append(threading.current_thread().name)
        return real_decode(type_name, payload)

    monkeypatch.setattr(_snapshot, "decode", from_snapshot)
    monkeypatch.setattr(_recovery, "decode", decode)
    assert handle.send(sid, "two", wait=True).status_code == 200  # recovers from the snapshot
    assert handle.http.get(f"/api/sessions/{sid}").status_code == 200  # an API read
    assert threads, "nothing was decoded"
    assert LOOP_THREAD not in threads


def test_the_token_encoding_is_loaded_before_any_session_runs(
    start_daemon: StartDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    real = tokens._load_offline_encoding  # noqa: SLF001 - observed where it runs

    def load() -> Any:
        loads.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(tokens, "_load_offline_encoding", load)
    handle = start_daemon()
    assert handle.send("cli:tokens", "one", wait=True).status_code == 200
    assert loads, "the encoding was never asked for"
    assert LOOP_THREAD not in loads
    assert loads[0] == threading.current_thread().name  # at start-up, by the starting thread


def test_a_chat_permit_only_admits_to_its_own_platforms_sessions(daemon: DaemonHandle) -> None:
    from netclaw.errors import InvalidInput
    from netclaw.gateway import Inbound
    from netclaw.security.policy import ChatEvent

    gateway = daemon.daemon.gateway
    assert gateway is not None
    daemon.daemon.live.reload(
        daemon.daemon.settings.model_copy(
            update={"slack": daemon.daemon.settings.slack.model_copy(update={"channels": ["C1"]})}
        )
    )
    permit = gateway.chat.permit(ChatEvent(platform="slack", channel_id="C1", user_id="U1", mentioned=True))
    assert permit is not None
    assert (
        gateway.chat.permit(ChatEvent(platform="slack", channel_id="C2", user_id="U1", mentioned=True))
        is None
    )
    with pytest.raises(InvalidInput, match="cannot go to session"):
        on_loop(daemon, lambda: gateway.chat.submit_chat(permit, Inbound("cli:elsewhere", "hi")))
    admission = on_loop(daemon, lambda: gateway.chat.submit_chat(permit, Inbound("slack:C1:1.0", "hi")))
    assert admission.session_id == "slack:C1:1.0"
