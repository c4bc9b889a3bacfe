"""Conversations as people have them (issue 12), end to end through the real daemon: who is
speaking, the thread a session starts in, files in and out, scoped memory — on Slack (the
real slack-bolt/slack-sdk stack against tests/fakes/slack_api.py), on Discord (the real
discord.py client against tests/fakes/discord_port.py) and through the HTTP API. What the
model gets is read off the scripted provider's recorded requests."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netclaw.persistence import NewMemory, SqliteMemoryStore
from tests.conftest import DaemonHandle
from tests.fakes._scripted_server import is_context, said
from tests.fakes.discord_port import FakeDiscordServer
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.slack_api import FakeSlackThread
from tests.integration.test_discord import ALLOWED, BOT_ID
from tests.integration.test_discord import discord_server as discord_server
from tests.integration.test_slack import (
    MENTION,
    StartSlack,
    all_acked,
    reply_in,
    run,
    wait_for,
)
from tests.integration.test_slack import fake_slack as fake_slack
from tests.integration.test_slack import start_slack as start_slack

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64  # a PNG signature is what makes it an image


def user_contents(request: dict[str, Any]) -> list[Any]:
    """What people said in a request (a turn's volatile tail is netclaw's note, left out)."""
    found: list[Any] = []
    for m in request["messages"]:
        content = m["content"]
        if m["role"] != "user":
            continue
        if isinstance(content, list):  # parts: the tail is the last text part
            content = [p for p in content if not (p.get("type") == "text" and is_context(p.get("text", "")))]
        elif said(content):
            content = said(content)
        else:
            continue
        found.append(content)
    return found


def last_user(request: dict[str, Any]) -> Any:
    return user_contents(request)[-1]


def vision_model() -> dict[str, Any]:
    return {
        "main": {
            "provider": "local",
            "model": "scripted",
            "context_window": 32768,
            "max_output_tokens": 1024,
            "vision": True,
        }
    }


# --------------------------------------------------------------------------- Slack


def test_two_speakers_in_a_thread_reach_the_provider_by_name(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} what do you think?", user="U1")
    reply_in(fake_slack, "C1", ts, "echo: what do you think?")
    fake_slack.say("C1", "I disagree with Alice", user="U2", thread_ts=ts)
    reply_in(fake_slack, "C1", ts, "echo: I disagree with Alice")

    second = scripted.requests[-1]
    assert user_contents(second) == ["[Alice] what do you think?", "[Bob] I disagree with Alice"]
    # Names are looked up once per person (users.info, cached).
    assert sorted(c.args["user"] for c in fake_slack.calls_of("users.info")) == ["U1", "U2"]


def test_a_mention_mid_thread_brings_the_earlier_messages_exactly_once(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, adapter = start_slack()
    root, _ = fake_slack.say("C1", "the deploy failed again", user="U1")
    fake_slack.say("C1", "it's the migration, I think", user="U2", thread_ts=root)
    _, envelopes = fake_slack.say("C1", f"{MENTION} summarise this thread", user="U3", thread_ts=root)
    wait_for(lambda: fake_slack.bot_messages("C1", root), "the reply")

    first = last_user(scripted.requests[-1])
    assert first == (
        "[Earlier in this conversation, before you were addressed:]\n"
        "[Alice] the deploy failed again\n"
        "[Bob] it's the migration, I think\n"
        "[End of the earlier messages.]\n\n"
        "[Carol] summarise this thread"
    )
    # Journaled with the message: the transcript keeps it, as recovery would rebuild it.
    (message,) = [m for m in handle.transcript(f"slack:C1:{root}") if m["role"] == "user"]
    assert message["prior"].startswith("[Earlier in this conversation") and message["user_name"] == "Carol"

    # Slack delivers the mention again after a restart: no second turn, no second context.
    on_loop_forget = adapter.forget_recent_events
    assert handle.daemon.io is not None
    run(handle, _call(on_loop_forget))
    fake_slack.redeliver(envelopes[0])
    all_acked(fake_slack)
    fake_slack.say("C1", "and what now?", user="U1", thread_ts=root)
    reply_in(fake_slack, "C1", root, "echo: and what now?")
    assert len(scripted.requests) == 2
    later = user_contents(scripted.requests[-1])
    assert sum("[Earlier in this conversation" in str(c) for c in later) == 1
    assert later[-1] == "[Alice] and what now?"


async def _call(fn: Callable[[], None]) -> None:
    fn()


def test_a_dm_session_reads_the_earlier_direct_messages(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    start_slack(allow_dms=True, users=["U1"])
    fake_slack.server.user_message("D1", "remember the budget is 5k", channel_type="im")
    ts, _ = fake_slack.say("D1", "what was the budget?", channel_type="im")
    wait_for(lambda: fake_slack.bot_messages("D1", ts), "a reply in the DM")
    assert last_user(scripted.requests[-1]).endswith(
        "[Alice] remember the budget is 5k\n[End of the earlier messages.]\n\n[Alice] what was the budget?"
    )


def test_a_slack_file_reaches_the_provider_as_text_and_an_image_as_an_image(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_slack(sections={"models": vision_model()})
    log = b"ERROR boom at line 3\n" * 3
    ts, _ = fake_slack.say(
        "C1",
        f"{MENTION} why does it fail?",
        files=[("app.log", "text/plain", log), ("shot.png", "image/png", PNG)],
    )
    wait_for(lambda: fake_slack.bot_messages("C1", ts), "the reply")
    content = last_user(scripted.requests[-1])
    assert isinstance(content, list)
    text, image = content
    assert text["text"].startswith(
        "[Alice] why does it fail?\n\n[attached file app.log (text/plain, 63 bytes)]\n"
    )
    assert "ERROR boom at line 3" in text["text"]
    assert "[attached image shot.png (image/png, 72 bytes), shown below]" in text["text"]
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
    }
    # Downloaded with the bot token, stored under the session's folder.
    assert len(fake_slack.calls_of("files.download")) == 2
    stored = list((handle.daemon.settings.data_dir / "files").rglob("*-app.log"))
    assert len(stored) == 1 and stored[0].read_bytes() == log


def test_a_file_without_a_comment_in_a_followed_thread_is_a_turn(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    start_slack()
    ts, _ = fake_slack.say("C1", f"{MENTION} I'll send the config")
    reply_in(fake_slack, "C1", ts, "echo: I'll send the config")
    fake_slack.say("C1", "", thread_ts=ts, files=[("app.json", "application/json", b'{"debug": true}')])
    wait_for(lambda: len(scripted.requests) == 2, "a turn for the file")
    assert '[attached file app.json (application/json, 15 bytes)]\n{"debug": true}' in last_user(
        scripted.requests[-1]
    )


def test_a_file_slack_will_not_give_is_named_in_the_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    start_slack()
    event = fake_slack.server.user_message(
        "C1", f"{MENTION} see attached", files=[("a.txt", "text/plain", b"x")]
    )
    event["files"][0]["url_private_download"] = event["files"][0]["url_private_download"].replace(
        "/files/", "/gone/"
    )
    fake_slack.push({"type": "app_mention", **{k: v for k, v in event.items() if k != "type"}})
    ts = event["ts"]
    reply_in(fake_slack, "C1", ts, "echo: see attached")
    notes = [m["text"] for m in fake_slack.bot_messages("C1", ts)]
    assert any("I could not read every file: a.txt could not be downloaded" in n for n in notes)


def test_native_streaming_when_the_workspace_has_it(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    fake_slack.server.streaming = True
    start_slack()
    scripted.enqueue(Reply(text="**Done**: all " + "good " * 30, chunk_size=20, chunk_delay_s=0.02))
    ts, _ = fake_slack.say("C1", f"{MENTION} status?")
    final = "**Done**: all " + "good " * 30
    wait_for(lambda: fake_slack.calls_of("chat.stopStream"), "the stream closed")
    (start,) = fake_slack.calls_of("chat.startStream")
    assert start.args["thread_ts"] == ts and start.args["recipient_user_id"] == "U1"
    (message,) = fake_slack.bot_messages("C1", ts)
    assert message["text"] == final  # Markdown as the model wrote it: Slack renders it
    assert not message["streaming"]
    assert message["metadata"]["event_payload"]["marker"]  # the outbox's key
    assert not fake_slack.calls_of("chat.postMessage")  # one growing message, no posts or edits
    assert fake_slack.server.statuses and fake_slack.server.statuses[0]["status"] == "is thinking…"


def test_without_native_streaming_replies_are_posted_as_mrkdwn(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    start_slack()
    scripted.enqueue(Reply(text="# Plan\n- **one** [docs](https://example.com)\n```py\nx = 1 < 2\n```"))
    ts, _ = fake_slack.say("C1", f"{MENTION} plan?")
    reply_in(fake_slack, "C1", ts, "*Plan*\n• *one* <https://example.com|docs>\n```\nx = 1 &lt; 2\n```")
    assert fake_slack.calls_of("chat.startStream")  # tried once, refused, then posting for good
    ts2, _ = fake_slack.say("C1", f"{MENTION} again")
    reply_in(fake_slack, "C1", ts2, "echo: again")
    assert len(fake_slack.calls_of("chat.startStream")) == 1


def test_a_shared_workspace_file_is_uploaded_into_the_thread(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread, tmp_path: Any
) -> None:
    handle, _ = start_slack(sections={"tools": {"workspace_dir": str(tmp_path / "ws")}})
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "report.csv", "content": "a,b\n1,2\n"})]),
        Reply(tool_calls=[ToolCallSpec("share_file", {"path": "report.csv"})]),
        Reply(text="Here is the report."),
    )
    ts, _ = fake_slack.say("C1", f"{MENTION} make me a report")
    reply_in(fake_slack, "C1", ts, "Here is the report.")
    uploaded = wait_for(
        lambda: [f for f in fake_slack.server.files.values() if f["name"] == "report.csv"], "the upload"
    )
    assert uploaded[0]["data"] == b"a,b\n1,2\n"
    (complete,) = fake_slack.calls_of("files.completeUploadExternal")
    assert complete.args["channel_id"] == "C1" and complete.args["thread_ts"] == ts
    events = handle.http.get(f"/api/sessions/slack:C1:{ts}").json()["messages"]
    assert any(m["role"] == "tool" and m["content"].startswith("shared report.csv (8 bytes)") for m in events)


def test_a_dm_does_not_recall_a_channels_memories(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_slack(allow_dms=True, users=["U1"])
    memory = handle.daemon.memory
    assert isinstance(memory, SqliteMemoryStore) and handle.daemon.io is not None
    handle.daemon.io.run(
        memory.add(
            [NewMemory("the launch codename is bluebird")],
            session_id="slack:C1:1.0",
            audience="team",
            scope="slack:C1",
        ),
        10,
    )
    ts, _ = fake_slack.say("D1", "what is the launch codename?", channel_type="im")
    wait_for(lambda: fake_slack.bot_messages("D1", ts), "the DM answered")
    assert "bluebird" not in str(scripted.requests[-1]["messages"])

    ts2, _ = fake_slack.say("C1", f"{MENTION} what is the launch codename?")
    reply_in(fake_slack, "C1", ts2, "echo: what is the launch codename?")
    assert "bluebird" in str(scripted.requests[-1]["messages"])  # the channel it was made in does


def test_a_dm_from_anyone_is_a_public_session(
    start_slack: StartSlack, fake_slack: FakeSlackThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_slack(allow_dms=True)  # no user allowlist: anyone in the workspace
    ts, _ = fake_slack.say("D1", "hello", channel_type="im")
    wait_for(lambda: fake_slack.bot_messages("D1", ts), "the DM answered")
    tools = {t["function"]["name"] for t in scripted.requests[-1].get("tools", [])}
    assert tools <= {"current_time"}  # the public audience's tools
    assert handle.http.get(f"/api/sessions/slack:D1:{ts}").status_code == 200


# --------------------------------------------------------------------------- Discord


@pytest.fixture
def discord_daemon(
    discord_server: FakeDiscordServer, start_daemon: Callable[..., DaemonHandle]
) -> Iterator[tuple[FakeDiscordServer, DaemonHandle]]:
    yield discord_server, start_daemon(discord={"enabled": True, "channels": [ALLOWED]})


def test_a_discord_attachment_and_the_author_reach_the_provider(
    discord_daemon: tuple[FakeDiscordServer, DaemonHandle], scripted: ScriptedOpenAIThread
) -> None:
    server, _handle = discord_daemon
    server.post_message(
        f"<@{BOT_ID}> check this log",
        mentions_bot=True,
        author_name="Dana",
        attachments=[("boot.log", "text/plain", b"kernel panic\n")],
    )
    server.wait_for(lambda: bool(server.threads), what="a thread")
    thread = server.threads[0]["id"]
    server.wait_for(lambda: len(server.bot_messages(thread)) == 1, what="the reply")
    content = last_user(scripted.requests[-1])
    assert content == (
        "[Dana] check this log\n\n[attached file boot.log (text/plain, 13 bytes)]\nkernel panic\n\n[end of boot.log]"
    )


def test_a_discord_mention_mid_thread_brings_the_thread_once(
    discord_daemon: tuple[FakeDiscordServer, DaemonHandle], scripted: ScriptedOpenAIThread
) -> None:
    server, _handle = discord_daemon
    thread = server.people_thread("incident")
    server.post_message("db is down", channel_id=thread, author_id="42", author_name="Ann", dispatch=False)
    server.post_message("since 9am", channel_id=thread, author_id="43", author_name="Ben", dispatch=False)
    server.post_message(
        f"<@{BOT_ID}> what happened?", channel_id=thread, mentions_bot=True, author_name="Ann"
    )
    server.wait_for(lambda: len(server.bot_messages(thread)) == 1, what="the reply")
    assert last_user(scripted.requests[-1]) == (
        "[Earlier in this conversation, before you were addressed:]\n[Ann] db is down\n[Ben] since 9am\n"
        "[End of the earlier messages.]\n\n[Ann] what happened?"
    )
    server.post_message("thanks", channel_id=thread, author_name="Ben", author_id="43")
    server.wait_for(lambda: len(server.bot_messages(thread)) == 2, what="the second reply")
    assert last_user(scripted.requests[-1]) == "[Ben] thanks"
    assert sum("Earlier in this conversation" in str(c) for c in user_contents(scripted.requests[-1])) == 1


def test_a_shared_file_is_attached_in_the_discord_thread(
    discord_server: FakeDiscordServer,
    start_daemon: Callable[..., DaemonHandle],
    scripted: ScriptedOpenAIThread,
    tmp_path: Path,
) -> None:
    server = discord_server
    start_daemon(
        discord={"enabled": True, "channels": [ALLOWED]}, tools={"workspace_dir": str(tmp_path / "ws")}
    )
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "notes.md", "content": "# Notes\n"})]),
        Reply(tool_calls=[ToolCallSpec("share_file", {"path": "notes.md", "name": "meeting-notes.md"})]),
        Reply(text="Attached."),
    )
    server.post_message(f"<@{BOT_ID}> write it up", mentions_bot=True)
    server.wait_for(lambda: bool(server.threads), what="a thread")
    thread = server.threads[0]["id"]
    server.wait_for(lambda: server.bot_files(thread) == [("meeting-notes.md", b"# Notes\n")], what="the file")
    server.wait_for(lambda: "Attached." in server.bot_messages(thread), what="the reply")


# --------------------------------------------------------------------------- the API


def test_the_api_takes_a_user_name_and_files(daemon: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    body = {
        "text": "what's in it?",
        "user": "u-7",
        "user_name": "Eve",
        "files": [
            {
                "name": "notes.md",
                "mime_type": "text/markdown",
                "data_base64": base64.b64encode(b"# hi").decode(),
            }
        ],
    }
    answer = daemon.http.post("/api/sessions/api-files/messages?wait=1", json=body)
    assert answer.status_code == 200, answer.text
    assert last_user(scripted.requests[-1]) == (
        "[Eve] what's in it?\n\n[attached file notes.md (text/markdown, 4 bytes)]\n# hi\n[end of notes.md]"
    )
    (message,) = [
        m for m in daemon.http.get("/api/sessions/api-files").json()["messages"] if m["role"] == "user"
    ]
    assert message["user_name"] == "Eve"
    assert [(f["name"], f["kind"], f["size"]) for f in message["files"]] == [("notes.md", "text", 4)]
    stored = Path(message["files"][0]["path"])
    assert stored.read_bytes() == b"# hi"
    assert daemon.http.delete("/api/sessions/api-files").status_code == 204
    assert not stored.exists()  # a deleted session's files go with it


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ("nope", "'files' must be a list"),
        ([{"name": "a.txt", "data_base64": "!!!"}], "files[0].data_base64 is not valid base64"),
        ([{"data_base64": "eA=="}], "files[0].name must be a non-empty string"),
        ([{"name": "a", "data_base64": ""}], "'a' is empty"),
        ([{"name": f"f{i}", "data_base64": "eA=="} for i in range(11)], "at most 10 files"),
    ],
)
def test_bad_files_get_a_400_naming_them(daemon: DaemonHandle, files: Any, message: str) -> None:
    answer = daemon.http.post("/api/sessions/api-bad/messages", json={"text": "x", "files": files})
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]["message"]


def test_a_message_of_only_files_is_accepted(daemon: DaemonHandle, scripted: ScriptedOpenAIThread) -> None:
    body = {"files": [{"name": "x.bin", "mime_type": "application/octet-stream", "data_base64": "AAEC"}]}
    answer = daemon.http.post("/api/sessions/api-bin/messages?wait=1", json=body)
    assert answer.status_code == 200, answer.text
    assert last_user(scripted.requests[-1]) == (
        "[attached file x.bin (application/octet-stream, 3 bytes); its content is not shown to you]"
    )
