"""The Telegram adapter end to end: the real daemon (gateway, sessions, journal, scripted
provider), the real python-telegram-bot ``Bot``, and a local fake of the Bot API
(tests/fakes/telegram_api.py) over HTTP on 127.0.0.1 — long polling and the webhook."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pykka
import pytest
import uvloop

import adapters
from adapters.chat import MUST_DELIVER, Conversation, PostedMessages, retry_verdict
from adapters.telegram import TelegramAdapter, conversation_of, session_id_for
from adapters.telegram import _client as telegram_client
from adapters.telegram._client import GROUP_EDIT_GAP_S, BotPort
from adapters.telegram._client import start_bot as log_in
from netclaw.config import settings_model
from netclaw.daemon import Daemon
from netclaw.retry import with_retries
from netclaw.security.policy import default_scope
from netclaw.security.roles import speaker_of
from tests.conftest import DaemonHandle, settings_data, wait_until
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread, ToolCallSpec
from tests.fakes.telegram_api import ALICE, BOB, BOT_USERNAME, TOKEN, FakeTelegramThread

T = TypeVar("T")

PRIVATE = ALICE["id"]  # a private chat's id is its person's
GROUP = -1001
OTHER_GROUP = -1002
SECRET = "s3cret-webhook-token"
MENTION = f"@{BOT_USERNAME}"

StartBot = Callable[..., tuple[DaemonHandle, TelegramAdapter]]


def run(handle: DaemonHandle, coro: Coroutine[Any, Any, T]) -> T:
    assert handle.daemon.io is not None
    return handle.daemon.io.run(coro, 30)


@pytest.fixture
def fake() -> Iterator[FakeTelegramThread]:
    with FakeTelegramThread() as server:
        yield server


@pytest.fixture
def start_bot(
    fake: FakeTelegramThread, tmp_path: Path, scripted: ScriptedOpenAIThread, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StartBot]:
    """A daemon with Telegram enabled against the fake; returns it and its adapter."""
    assert adapters.channel_named("telegram") is not None  # its section is registered
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    handles: list[DaemonHandle] = []

    def start(
        sections: dict[str, Any] | None = None, **telegram: Any
    ) -> tuple[DaemonHandle, TelegramAdapter]:
        config = {
            "enabled": True,
            "api_url": fake.api_url,
            "channels": [str(GROUP)],
            "allow_dms": True,
            "poll_timeout_s": 5,
            **telegram,
        }
        data = settings_data(tmp_path / "data", scripted.base_url, telegram=config, **(sections or {}))
        daemon = Daemon(settings_model()(**data))
        daemon.start()
        handle = DaemonHandle(daemon)
        handles.append(handle)
        adapter = next(a for a in daemon.adapters if isinstance(a, TelegramAdapter))
        wait_for(lambda: adapter.status().state == "running", f"the adapter running ({adapter.status()})")
        return handle, adapter

    yield start
    for handle in handles:
        handle.stop()
    survivors = pykka.ActorRegistry.get_all()
    pykka.ActorRegistry.stop_all()
    assert not survivors, f"actors survived daemon shutdown: {survivors}"


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 15.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def replies(fake: FakeTelegramThread, chat: int, texts: list[str], topic: int | None = None) -> None:
    """Until the bot's messages in the chat (or topic) are exactly ``texts``."""
    fake.wait_for(
        lambda s: s.bot_texts(chat, topic) == texts,
        f"{texts} in {chat}/{topic} (so far {fake.bot_texts(chat, topic)})",
    )


def settled(fake: FakeTelegramThread, chat: int, message_id: int) -> None:
    """Until the message no longer wears the 👀 (its turn ended)."""
    fake.wait_for(
        lambda s: (m := s.find(chat, message_id)) is not None and m.reactions == [], "the reaction removed"
    )


def user_texts(handle: DaemonHandle, session_id: str) -> list[str]:
    return [m["content"] for m in handle.transcript(session_id) if m["role"] == "user"]


def session_ids(handle: DaemonHandle) -> list[str]:
    response = handle.http.get("/api/sessions")
    response.raise_for_status()
    return sorted(s["id"] for s in response.json())


# -- sessions: private chats, groups, topics ------------------------------------------------------


def test_a_private_chat_round_trip(start_bot: StartBot, fake: FakeTelegramThread) -> None:
    handle, _ = start_bot()
    said = fake.say(PRIVATE, "hello there")
    replies(fake, PRIVATE, ["echo: hello there"])
    sid = f"telegram:{PRIVATE}"
    assert user_texts(handle, sid) == ["hello there"]
    # Typing, then the 👀 on the message while its turn ran, gone after it.
    assert any(
        a["chat_id"] == str(PRIVATE) and a["action"] == "typing" for a in fake.read(lambda s: s.chat_actions)
    )
    reactions = [c.args for c in fake.calls_of("setMessageReaction")]
    assert reactions[0]["reaction"] == [{"type": "emoji", "emoji": "\N{EYES}"}]
    settled(fake, PRIVATE, said["message_id"])
    # Plain text, never a parse mode a model's text could break; no link previews.
    (send,) = fake.calls_of("sendMessage")
    assert "parse_mode" not in send.args and send.args["link_preview_options"] == {"is_disabled": True}

    fake.say(PRIVATE, "and again")
    replies(fake, PRIVATE, ["echo: hello there", "echo: and again"])
    assert session_ids(handle) == [sid]


def test_session_ids_name_their_scope_and_speaker() -> None:
    assert session_id_for("-1001", "7") == "telegram:-1001:7"
    assert conversation_of("telegram:-1001:7") is not None
    assert conversation_of("telegram:-1001:7").thread == "7"  # type: ignore[union-attr]
    assert conversation_of("telegram:42").channel == "42"  # type: ignore[union-attr]
    assert conversation_of("telegram:abc") is None and conversation_of("discord:42") is None
    assert default_scope("telegram:-1001:7") == "telegram:-1001"
    assert speaker_of("telegram:-1001:7", "42") == "telegram:42"


def test_in_a_group_the_bot_answers_mentions_replies_and_commands(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    handle, _ = start_bot()
    sid = f"telegram:{GROUP}"
    fake.say(GROUP, "just chatting among ourselves", user=BOB)
    fake.say(GROUP, f"{MENTION} what time is it?")
    replies(fake, GROUP, ["echo: what time is it?"])
    # The earlier aside is not a turn (and not read: nothing was followed yet).
    assert user_texts(handle, sid) == ["what time is it?"]

    # A reply to the bot's message addresses it without a mention.
    (answer,) = fake.bot_messages(GROUP)
    fake.say(GROUP, "thanks, and tomorrow?", reply_to=answer.data["message_id"])
    replies(fake, GROUP, ["echo: what time is it?", "echo: thanks, and tomorrow?"])

    # Something said in between, not to the bot, is read by the next turn there.
    fake.say(GROUP, "I think it rains tomorrow", user=BOB)
    # /cmd@bot is the command (normalised); /status@otherbot is not for us.
    fake.say(GROUP, "/status@other_bot")
    fake.say(GROUP, f"/status@{BOT_USERNAME}")
    fake.wait_for(
        lambda s: any(t.startswith("Model:") or "model" in t.lower() for t in s.bot_texts(GROUP)[2:]),
        "the /status answer",
    )
    fake.say(GROUP, f"{MENTION} and now?")
    fake.wait_for(lambda s: any("and now?" in t for t in s.bot_texts(GROUP)), "the next reply")
    assert user_texts(handle, sid) == ["what time is it?", "thanks, and tomorrow?", "and now?"]
    # The reply shows before its turn is recorded: wait for the turn, not for the reply.
    wait_until(
        lambda: any(
            "I think it rains tomorrow" in str(m.get("content"))
            for m in handle.transcript(sid, view="context")
        ),
        10,
        "the aside read by the turn",
    )
    last = handle.transcript(sid, view="context")
    assert not any("/status@other_bot" in str(m.get("content")) for m in last)


def test_a_bare_netclaw_command_in_a_group_stops_a_turn(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    start_bot()
    scripted.set_responder(lambda body: Reply(text="never shown", delay_s=30))
    fake.say(GROUP, f"{MENTION} think hard")
    wait_for(lambda: scripted.requests, "the turn reaching the provider")
    fake.say(GROUP, "/stop")  # ours, even without @bot
    fake.wait_for(lambda s: any(t.startswith("Stopped turn") for t in s.bot_texts(GROUP)), "the /stop answer")
    assert "never shown" not in fake.bot_texts(GROUP)


def test_a_forum_topic_is_its_own_session_and_replies_go_to_it(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    handle, _ = start_bot()
    fake.say(GROUP, f"{MENTION} in topic seven", topic=7)
    replies(fake, GROUP, ["echo: in topic seven"], topic=7)
    fake.say(GROUP, f"{MENTION} in topic nine", topic=9)
    replies(fake, GROUP, ["echo: in topic nine"], topic=9)
    fake.say(GROUP, f"{MENTION} in the main line")
    replies(fake, GROUP, ["echo: in the main line"])
    assert session_ids(handle) == [f"telegram:{GROUP}", f"telegram:{GROUP}:7", f"telegram:{GROUP}:9"]
    assert user_texts(handle, f"telegram:{GROUP}:7") == ["in topic seven"]
    sends = fake.calls_of("sendMessage")
    assert sorted(str(c.args.get("message_thread_id")) for c in sends) == ["7", "9", "None"]
    typing_in = {str(a.get("message_thread_id")) for a in fake.read(lambda s: s.chat_actions)}
    assert {"7", "9"} <= typing_in


# -- exactly once -------------------------------------------------------------------------------------


def test_a_redelivered_update_is_answered_once(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_bot()
    said = fake.say(PRIVATE, "only once")
    replies(fake, PRIVATE, ["echo: only once"])
    update = fake.read(lambda s: next(u for u in s.sent_updates if u.get("message") == said))
    fake.redeliver(update)  # as after a crash before the offset was confirmed
    fake.say(PRIVATE, "next")
    replies(fake, PRIVATE, ["echo: only once", "echo: next"])
    assert len(scripted.requests) == 2
    assert user_texts(handle, f"telegram:{PRIVATE}") == ["only once", "next"]


def test_the_offset_confirms_an_update_only_after_it_was_handled(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    start_bot()
    said = fake.say(PRIVATE, "count me")
    replies(fake, PRIVATE, ["echo: count me"])
    update_id = fake.read(lambda s: next(u["update_id"] for u in s.sent_updates if u.get("message") == said))
    # The next long poll asks from the update after it: Telegram forgets it only now.
    fake.wait_for(
        lambda s: any(int(c.args.get("offset") or 0) == update_id + 1 for c in s.calls_of("getUpdates")),
        "the offset confirming the update",
    )
    offsets = [int(c.args.get("offset") or 0) for c in fake.calls_of("getUpdates")]
    assert offsets == sorted(offsets), "the offset went backwards"


def test_a_post_with_a_known_key_edits_that_message_instead_of_posting_again(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    from adapters.chat import Conversation

    handle, adapter = start_bot()
    port = adapter.renderer.port  # type: ignore[union-attr]
    to = Conversation(str(PRIVATE))
    first = run(handle, port.post(to, "part", key="k1"))
    again = run(handle, port.post(to, "part and the rest", key="k1"))  # a retry, or after a restart
    assert again == first
    assert fake.bot_texts(PRIVATE) == ["part and the rest"]
    assert run(handle, port.find_posted(to, "k1", 0.0)) == first
    assert run(handle, port.find_posted(to, "k2", 0.0)) is None
    assert run(handle, port.find_posted(Conversation(str(GROUP)), "k1", 0.0)) is None


# -- rendering: streaming, splitting, rate limits ---------------------------------------------------


def test_a_streamed_reply_is_one_message_edited_at_telegrams_pace(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    text = " ".join(f"word{i}" for i in range(60))
    scripted.set_responder(lambda body: Reply(text=text, chunk_size=20, chunk_delay_s=0.15))
    start_bot()
    fake.say(PRIVATE, "stream please")
    replies(fake, PRIVATE, [text])
    (message,) = fake.bot_messages(PRIVATE)
    assert len(fake.calls_of("sendMessage")) == 1
    assert len(message.edits) >= 2, "the reply did not stream"
    gaps = [b - a for a, b in zip(message.edits, message.edits[1:], strict=False)]
    # About one a second (Telegram's pace), kept when the port sends; the fake times
    # arrivals, which jitter by a request's time.
    assert min(gaps) >= 0.9, f"edits closer than a second: {gaps}"


def test_in_a_group_edits_keep_to_the_groups_pace(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    text = " ".join(f"word{i}" for i in range(80))
    scripted.set_responder(lambda body: Reply(text=text, chunk_size=10, chunk_delay_s=0.1))
    start_bot()
    fake.say(GROUP, f"{MENTION} stream")
    replies(fake, GROUP, [text])
    (message,) = fake.bot_messages(GROUP)
    gaps = [b - a for a, b in zip(message.edits, message.edits[1:], strict=False)]
    assert message.edits and all(g >= GROUP_EDIT_GAP_S - 0.1 for g in gaps), gaps


def test_a_long_reply_is_split_at_4096_characters(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    paragraphs = [f"paragraph {i}: " + "x" * 900 for i in range(10)]
    text = "\n\n".join(paragraphs)
    scripted.set_responder(lambda body: Reply(text=text, chunk_size=3000))
    start_bot()
    fake.say(PRIVATE, "a long one")
    # The last piece streams in: wait for the whole text, not for the third message.
    fake.wait_for(lambda s: "\n\n".join(s.bot_texts(PRIVATE)) == text, "the whole reply")
    pieces = fake.bot_texts(PRIVATE)
    assert len(pieces) == 3 and all(len(p) <= 4096 for p in pieces)


def test_a_flood_wait_is_honoured_and_the_reply_still_arrives(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    start_bot()
    fake.fail_next("sendMessage", 1, retry_after=1)
    fake.say(PRIVATE, "despite the flood")
    replies(fake, PRIVATE, ["echo: despite the flood"])
    refused, sent = fake.calls_of("sendMessage")[:2]
    assert refused.status == 429 and sent.status == 200
    assert sent.at - refused.at >= 0.9, "retried before retry_after"


def test_a_paced_edit_lands_on_its_first_retry(
    fake: FakeTelegramThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pace's wait is slept on the daemon's loop, uvloop's, whose clock counts whole
    milliseconds: slept exactly, it could end short, and a final edit then spent all its
    retries on refusals in a few milliseconds (the reply never showed)."""
    monkeypatch.setattr(telegram_client, "EDIT_GAP_S", 0.02)  # fifty paced edits a second

    async def edits() -> list[int]:
        posted = PostedMessages(tmp_path / "posted.db")
        await posted.open()
        port = BotPort(await log_in(TOKEN, fake.api_url, 1, "TELEGRAM_BOT_TOKEN"), posted)
        to = Conversation(str(PRIVATE), None)
        message = await port.post(to, "0", key="first")
        # The retry's waits, counted, and slept for real: what is tested is that a wait on
        # uvloop's clock does not end before the pace allows the next edit.
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            await asyncio.sleep(seconds)

        retries: list[int] = []
        for n in range(1, 51):  # each one right after the last: refused, then retried once
            slept.clear()
            await with_retries(
                partial(port.edit, to, message, str(n)),
                classify=retry_verdict,
                policy=MUST_DELIVER,
                what="edit",
                sleep=sleep,
            )
            retries.append(len(slept))
        await posted.close()
        return retries

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        retries = runner.run(edits())
    assert retries[0] == 0  # a post does not count against the pace
    assert max(retries) == 1, retries  # refused, the edit landed on its first retry
    # An edit that came after the pace anyway (a loaded machine stalled the test between
    # two) needed none; most came within it, and were refused once.
    assert retries.count(1) >= 25, f"too few edits came within the pace to test its wait: {retries}"
    assert fake.bot_texts(PRIVATE) == ["50"]


# -- approvals ---------------------------------------------------------------------------------------


def test_an_approval_by_inline_button(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_bot(
        sections={"audiences": {"team": {"approve": ["current_time"], "approvers": [str(ALICE["id"])]}}}
    )
    scripted.enqueue(Reply(tool_calls=[ToolCallSpec("current_time", {})]), Reply(text="it is late"))
    fake.say(GROUP, f"{MENTION} what time is it?")
    prompt = fake.wait_for(
        lambda s: next((m for m in s.bot_messages(GROUP) if m.data.get("reply_markup")), None),
        "the approval request with buttons",
    )
    assert "May I run current_time?" in prompt.text
    buttons = prompt.data["reply_markup"]["inline_keyboard"][0]
    assert [b["text"] for b in buttons] == ["Approve", "Deny", "Always"]
    approve = buttons[0]["callback_data"]
    assert approve.startswith("nc:approve:")

    # Someone who may not decide is told so, in an alert only they see.
    fake.click(GROUP, prompt.data["message_id"], approve, user=BOB)
    refused = fake.wait_for(lambda s: s.answers[:1], "the refusal")[0]
    assert "may not decide" in refused["text"] and refused.get("show_alert") in (True, "true", "True")
    assert handle.http.get(f"/api/sessions/telegram:{GROUP}/approvals").json()  # still pending

    fake.click(GROUP, prompt.data["message_id"], approve)
    fake.wait_for(lambda s: "it is late" in s.bot_texts(GROUP), "the reply after approval")
    decided = fake.read(lambda s: s.find(GROUP, prompt.data["message_id"]))
    assert decided is not None and decided.text.startswith("current_time: approve by")
    assert "reply_markup" not in decided.data  # the buttons are gone
    fake.wait_for(lambda s: len(s.answers) == 2, "every press answered")
    results = [m for m in handle.transcript(f"telegram:{GROUP}") if m["role"] == "tool"]
    assert len(results) == 1 and "UTC" in results[0]["content"]


def test_a_press_by_someone_who_may_not_decide_is_answered_to_them(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    start_bot()
    fake.say(PRIVATE, "hello")
    replies(fake, PRIVATE, ["echo: hello"])
    (reply,) = fake.bot_messages(PRIVATE)
    fake.click(PRIVATE, reply.data["message_id"], "nc:approve:doesnotexist", user=BOB)
    answer = fake.wait_for(lambda s: s.answers[:1], "the press answered")[0]
    assert answer.get("show_alert") in (True, "true", "True") and "no longer pending" in answer["text"]


# -- files ---------------------------------------------------------------------------------------------


def test_a_document_and_a_photo_in_and_a_file_out(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    seen: list[Any] = []

    def responder(body: dict[str, Any]) -> Reply:
        seen.append(body["messages"][-1]["content"])
        return Reply(text="got it")

    scripted.set_responder(responder)
    start_bot()
    fake.say(PRIVATE, "read this", document=("notes.txt", b"the secret word is plum", "text/plain"))
    replies(fake, PRIVATE, ["got it"])
    assert "the secret word is plum" in str(seen[-1])
    assert fake.calls_of("getFile") and fake.calls_of("download")

    fake.say(PRIVATE, "", photo=b"\xff\xd8\xff" + b"jpegdata" * 10)
    replies(fake, PRIVATE, ["got it", "got it"])
    assert "image" in str(seen[-1])

    # A file out: the session's share_file output goes up as a document (into the topic).
    scripted.set_responder(None)
    scripted.enqueue(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "out.txt", "content": "for you"})]),
        Reply(tool_calls=[ToolCallSpec("share_file", {"path": "out.txt"})]),
        Reply(text="shared"),
    )
    fake.say(GROUP, f"{MENTION} send me a file", topic=5)
    document = fake.wait_for(
        lambda s: next((m for m in s.bot_messages(GROUP, 5) if "document" in m.data), None), "the document"
    )
    data, name, _ = fake.read(lambda s: s.files[document.data["document"]["file_id"]])
    assert (name, data) == ("out.txt", b"for you")


def test_a_voice_note_in_is_audio_and_audio_out_plays_as_a_voice_message_or_a_track(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    from adapters.chat import Conversation

    seen: list[Any] = []

    def responder(body: dict[str, Any]) -> Reply:
        seen.append(body["messages"][-1]["content"])
        return Reply(text="heard")

    scripted.set_responder(responder)
    handle, adapter = start_bot()
    # In: a voice message is downloaded like a document and kept as audio (no speech-to-text
    # configured here: the model is told so, not handed a file it cannot hear).
    fake.say(PRIVATE, "", voice=(b"OggS" + bytes(60), "audio/ogg"))
    notice = "I could not transcribe the voice note voice-1.ogg: speech-to-text is not configured (speech.transcription)"
    fake.wait_for(
        lambda s: sorted(s.bot_texts(PRIVATE)) == sorted([notice, "heard"]), "the notice and the reply"
    )
    assert "voice note voice-1.ogg (audio/ogg" in str(seen[-1])
    assert "speech-to-text is not configured" in str(seen[-1])
    # Out: Ogg goes up as a voice message, MP3 as an audio track, anything else as a document.
    port = adapter.renderer.port  # type: ignore[union-attr]
    to = Conversation(str(PRIVATE))
    run(handle, port.upload(to, "reply-1.ogg", b"OggS-voice", "audio/ogg"))
    run(handle, port.upload(to, "reply-2.mp3", b"ID3-track", "audio/mpeg"))
    run(handle, port.upload(to, "reply-3.wav", b"RIFF-wave", "audio/wav"))
    sent = [m.data for m in fake.bot_messages(PRIVATE) if {"voice", "audio", "document"} & set(m.data)]
    kinds = [next(k for k in ("voice", "audio", "document") if k in m) for m in sent]
    assert kinds == ["voice", "audio", "document"]
    files = fake.read(lambda s: [s.files[m[k]["file_id"]][:2] for m, k in zip(sent, kinds, strict=True)])
    assert files == [
        (b"OggS-voice", "reply-1.ogg"),
        (b"ID3-track", "reply-2.mp3"),
        (b"RIFF-wave", "reply-3.wav"),
    ]


# -- the webhook ---------------------------------------------------------------------------------------


def test_webhook_mode_takes_updates_with_the_secret_and_refuses_others(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    # The daemon's port is known once it listens: point the webhook at it by a reload-free
    # start with a placeholder, then read the real URL from the fake's setWebhook call.
    handle, adapter = start_bot(mode="webhook", webhook_url="http://127.0.0.1:1/telegram/webhook")
    (setting,) = fake.calls_of("setWebhook")
    assert setting.args["secret_token"] == SECRET
    assert setting.args["url"] == "http://127.0.0.1:1/telegram/webhook"
    assert not fake.calls_of("getUpdates")
    url = f"{handle.base_url}/telegram/webhook"
    fake.read(lambda s: setattr(s, "webhook_url", url))  # as if the public URL reached us

    said = fake.say(PRIVATE, "via webhook")
    replies(fake, PRIVATE, ["echo: via webhook"])
    deliveries = fake.read(lambda s: list(s.deliveries))
    assert [d.status for d in deliveries] == [200]

    update = {"update_id": 999, "message": said}
    assert httpx.post(url, json=update).status_code == 401
    wrong = {"X-Telegram-Bot-Api-Secret-Token": "guess"}
    assert httpx.post(url, json=update, headers=wrong).status_code == 401
    right = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    assert httpx.post(url, content=b"not json", headers=right).status_code == 400
    # The same message posted again with the secret: accepted, admitted once.
    assert httpx.post(url, json=update, headers=right).status_code == 200
    assert user_texts(handle, f"telegram:{PRIVATE}") == ["via webhook"]

    report = run(handle, adapter.probe())
    assert f"@{BOT_USERNAME}" in report and "netclaw sets http://127.0.0.1:1/telegram/webhook" in report


def test_polling_removes_a_webhook_left_from_webhook_mode(
    start_bot: StartBot, fake: FakeTelegramThread
) -> None:
    fake.read(lambda s: setattr(s, "webhook_url", "https://example.invalid/hook"))
    start_bot()
    assert fake.calls_of("deleteWebhook")
    fake.say(PRIVATE, "polled")
    replies(fake, PRIVATE, ["echo: polled"])


# -- who may talk -----------------------------------------------------------------------------------


def test_allowlists_decide_who_gets_a_turn(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_bot(users=[str(ALICE["id"])])
    fake.say(OTHER_GROUP, f"{MENTION} not an allowed group")
    fake.say(GROUP, f"{MENTION} not an allowed person", user=BOB)
    fake.say(BOB["id"], "a private chat from someone not allowed", user=BOB)
    fake.say(GROUP, f"{MENTION} allowed")
    replies(fake, GROUP, ["echo: allowed"])
    assert len(scripted.requests) == 1
    assert fake.bot_texts(OTHER_GROUP) == [] and fake.bot_texts(BOB["id"]) == []
    assert session_ids(handle) == [f"telegram:{GROUP}"]


def test_private_chats_need_allow_dms_and_get_the_dm_audience(
    start_bot: StartBot, fake: FakeTelegramThread, scripted: ScriptedOpenAIThread
) -> None:
    handle, _ = start_bot(allow_dms=False)
    fake.say(PRIVATE, "anyone there?")
    fake.say(GROUP, f"{MENTION} marker")
    replies(fake, GROUP, ["echo: marker"])
    assert fake.bot_texts(PRIVATE) == []
    assert session_ids(handle) == [f"telegram:{GROUP}"]


def tools_of(handle: DaemonHandle, session_id: str) -> list[str]:
    response = handle.http.get(f"/api/sessions/{session_id}", params={"view": "context"})
    response.raise_for_status()
    return sorted(response.json()["tools"])


@pytest.mark.parametrize(("users", "dm_audience"), [(None, "public"), ([str(ALICE["id"])], "team")])
def test_a_dm_is_public_unless_a_user_allowlist_vetted_its_sender(
    start_bot: StartBot, fake: FakeTelegramThread, users: list[str] | None, dm_audience: str
) -> None:
    # The public audience may use one tool here, the team every tool: what a session is
    # offered says which audience it serves.
    handle, _ = start_bot(sections={"audiences": {"public": {"tools": ["current_time"]}}}, users=users)
    fake.say(PRIVATE, "who am I to you?")
    replies(fake, PRIVATE, ["echo: who am I to you?"])
    fake.say(GROUP, f"{MENTION} and here?")
    replies(fake, GROUP, ["echo: and here?"])
    group_tools = tools_of(handle, f"telegram:{GROUP}")
    assert "write_file" in group_tools  # a group is the team's
    dm_tools = tools_of(handle, f"telegram:{PRIVATE}")
    assert (dm_tools == ["current_time"]) == (dm_audience == "public"), dm_tools


# -- configuration and doctor ------------------------------------------------------------------------


def test_check_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from netclaw.errors import AdapterError

    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("TELEGRAM_WEBHOOK_SECRET", raising=False)
    data = settings_data(tmp_path, "http://127.0.0.1:1/v1", telegram={"enabled": True})
    settings = settings_model()(**data)
    adapter = TelegramAdapter(settings, gateway=None)  # type: ignore[arg-type]
    with pytest.raises(AdapterError, match="TELEGRAM_BOT_TOKEN is not set"):
        adapter.check()
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    adapter.check()
    hooked = settings_model()(
        **settings_data(
            tmp_path,
            "http://x/v1",
            telegram={"enabled": True, "mode": "webhook", "webhook_url": "https://h/telegram/webhook"},
        )
    )
    with pytest.raises(AdapterError, match="TELEGRAM_WEBHOOK_SECRET"):
        TelegramAdapter(hooked, gateway=None).check()  # type: ignore[arg-type]
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "has spaces, not allowed")
    with pytest.raises(AdapterError, match="1-256 characters"):
        TelegramAdapter(hooked, gateway=None).check()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs webhook_url"):
        settings_model()(
            **settings_data(tmp_path, "http://x/v1", telegram={"enabled": True, "mode": "webhook"})
        )


def test_probe_says_who_the_token_is_and_refuses_a_bad_one(
    fake: FakeTelegramThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from netclaw.errors import AdapterError

    data = settings_data(tmp_path, "http://x/v1", telegram={"enabled": True, "api_url": fake.api_url})
    adapter = TelegramAdapter(settings_model()(**data), gateway=None)  # type: ignore[arg-type]
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    assert asyncio.run(adapter.probe()) == f"logged in as @{BOT_USERNAME} (id 7000)"
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "999:revoked")
    with pytest.raises(AdapterError, match="rejected the bot token in TELEGRAM_BOT_TOKEN"):
        asyncio.run(adapter.probe())


def test_the_fake_is_the_protocol_the_library_speaks(fake: FakeTelegramThread) -> None:
    """The fake's own ground rules, seen through the library (so the tests above lean on them)."""
    import asyncio

    from telegram import Bot
    from telegram.error import BadRequest, RetryAfter

    async def go() -> None:
        base = fake.api_url
        async with Bot(TOKEN, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot") as bot:
            sent = await bot.send_message(PRIVATE, "hi")
            with pytest.raises(BadRequest, match="not modified"):
                await bot.edit_message_text("hi", chat_id=PRIVATE, message_id=sent.message_id)
            with pytest.raises(BadRequest, match="too long"):
                await bot.send_message(PRIVATE, "x" * 4097)
            fake.server.fail_next("sendMessage", retry_after=3)
            with pytest.raises(RetryAfter):
                await bot.send_message(PRIVATE, "flood")
            assert await bot.get_updates(timeout=0) == ()

    asyncio.run(go())
