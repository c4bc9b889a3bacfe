"""Conformance, voice notes: a recording espeak-ng made, sent as a voice note through each
platform's protocol fake (Slack's audio clip, Discord's voice message, Telegram's voice),
is transcribed by the scripted speech server over real HTTP (which checks it got that very
audio, as multipart) before the turn runs, answered once, and its transcript is in the
journal — also when the daemon (a subprocess) is SIGKILLed between receipt and
transcription (the transcription resumes once) and between transcription and the answer
(it is never transcribed again)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.drivers import load
from tests.conformance.model import KitModel, marker
from tests.conformance.rig import InProcess, Rig, Subprocess, wait_for
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread
from tests.fakes.speech_api import STT_MODEL, TTS_MODEL, FakeSpeechThread, spoken, wav_samples

VOICE_DRIVERS = ["discord_bot", "slack", "telegram"]
RESTART_TIMEOUT_S = 40.0


def speech_sections(fake: FakeSpeechThread) -> dict[str, Any]:
    return {
        "providers": {
            "stt": {"type": "openai", "base_url": fake.base_url, "timeout_s": 30, "max_retries": 1}
        },
        "speech": {
            "transcription": {"provider": "stt", "model": STT_MODEL, "price_per_minute": 0.006},
            "synthesis": {"provider": "stt", "model": TTS_MODEL, "format": "wav"},
        },
    }


@pytest.fixture(scope="module")
def speech_server() -> Iterator[FakeSpeechThread]:
    with FakeSpeechThread() as fake:
        yield fake


@pytest.fixture(scope="module", params=VOICE_DRIVERS)
def voice_rig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, speech_server: FakeSpeechThread
) -> Iterator[InProcess]:
    driver = load(request.param)
    model = KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        try:
            root = tmp_path_factory.mktemp(f"voice-{driver.name}")
            with InProcess(driver, model).running(root, provider, speech_sections(speech_server)) as rig:
                yield rig
        finally:
            driver.stop()


@pytest.fixture(scope="module", params=VOICE_DRIVERS)
def voice_restartable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, speech_server: FakeSpeechThread
) -> Iterator[Subprocess]:
    driver = load(request.param)
    model = KitModel()
    with ScriptedOpenAIThread(default=model) as provider:
        driver.start()
        root = tmp_path_factory.mktemp(f"voice-kill-{driver.name}")
        rig = Subprocess(driver, model, root, provider.base_url, speech_sections(speech_server))
        try:
            rig.start()
            yield rig
        finally:
            rig.close()
            driver.stop()


def voice_note(rig: Rig, speech: FakeSpeechThread, mark: str) -> tuple[bytes, str]:
    """A recording of its own (so the server knows it apart) and what the server will say
    was said in it: the mark, which the kit model routes by."""
    audio = spoken(f"please water the plants, note {mark[1:5]}")
    heard = f"Please water the plants {mark}."
    speech.expect(audio, heard, language="english")
    return audio, heard


def send_voice(rig: Rig, audio: bytes, conversation: str | None = None) -> str:
    said = rig.driver.say("", conversation, files=[("voice.wav", "audio/wav", audio)])
    return conversation or rig.driver.conversation_of(said)


def transcripts_in_journal(rig: Rig, session: str) -> list[dict[str, Any]]:
    return [
        f["transcript"]
        for m in rig.transcript(session)
        if m["role"] == "user"
        for f in m.get("files") or []
        if "transcript" in f
    ]


def test_a_voice_note_is_transcribed_before_its_turn_and_answered_once(
    voice_rig: InProcess, speech_server: FakeSpeechThread
) -> None:
    rig, driver = voice_rig, voice_rig.driver
    mark = marker("vo")
    audio, heard = voice_note(rig, speech_server, mark)
    rig.model.script(mark, Reply(text=f"watering them {mark}"))
    conversation = send_voice(rig, audio)
    rig.replied(conversation, f"watering them {mark}")

    (request,) = speech_server.transcriptions(audio)  # the very recording, once
    assert request.fields["model"] == STT_MODEL and request.filename and request.filename.endswith(".wav")
    (asked,) = rig.model.requests(mark)  # the model read the transcript, marked as speech
    said = str(asked["messages"])
    assert "[transcribed speech from the attached voice note" in said and "language: english" in said
    assert heard in said
    (transcript,) = transcripts_in_journal(rig, driver.session_of(conversation))
    assert transcript["text"] == heard and transcript["language"] == "english"
    assert transcript["model"] == STT_MODEL and transcript["seconds"] > 0.5
    assert driver.bot_messages(conversation).count(f"watering them {mark}") == 1


def test_a_voice_note_that_cannot_be_transcribed_gets_a_notice_and_still_an_answer(
    voice_rig: InProcess, speech_server: FakeSpeechThread
) -> None:
    rig, driver = voice_rig, voice_rig.driver
    conversation = rig.start_conversation(f"hello {marker()}")
    audio = spoken(f"nobody registered this recording {marker()}")  # the server refuses it
    mark = marker("nf")
    rig.model.script(mark, Reply(text=f"I could not hear it {mark}"))
    driver.say(f"about this {mark}", conversation, mention=False, files=[("voice.wav", "audio/wav", audio)])
    wait_for(
        lambda: any("could not transcribe the voice note" in t for t in driver.bot_messages(conversation)),
        "the notice that the note could not be transcribed",
    )
    rig.replied(conversation, f"I could not hear it {mark}")
    (asked,) = rig.model.requests(mark)
    assert "it could not be transcribed" in str(asked["messages"])


def test_with_voice_on_a_reply_comes_as_audio_beside_its_text_and_as_text_with_a_notice_when_speech_is_down(
    voice_rig: InProcess, speech_server: FakeSpeechThread
) -> None:
    rig, driver = voice_rig, voice_rig.driver
    if not driver.capabilities.files_out:
        pytest.skip(f"{driver.name} shows people no files")
    conversation = rig.start_conversation(f"hello {marker()}")
    driver.say("/voice on", conversation, mention=False)
    wait_for(
        lambda: any("spoken too" in t for t in driver.bot_messages(conversation)), "the answer to /voice on"
    )
    mark = marker("sp")
    rig.model.script(mark, Reply(text=f"the plants are watered {mark}"))
    driver.say(f"how are the plants {mark}", conversation, mention=False)
    rig.replied(conversation, f"the plants are watered {mark}")
    (name, audio) = wait_for(
        lambda: [f for f in driver.files_received(conversation) if f[0].startswith("reply-")],
        "the spoken reply",
    )[-1]
    assert name.endswith(".wav") and wav_samples(audio) > 0  # a real recording a player opens
    assert speech_server.speeches()[-1].body["input"] == f"the plants are watered {mark}"
    assert driver.bot_messages(conversation).count(f"the plants are watered {mark}") == 1

    speech_server.fail_next("speech", 503, count=20)  # text-to-speech is down: retries, then text
    down = marker("dn")
    rig.model.script(down, Reply(text=f"still text {down}"))
    driver.say(f"and now {down}", conversation, mention=False)
    rig.replied(conversation, f"still text {down}")
    wait_for(
        lambda: any(
            "could not speak this reply, so it is text only" in t for t in driver.bot_messages(conversation)
        ),
        "the notice that the reply stays text",
    )
    assert len([f for f in driver.files_received(conversation) if f[0].startswith("reply-")]) == 1
    driver.say("/voice off", conversation, mention=False)
    wait_for(lambda: any("text only (chosen" in t for t in driver.bot_messages(conversation)), "/voice off")
    speech_server.clear_failures()  # nothing else fails after this case


def journal_count(data_dir: Path, event_type: str) -> int:
    with sqlite3.connect(data_dir / "netclaw.db") as db:
        (count,) = db.execute("SELECT COUNT(*) FROM events WHERE type = ?", (event_type,)).fetchone()
    return int(count)


@pytest.mark.slow
def test_a_sigkill_between_receipt_and_transcription_resumes_the_transcription_once(
    voice_restartable: Subprocess, speech_server: FakeSpeechThread
) -> None:
    rig, driver = voice_restartable, voice_restartable.driver
    conversation = rig.start_conversation(f"hello {marker()}")
    before = Counter(driver.everywhere())
    heard_before = journal_count(rig.data_dir, "SpeechTranscribed")
    mark = marker("rk")
    audio, _ = voice_note(rig, speech_server, mark)
    rig.model.script(mark, Reply(text=f"watering them {mark}"))
    speech_server.waiting.clear()
    speech_server.hold()  # the upload arrives and waits: the daemon dies before it is heard
    try:
        send_voice(rig, audio, conversation)
        assert speech_server.waiting.wait(30), "the recording never reached the speech server"
        rig.sigkill()
    finally:
        speech_server.release()
    rig.start()
    rig.replied(conversation, f"watering them {mark}", RESTART_TIMEOUT_S)

    # One upload cut short by the kill, one after the restart; recorded and answered once.
    assert len(speech_server.transcriptions(audio)) == 2
    assert journal_count(rig.data_dir, "SpeechTranscribed") == heard_before + 1
    assert len(rig.model.requests(mark)) == 1
    assert Counter(driver.everywhere()) - before == Counter([f"watering them {mark}"])


@pytest.mark.slow
def test_a_sigkill_between_transcription_and_the_answer_never_transcribes_again(
    voice_restartable: Subprocess, speech_server: FakeSpeechThread
) -> None:
    rig, driver = voice_restartable, voice_restartable.driver
    conversation = rig.start_conversation(f"hello {marker()}")
    before = Counter(driver.everywhere())
    heard_before = journal_count(rig.data_dir, "SpeechTranscribed")
    mark = marker("ra")
    audio, heard = voice_note(rig, speech_server, mark)
    rig.model.script(mark, Reply(hang=True), Reply(text=f"watering them {mark}"))  # the kill comes mid-answer
    send_voice(rig, audio, conversation)
    assert rig.model.wait_request(mark, 30), "the transcript never reached the model"
    rig.sigkill()
    rig.start()
    rig.replied(conversation, f"watering them {mark}", RESTART_TIMEOUT_S)

    assert len(speech_server.transcriptions(audio)) == 1  # heard once, before the kill
    assert journal_count(rig.data_dir, "SpeechTranscribed") == heard_before + 1
    assert len(rig.model.requests(mark)) == 2  # the answer cut short once, resumed once
    assert heard in str(rig.model.requests(mark)[-1]["messages"])
    assert Counter(driver.everywhere()) - before == Counter([f"watering them {mark}"])
    (transcript,) = [
        t for t in transcripts_in_journal(rig, driver.session_of(conversation)) if t.get("text") == heard
    ]
    assert transcript["model"] == STT_MODEL
