"""The Slack adapter end to end: the real daemon, the real slack-bolt/slack-sdk stack, and
a local fake of Slack's Web API and Socket Mode WebSocket (tests/fakes/slack_api.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import httpx
import pytest

from adapters.slack import SlackAdapter
from netclaw.errors import AdapterError
from tests.conftest import DaemonHandle
from tests.fakes.scripted_openai import ErrorReply, Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, BOT_USER_ID, FakeSlackThread

T = TypeVar("T")
MENTION = f"<@{BOT_USER_ID}>"

StartSlack = Callable[..., tuple[DaemonHandle, SlackAdapter]]


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def on_loop(handle: DaemonHandle, fn: Callable[[], T]) -> T:
    """Run ``fn`` on the daemon's I/O loop (where the adapter's state lives)."""

    async def call() -> T:
        return fn()

    assert handle.daemon.io is not None
    return handle.daemon.io.run(call(), 10)


def run(handle: DaemonHandle, coro: Coroutine[Any, Any, T]) -> T:
    assert handle.daemon.io is not None
    return handle.daemon.io.run(coro, 30)


@pytest.fixture
def fake_slack() -> Iterator[FakeSlackThread]:
    with FakeSlackThread() as fake:
        yield fake


@pytest.fixture
def start_slack(
    fake_slack: FakeSlackThread,
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[StartSlack]:
    """Start a daemon with Slack enabled against the fake; returns it and its adapter."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    ours: list[tuple[DaemonHandle, SlackAdapter]] = []

    def start(sections: dict[str, Any] | None = None, **slack: Any) -> tuple[DaemonHandle, SlackAdapter]:
        config = {"enabled": True, "channels": ["C1"], "api_url": fake_slack.api_url, **slack}
        handle = start_daemon(slack=config, **(sections or {}))
        adapter = next(
            (a for a in getattr(handle.daemon, "adapters", []) if isinstance(a, SlackAdapter)), None
        )
        if adapter is None:  # a daemon that does not start adapters itself
            assert handle.daemon.gateway is not None
            adapter = SlackAdapter(handle.daemon.settings, handle.daemon.gateway.chat)
            adapter.check()
            run(handle, adapter.start())
            ours.append((handle, adapter))
        assert adapter.status().state == "running", adapter.status()
        return handle, adapter

    yield start
    for handle, adapter in ours:  # before the daemon (and the fake) stop
        run(handle, adapter.stop())


def reply_in(fake: FakeSlackThread, channel: str, thread_ts: str, text: str) -> list[dict[str, Any]]:
    """Wait until the thread's bot messages end with one showing ``text``."""
    return wait_for(
        lambda: (msgs := fake.bot_messages(channel, thread_ts)) and msgs[-1]["text"] == text and msgs,
        f"reply {text[:40]!r} in {channel}/{thread_ts}",
    )


def user_texts(handle: DaemonHandle, session_id: str) -> list[str]:
    return [m["content"] for m in handle.transcript(session_id) if m["role"] == "user"]


def session_ids(handle: DaemonHandle) -> list[str]:
    response = handle.http.get("/api/sessions")
    response.raise_for_status()
    return sorted(s["id"] for s in response.json())


def all_acked(fake: FakeSlackThread) -> None:
    wait_for(
        lambda: {a["envelope_id"] for a in fake.acks} >= {e["envelope_id"] for e in fake.server.envelopes},
        "every envelope acknowledged",
    )


# --------------------------------------------------------------------------- threads and sessions


def test_mention_starts_thread_session_and_thread_reply_continues_it(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _adapter = start_slack()

    ts, envelopes = fake_slack.say("C1", f"{MENTION} hello there")
    assert [e["payload"]["event"]["type"] for e in envelopes] == ["app_mention", "message"]
    reply_in(fake_slack, "C1", ts, "echo: hello there")
    session_id = f"slack:C1:{ts}"
    assert user_texts(handle, session_id) == ["hello there"]  # the mention is stripped
    # The bot answers in the thread, and marks the message while working on it.
    (post,) = [c for c in fake_slack.calls_of("chat.postMessage") if c.status == 200]
    assert post.args["thread_ts"] == ts and post.args["channel"] == "C1"
    wait_for(lambda: fake_slack.calls_of("reactions.remove"), "the reaction removed")
    assert [c.args["timestamp"] for c in fake_slack.calls_of("reactions.add")] == [ts]
    assert fake_slack.find("C1", ts)["reactions_by_bot"] == []  # type: ignore[index]

    # A reply in the thread continues the session without a mention.
    fake_slack.say("C1", "and a follow-up", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: and a follow-up")
    assert user_texts(handle, session_id) == ["hello there", "and a follow-up"]
    assert len(scripted.requests) == 2  # the mention's twin `message` event started no turn
    all_acked(fake_slack)
    assert session_ids(handle) == [session_id]


def test_mention_gating_and_allowlists(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _adapter = start_slack(users=["U1"])

    fake_slack.say("C1", "no mention, not in a thread")
    loose, _ = fake_slack.say("C1", "also not for the bot", user="U1")
    fake_slack.say("C1", "a reply in a thread that is no session", thread_ts=loose)
    fake_slack.say("C2", f"{MENTION} a channel not in the allowlist")
    fake_slack.say("C1", f"{MENTION} a user not in the allowlist", user="U2")
    fake_slack.say("D1", "a direct message with allow_dms off", channel_type="im")
    all_acked(fake_slack)
    # Said after all of them: once it is answered (a whole turn later), they were seen.
    ok, _ = fake_slack.say("C1", f"{MENTION} allowed")
    reply_in(fake_slack, "C1", ok, "echo: allowed")
    assert len(scripted.requests) == 1
    assert session_ids(handle) == [f"slack:C1:{ok}"]
    assert len([c for c in fake_slack.calls_of("chat.postMessage") if c.status == 200]) == 1


def test_direct_messages_when_allowed(start_slack: StartSlack, fake_slack: FakeSlackThread) -> None:
    handle, _adapter = start_slack(allow_dms=True)
    ts, _ = fake_slack.say("D1", "hi in private", channel_type="im")
    reply_in(fake_slack, "D1", ts, "echo: hi in private")
    assert session_ids(handle) == [f"slack:D1:{ts}"]


def test_redelivered_event_starts_one_turn(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, adapter = start_slack()
    ts, envelopes = fake_slack.say("C1", f"{MENTION} only once")
    reply_in(fake_slack, "C1", ts, "echo: only once")
    mention = envelopes[0]

    fake_slack.redeliver(mention)  # caught by the adapter's recent-event set
    on_loop(handle, adapter.forget_recent_events)  # as after a restart: only the session remembers
    fake_slack.redeliver(mention)
    all_acked(fake_slack)
    # A reply in the thread after it: the session takes its input in order, so once this is
    # answered, a turn the redelivery would have started has run.
    fake_slack.say("C1", "and then?", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: and then?")

    assert len(scripted.requests) == 2
    assert len(fake_slack.bot_messages("C1", ts)) == 2
    assert user_texts(handle, f"slack:C1:{ts}") == ["only once", "and then?"]
    assert len([c for c in fake_slack.calls_of("reactions.add") if c.args["timestamp"] == ts]) == 1


# --------------------------------------------------------------------------- rendering


def test_streaming_posts_then_edits_at_most_once_a_second(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    _handle, _adapter = start_slack()
    text = " ".join(f"word{i}" for i in range(60))
    scripted.enqueue(Reply(text=text, chunk_size=20, chunk_delay_s=0.08))  # ~2.2 s of deltas
    ts, _ = fake_slack.say("C1", f"{MENTION} stream please")
    (message,) = reply_in(fake_slack, "C1", ts, text)

    posts = [c for c in fake_slack.calls_of("chat.postMessage") if c.status == 200]
    updates = [c for c in fake_slack.calls_of("chat.update") if c.status == 200]
    assert len(posts) == 1 and len(text) > len(posts[0].args["text"]) > 0  # posted on the first delta
    assert all(u.args["ts"] == message["ts"] for u in updates)
    streaming_s = updates[-1].at - posts[0].at
    assert 2 <= len(updates) <= streaming_s / 0.9 + 2, [u.args["text"] for u in updates]
    streamed = [u.at for u in updates[:-1]]  # the final edit is not throttled
    assert all(b - a >= 0.9 for a, b in zip([posts[0].at, *streamed], streamed, strict=False))
    assert updates[-1].args["text"] == text
    assert message["edits"][0] == posts[0].args["text"]  # the message grew in place


def test_long_reply_is_split_at_paragraphs(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    _handle, _adapter = start_slack()
    paragraphs = [f"Paragraph {i:02d}. " + "lorem ipsum " * 24 for i in range(30)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    assert 8500 < len(text) < 9500
    scripted.enqueue(Reply(text=text, chunk_size=1500, chunk_delay_s=0.02))
    ts, _ = fake_slack.say("C1", f"{MENTION} write a lot")

    def three() -> list[dict[str, Any]]:
        msgs = fake_slack.bot_messages("C1", ts)
        return msgs if len(msgs) == 3 and "\n\n".join(m["text"] for m in msgs) == text else []

    messages = wait_for(three, "the reply in three messages")
    for message in messages:
        assert len(message["text"]) <= 4000
        assert message["text"].startswith("Paragraph ") and message["text"].endswith("ipsum")


def test_rate_limited_edit_is_retried_after_retry_after(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    _handle, _adapter = start_slack()
    text = "first part of the answer, then the rest of it."
    scripted.enqueue(Reply(text=text, chunk_size=24, chunk_delay_s=0.2))
    fake_slack.fail_next("chat.update", retry_after=1)
    ts, _ = fake_slack.say("C1", f"{MENTION} hurry")
    reply_in(fake_slack, "C1", ts, text)

    updates = fake_slack.calls_of("chat.update")
    assert [u.status for u in updates][:2] == [429, 200]
    assert updates[1].at - updates[0].at >= 0.95
    assert len([c for c in fake_slack.calls_of("chat.postMessage") if c.status == 200]) == 1


def test_lost_post_answer_is_not_posted_twice(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    _handle, _adapter = start_slack()
    fake_slack.drop_next("chat.postMessage")
    ts, _ = fake_slack.say("C1", f"{MENTION} are you there?")
    # The fake stored the post before dropping its answer; wait for the turn to be done.
    wait_for(lambda: fake_slack.calls_of("reactions.remove"), "the turn completed")
    (message,) = reply_in(fake_slack, "C1", ts, "echo: are you there?")

    (lookup,) = fake_slack.calls_of("conversations.replies")
    assert lookup.args["ts"] == ts
    (post,) = fake_slack.calls_of("chat.postMessage")  # one post, whose answer was lost
    assert post.status == 0
    assert message["metadata"]["event_payload"]["marker"]


def test_provider_error_becomes_a_readable_note(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    _handle, _adapter = start_slack()
    scripted.enqueue(ErrorReply(status=400, message="the model refused the request"))
    ts, _ = fake_slack.say("C1", f"{MENTION} break")
    (note,) = wait_for(lambda: fake_slack.bot_messages("C1", ts), "an error note")
    assert note["text"].startswith(":warning: Sorry, that did not work:")
    wait_for(lambda: fake_slack.calls_of("reactions.remove"), "the reaction removed")


# --------------------------------------------------------------------------- subscriptions


def test_idle_session_is_let_go_and_resubscribed(
    start_slack: StartSlack, fake_slack: FakeSlackThread
) -> None:
    handle, adapter = start_slack()
    assert adapter.renderer is not None
    adapter.renderer.options = replace(adapter.renderer.options, release_after_s=0.3)
    ts, _ = fake_slack.say("C1", f"{MENTION} one")
    reply_in(fake_slack, "C1", ts, "echo: one")
    wait_for(lambda: on_loop(handle, adapter.following) == [], "the subscription let go")

    fake_slack.say("C1", "two", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: two")


def test_turn_interrupted_by_a_restart_still_answers_in_the_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _adapter = start_slack()
    scripted.enqueue(Reply(hang=True))
    ts, _ = fake_slack.say("C1", f"{MENTION} a long question")
    wait_for(lambda: scripted.requests, "the provider call")
    wait_for(lambda: fake_slack.calls_of("reactions.add"), "the reaction")
    handle.stop()  # mid-turn
    assert fake_slack.find("C1", ts)["reactions_by_bot"] == []  # type: ignore[index]

    start_slack()  # the same data_dir: the session resumes its turn
    reply_in(fake_slack, "C1", ts, "echo: a long question")


def test_socket_reconnect_keeps_sessions_talking(
    start_slack: StartSlack, fake_slack: FakeSlackThread
) -> None:
    handle, adapter = start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} before")
    reply_in(fake_slack, "C1", ts, "echo: before")
    assert on_loop(handle, adapter.following) == [f"slack:C1:{ts}"]

    fake_slack.close_socket()
    wait_for(lambda: fake_slack.connections == 2, "a second Socket Mode connection")
    assert len(fake_slack.calls_of("apps.connections.open")) == 2
    fake_slack.say("C1", "after", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: after")

    fake_slack.request_disconnect()  # Slack's "refresh_requested"
    wait_for(lambda: fake_slack.connections == 3, "a third Socket Mode connection")
    fake_slack.say("C1", "and again", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: and again")
    assert on_loop(handle, adapter.following) == [f"slack:C1:{ts}"]


# --------------------------------------------------------------------------- configuration


def test_missing_token_disables_the_adapter_and_the_daemon_keeps_serving(
    fake_slack: FakeSlackThread,
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    handle = start_daemon(slack={"enabled": True, "channels": ["C1"], "api_url": fake_slack.api_url})
    assert handle.daemon.gateway is not None

    adapter = SlackAdapter(handle.daemon.settings, handle.daemon.gateway.chat)
    with pytest.raises(AdapterError, match="SLACK_BOT_TOKEN"):
        adapter.check()
    assert not [a for a in getattr(handle.daemon, "adapters", []) if isinstance(a, SlackAdapter)]

    health = httpx.get(f"{handle.base_url}/healthz", timeout=5)
    assert health.status_code == 503  # an enabled channel is down: degraded, and why
    body = health.json()
    assert body["status"] == "degraded" and "adapter slack is disabled" in body["reason"]
    slack_status = body["adapters"]["slack"]
    assert slack_status["state"] in ("disabled", "failed")
    assert "SLACK_BOT_TOKEN" in slack_status.get("detail", "")
    reply = handle.send("cli:still-here", "ping", wait=True)
    assert reply.status_code == 200 and reply.json()["reply"] == "echo: ping"
    assert not fake_slack.calls_of("apps.connections.open")


def test_wrong_app_token_fails_start_with_a_clear_error(
    fake_slack: FakeSlackThread,
    start_daemon: Callable[..., DaemonHandle],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("NETCLAW_TEST_APP_TOKEN", "xapp-not-the-right-one")
    handle = start_daemon(
        slack={
            "enabled": True,
            "channels": ["C1"],
            "api_url": fake_slack.api_url,
            "app_token_env": "NETCLAW_TEST_APP_TOKEN",
        }
    )
    assert handle.daemon.gateway is not None
    adapter = SlackAdapter(handle.daemon.settings, handle.daemon.gateway.chat)
    adapter.check()
    with pytest.raises(AdapterError, match="NETCLAW_TEST_APP_TOKEN"):
        run(handle, adapter.start())
    assert adapter.status().state == "failed"
    run(handle, adapter.stop())


# --------------------------------------------------------------------------- files and buttons


def test_files_and_approval_buttons_through_the_real_web_api(
    start_slack: StartSlack, fake_slack: FakeSlackThread, caplog: pytest.LogCaptureFixture
) -> None:
    from adapters.chat import Button, Conversation

    handle, adapter = start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} hello")
    reply_in(fake_slack, "C1", ts, "echo: hello")
    assert adapter.renderer is not None
    port = adapter.renderer.port
    to = Conversation("C1", ts)

    file_id = run(handle, port.upload(to, "report.csv", b"a,b\n1,2\n", "text/csv"))
    assert fake_slack.server.files[file_id]["data"] == b"a,b\n1,2\n"
    [shared] = [m for m in fake_slack.bot_messages("C1", ts) if m.get("files")]
    assert shared["files"][0]["name"] == "report.csv"

    buttons = [Button("approve", "Approve", "ap_1", "primary"), Button("deny", "Deny", "ap_1", "danger")]
    asked = run(handle, port.post_buttons(to, "May I run shell?", buttons, key="k1"))
    message = fake_slack.find("C1", asked)
    assert message is not None
    [section, actions] = message["blocks"]
    assert section["text"]["text"] == "May I run shell?"
    assert [(e["action_id"], e["value"], e.get("style")) for e in actions["elements"]] == [
        ("netclaw_approve", "ap_1", "primary"),
        ("netclaw_deny", "ap_1", "danger"),
    ]
    # A press is acknowledged and reaches the renderer; nothing waits under "ap_1", so the
    # person who pressed is told so, and only they see it.
    pressed = fake_slack.click("C1", asked, "netclaw_deny", "ap_1", user="U7")
    wait_for(lambda: pressed["envelope_id"] in {a["envelope_id"] for a in fake_slack.acks}, "the ack")
    [told] = wait_for(lambda: fake_slack.server.ephemeral, "the ephemeral answer")
    assert told["user"] == "U7" and told["channel"] == "C1" and "no longer pending" in told["text"]
    run(handle, port.edit(to, asked, "shell: approve by U1"))
    message = fake_slack.find("C1", asked)
    assert message is not None
    assert message["text"] == "shell: approve by U1"
    assert [b["type"] for b in message["blocks"]] == ["section"]  # the buttons are gone


def test_commands_after_a_mention_answer_in_the_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _adapter = start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} hello")
    reply_in(fake_slack, "C1", ts, "echo: hello")
    fake_slack.say("C1", "/status", thread_ts=ts)
    wait_for(
        lambda: any(m["text"].startswith("Model scripted") for m in fake_slack.bot_messages("C1", ts)),
        "the status notice",
    )
    fake_slack.say("C1", f"{MENTION} !help", thread_ts=ts)
    wait_for(
        lambda: any(
            "Commands (" in m["text"] and "\n/stop" in m["text"] for m in fake_slack.bot_messages("C1", ts)
        ),
        "the help",
    )
    assert len(scripted.requests) == 1
    assert user_texts(handle, f"slack:C1:{ts}") == ["hello"]
    assert len(fake_slack.calls_of("reactions.add")) == 1  # commands are not marked as work


def test_an_approval_decided_by_a_button_press_in_the_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    sections = {"audiences": {"team": {"approve": ["current_time"], "approvers": ["U1"]}}}
    handle, _ = start_slack(sections)
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    ts, _ = fake_slack.say("C1", f"{MENTION} what time is it?")
    asked = wait_for(
        lambda: [m for m in fake_slack.bot_messages("C1", ts) if m.get("blocks")], "the approval buttons"
    )[0]
    assert "May I run current_time?" in asked["text"]
    approve = next(e for e in asked["blocks"][1]["elements"] if e["action_id"] == "netclaw_approve")

    # Someone who is not an approver is refused, privately; nothing runs.
    fake_slack.click("C1", asked["ts"], "netclaw_approve", approve["value"], user="U7")
    [told] = wait_for(lambda: fake_slack.server.ephemeral, "the refusal")
    assert told["user"] == "U7" and "may not decide" in told["text"]
    assert told["thread_ts"] == ts
    assert handle.http.get(f"/api/sessions/slack:C1:{ts}/approvals").json()  # still pending

    fake_slack.click("C1", asked["ts"], "netclaw_approve", approve["value"], user="U1")
    reply_in(fake_slack, "C1", ts, "it is late")
    shown = fake_slack.find("C1", asked["ts"])
    assert shown is not None and shown["text"].startswith("current_time: approve by")
    assert [b["type"] for b in shown["blocks"]] == ["section"]  # the buttons are gone
    results = [m for m in handle.transcript(f"slack:C1:{ts}") if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"]


# --------------------------------------------------------------------------- the outbox


def delivered_rows(handle: DaemonHandle, session_id: str) -> list[dict[str, Any]]:
    import json
    import sqlite3

    conn = sqlite3.connect(handle.daemon.settings.database_path)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE persistence_id = ? AND type = 'ReplyDelivered' ORDER BY seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(p) for (p,) in rows]


def test_a_reply_nobody_watched_is_posted_in_its_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread
) -> None:
    """A reminder fires in a Slack thread no renderer follows: the outbox posts the reply."""
    handle, adapter = start_slack()
    root, _ = fake_slack.say("C1", "deploys go here")  # not a session yet, nobody follows it
    sid = f"slack:C1:{root}"
    assert adapter.renderer is not None and sid not in adapter.renderer.following()
    answer = handle.http.post(
        f"/api/sessions/{sid}/reminders", json={"text": "check the deploy", "in_s": 0.2}
    )
    assert answer.status_code == 201, answer.text
    [posted] = wait_for(lambda: fake_slack.bot_messages("C1", root), "the reply in the thread")
    assert "check the deploy" in posted["text"]  # the scripted provider echoes
    wait_for(lambda: delivered_rows(handle, sid), "the delivery record")
    [record] = delivered_rows(handle, sid)
    assert record["turn"] == 1 and record["message_ids"] == [posted["ts"]]
    time.sleep(0.3)  # absence is the behaviour here: posted once, no late second post
    assert len(fake_slack.bot_messages("C1", root)) == 1


def test_a_reply_recorded_but_never_posted_is_posted_once_after_a_restart(
    start_slack: StartSlack, fake_slack: FakeSlackThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon dies after the turn is recorded and before the post: the next start posts it."""
    from adapters.chat import _renderer

    handle, _ = start_slack()
    with monkeypatch.context() as crashed:
        original = _renderer.ChatRenderer._render  # noqa: SLF001 - the crash is injected here

        async def dies_before_posting(self: Any, link: Any, output: Any) -> None:
            if type(output).__name__ in ("TextDelta", "Text", "TurnCompleted"):
                return  # the process is gone before it shows anything of the reply
            await original(self, link, output)

        crashed.setattr(_renderer.ChatRenderer, "_render", dies_before_posting)
        ts, _ = fake_slack.say("C1", f"{MENTION} remember the milk")
        sid = f"slack:C1:{ts}"
        wait_for(
            lambda: (
                handle.http.get(f"/api/sessions/{sid}").status_code == 200
                and handle.transcript(sid)[-1]["role"] == "assistant"
            ),
            "the recorded reply",
        )
        time.sleep(0.2)  # absence is the behaviour here (the crash's): nothing shown before it
        assert fake_slack.bot_messages("C1", ts) == []
        handle.stop()
    handle, _ = start_slack()
    [posted] = wait_for(lambda: fake_slack.bot_messages("C1", ts), "the owed reply after the restart")
    assert posted["text"] == "echo: remember the milk"
    wait_for(lambda: delivered_rows(handle, sid), "the delivery record")
    time.sleep(0.3)  # absence is the behaviour here: posted once, no late second post
    assert len(fake_slack.bot_messages("C1", ts)) == 1


def test_a_reply_posted_but_not_recorded_is_not_posted_again_after_a_restart(
    start_slack: StartSlack, fake_slack: FakeSlackThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The post worked, the daemon died before recording it: the next start finds the
    message by its key and records it, without a second post."""
    from adapters.chat import _renderer

    handle, _ = start_slack()
    with monkeypatch.context() as crashed:

        async def dies_before_recording(self: Any, link: Any, turn: int, message_ids: list[str]) -> None:
            return None

        crashed.setattr(_renderer.ChatRenderer, "_mark_delivered", dies_before_recording)
        ts, _ = fake_slack.say("C1", f"{MENTION} hello once")
        sid = f"slack:C1:{ts}"
        reply_in(fake_slack, "C1", ts, "echo: hello once")
        handle.stop()
    assert delivered_rows(handle, sid) == []
    posts_before = len(fake_slack.calls_of("chat.postMessage"))
    handle, _ = start_slack()
    wait_for(lambda: delivered_rows(handle, sid), "the delivery record after the restart")
    assert len(fake_slack.calls_of("chat.postMessage")) == posts_before  # found, not posted again
    assert [m["text"] for m in fake_slack.bot_messages("C1", ts)] == ["echo: hello once"]
    assert fake_slack.calls_of("conversations.replies")  # it looked for the message by its key


# --------------------------------------------------------------------------- delivery targets


def test_a_schedule_delivered_to_a_channel_opens_a_thread_people_can_continue(
    start_slack: StartSlack, fake_slack: FakeSlackThread
) -> None:
    import datetime as dt

    # Far enough ahead that a daemon started on a loaded machine still finds it in the
    # future (a config "at" already past when the scheduler reads it is not fired).
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).isoformat()
    target = {"channel": "slack", "to": "C1"}
    schedules = {"standup": {"at": soon, "text": "Post the stand-up summary.", "deliver": target}}
    handle, _ = start_slack({"schedules": schedules})
    [listed] = handle.http.get("/api/reminders").json()
    assert listed["session_id"] == "deliver:slack:C1" and listed["deliver"] == target
    [anchor] = wait_for(
        lambda: [m for m in fake_slack.bot_messages("C1") if "thread_ts" not in m], "the new message"
    )
    assert anchor["text"].startswith("⏰ standup: Post the stand-up summary.")
    wait_for(
        lambda: any(
            "Post the stand-up summary." in m["text"] for m in fake_slack.bot_messages("C1", anchor["ts"])
        ),
        "the whole reply in its thread (it streams)",
    )
    sid = f"slack:C1:{anchor['ts']}"

    # Someone answers in the thread (no mention needed): the same session goes on.
    fake_slack.say("C1", "and what about tomorrow?", thread_ts=anchor["ts"])
    reply_in(fake_slack, "C1", anchor["ts"], "echo: and what about tomorrow?")
    users = [m["content"] for m in handle.transcript(sid) if m["role"] == "user"]
    assert users[0].startswith("[Scheduled reminder 'standup'") and users[1] == "and what about tomorrow?"
    assert len([m for m in fake_slack.bot_messages("C1") if "thread_ts" not in m]) == 1


def test_a_webhook_delivered_to_a_channel_opens_one_thread_even_when_retried(
    start_slack: StartSlack, fake_slack: FakeSlackThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "hook-secret")
    route = {
        "auth": {"type": "bearer", "secret_env": "HOOK_TOKEN"},
        "text": "$.text",
        "deliver": {"channel": "slack", "to": "C1"},
    }
    handle, _ = start_slack({"webhooks": {"routes": {"alerts": route}}})
    headers = {"Authorization": "Bearer hook-secret", "Idempotency-Key": "alert-42"}
    body = {"text": "disk 91% on db-1"}
    first = httpx.post(f"{handle.base_url}/webhooks/alerts?wait=1", json=body, headers=headers, timeout=10)
    assert first.status_code == 200, first.text
    again = httpx.post(f"{handle.base_url}/webhooks/alerts", json=body, headers=headers, timeout=10)
    assert again.status_code in (200, 202) and again.json()["session_id"] == first.json()["session_id"]
    [anchor] = [m for m in fake_slack.bot_messages("C1") if "thread_ts" not in m]
    assert anchor["text"] == "🔔 alerts: disk 91% on db-1"
    assert first.json()["session_id"] == f"slack:C1:{anchor['ts']}"
    wait_for(lambda: fake_slack.bot_messages("C1", anchor["ts"]), "the reply in the alert's thread")
    fake_slack.say("C1", f"{MENTION} is it still high?", thread_ts=anchor["ts"])
    reply_in(fake_slack, "C1", anchor["ts"], "echo: is it still high?")
