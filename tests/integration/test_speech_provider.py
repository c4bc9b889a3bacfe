"""The speech endpoints over real HTTP (the scripted speech server on 127.0.0.1), with audio
espeak-ng made: the recording uploaded as multipart and heard, retries after a transient
failure, the next endpoint when one stays down, no fallback for a refusal, the limits
checked before anything is sent, and a reply spoken as a WAV."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from netclaw.attachments import IncomingFile, audio_seconds, classify
from netclaw.config import LiveSettings, Settings
from netclaw.providers import Speech
from tests.fakes.speech_api import STT_MODEL, TTS_MODEL, FakeSpeechThread, spoken, wav_samples


@pytest.fixture
def fake() -> Iterator[FakeSpeechThread]:
    with FakeSpeechThread() as server:
        yield server


def speech(fake: FakeSpeechThread, **speech_config: Any) -> Speech:
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    settings = Settings(
        providers={
            "local": {},
            "stt": {"base_url": fake.base_url, "max_retries": 2, "timeout_s": 10},
            "down": {"base_url": dead, "max_retries": 1, "timeout_s": 5},
        },
        speech={
            "transcription": {"provider": "stt", "model": STT_MODEL, "price_per_minute": 0.006},
            "synthesis": {"provider": "stt", "model": TTS_MODEL, "format": "wav"},
            **speech_config,
        },
    )
    return Speech(LiveSettings(settings), retry_base_delay=0.01)


def hear(client: Speech, audio: bytes, name: str = "note.wav", mime: str = "audio/wav") -> Any:
    async def run() -> Any:
        try:
            return await client.transcribe(audio, name, mime, audio_seconds(audio))
        finally:
            await client.close()

    return asyncio.run(run())


def test_an_espeak_recording_is_uploaded_as_multipart_and_heard(fake: FakeSpeechThread) -> None:
    audio = spoken("turn on the kitchen lights")
    assert classify(IncomingFile("note.wav", "application/octet-stream", audio))[:2] == ("audio", "audio/wav")
    length = audio_seconds(audio)
    assert length is not None and 0.5 < length < 10
    fake.expect(audio, "Turn on the kitchen lights.", language="english")
    heard = hear(speech(fake), audio)
    assert heard.text == "Turn on the kitchen lights." and heard.language == "english"
    assert heard.model == STT_MODEL and heard.seconds == pytest.approx(length, abs=0.01)
    (request,) = fake.transcriptions(audio)
    assert request.filename == "note.wav" and request.content_type == "audio/wav"
    assert request.fields["model"] == STT_MODEL and request.fields["response_format"] == "verbose_json"
    assert wav_samples(request.audio) > 1000


def test_a_transient_failure_is_retried(fake: FakeSpeechThread) -> None:
    audio = spoken("retry me")
    fake.expect(audio, "retry me")
    fake.fail_next("transcriptions", 503, count=2)
    assert hear(speech(fake), audio).text == "retry me"
    assert len(fake.transcriptions(audio)) == 1  # after the two failures


def test_an_endpoint_that_stays_down_falls_back_to_the_next(fake: FakeSpeechThread) -> None:
    audio = spoken("fall back")
    fake.expect(audio, "fall back")
    client = speech(
        fake,
        transcription={
            "provider": "down",
            "model": "primary",
            "fallbacks": [{"provider": "stt", "model": STT_MODEL}],
        },
    )
    heard = hear(client, audio)
    assert heard.text == "fall back" and heard.model == STT_MODEL


def test_a_refusal_is_not_tried_elsewhere_and_says_why(fake: FakeSpeechThread) -> None:
    audio = spoken("nobody knows this one")  # never registered: the server refuses it
    client = speech(
        fake,
        transcription={
            "provider": "stt",
            "model": STT_MODEL,
            "fallbacks": [{"provider": "down", "model": "x"}],
        },
    )
    heard = hear(client, audio)
    assert heard.text is None and "not one this server knows" in (heard.error or "")
    assert "cannot reach" not in (heard.error or "")  # the fallback was not tried


def test_the_limits_are_checked_before_anything_is_sent(fake: FakeSpeechThread) -> None:
    audio = spoken("this is a rather long sentence for such a short limit")
    too_long = hear(speech(fake, max_audio_s=1), audio)
    assert too_long.text is None and "speech.max_audio_s" in (too_long.error or "")
    too_big = hear(speech(fake, max_audio_bytes=1000), audio)
    assert too_big.text is None and "speech.max_audio_bytes" in (too_big.error or "")
    assert fake.requests == []


def test_no_endpoint_configured_says_so() -> None:
    client = Speech(LiveSettings(Settings()))
    heard = asyncio.run(client.transcribe(b"RIFF", "a.wav", "audio/wav", None))
    assert heard.error == "speech-to-text is not configured (speech.transcription)"


def test_a_reply_is_spoken_as_a_wav(fake: FakeSpeechThread) -> None:
    client = speech(fake)

    async def run() -> Any:
        try:
            return await client.synthesize("It is done.")
        finally:
            await client.close()

    said = asyncio.run(run())
    assert said.error is None and said.mime_type == "audio/wav" and said.name == "reply.wav"
    assert wav_samples(said.data) > 0 and said.chars == len("It is done.")
    (request,) = fake.speeches()
    assert request.body == {
        "model": TTS_MODEL,
        "input": "It is done.",
        "voice": "alloy",
        "response_format": "wav",
    }


def test_doctor_checks_each_speech_endpoint(fake: FakeSpeechThread) -> None:
    from netclaw.cli._doctor import _doctor_speech

    settings = Settings(
        providers={
            "local": {},
            "stt": {"base_url": fake.base_url},
            "down": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 5},
            "keyed": {"base_url": fake.base_url, "api_key_env": "NETCLAW_TEST_NO_SUCH_SPEECH_KEY"},
        },
        speech={
            "transcription": {
                "provider": "stt",
                "model": STT_MODEL,
                "fallbacks": [{"provider": "down", "model": "x"}, {"provider": "stt", "model": "nope"}],
            },
            "synthesis": {"provider": "keyed", "model": TTS_MODEL},
        },
    )
    found: dict[str, tuple[bool, str]] = {}
    assert _doctor_speech(settings, lambda good, what, detail: found.update({what: (good, detail)})) is False
    assert found[f"speech.transcription (stt/{STT_MODEL})"] == (True, f"{fake.base_url} reachable, 2 models")
    good, detail = found["speech.transcription.fallbacks[0] (down/x)"]
    assert not good and "cannot reach http://127.0.0.1:9/v1" in detail
    good, detail = found["speech.transcription.fallbacks[1] (stt/nope)"]
    assert (
        not good
        and "does not list the model 'nope'" in detail
        and "speech.transcription.fallbacks[1].model" in detail
    )
    good, detail = found[f"speech.synthesis (keyed/{TTS_MODEL})"]
    assert not good and "NETCLAW_TEST_NO_SUCH_SPEECH_KEY" in detail


def test_a_hostile_answer_is_read_only_so_far_and_said_plainly(fake: FakeSpeechThread) -> None:
    audio = spoken("hostile")
    fake.expect(audio, "hostile")
    fake.answer_next("transcriptions", b'{"text": "' + b"a" * 2_000_000 + b'"}')
    huge = hear(speech(fake, transcription={"provider": "stt", "model": STT_MODEL}), audio)
    assert huge.text is None and "larger than 1,000,000 bytes" in (huge.error or "")
    fake.answer_next(
        "transcriptions", b'{"words": []}'
    )  # not retried: a server that answers so says so again
    shapeless = hear(speech(fake), audio)
    assert shapeless.text is None and "answered without a transcript" in (shapeless.error or "")
    for _ in range(3):  # the attempt and its two retries
        fake.answer_next("transcriptions", b"x" * 500_000, status=500)
    broken = hear(speech(fake), audio)
    assert broken.text is None and "failed on the server side" in (broken.error or "")
    assert len(broken.error or "") < 2000  # the error body was cut, not carried whole
