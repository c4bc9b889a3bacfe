"""Voice notes through the running daemon (in process), an audio file sent over the API:
transcribed by the scripted speech server over real HTTP before the model is called, the
transcript where people look — the API's session read, ``netclaw sessions show``, the
control room — and what it took and cost on ``/metrics`` and in ``GET /api/usage``; after
a snapshot and a restart the transcript is still there."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from netclaw.cli._admin import print_session
from tests.conftest import DaemonHandle
from tests.fakes.scripted_openai import Reply, ScriptedOpenAIThread
from tests.fakes.speech_api import STT_MODEL, FakeSpeechThread, spoken

SESSION = "api:voice"


@pytest.fixture
def speech() -> Iterator[FakeSpeechThread]:
    with FakeSpeechThread() as fake:
        yield fake


def sections(fake: FakeSpeechThread, **speech: Any) -> dict[str, Any]:
    return {
        "providers": {"stt": {"base_url": fake.base_url, "timeout_s": 10, "max_retries": 1}},
        "speech": {
            "transcription": {"provider": "stt", "model": STT_MODEL, "price_per_minute": 0.6},
            **speech,
        },
    }


def send_audio(handle: DaemonHandle, audio: bytes, text: str = "") -> httpx.Response:
    body = {
        "text": text,
        "files": [
            {"name": "note.wav", "mime_type": "audio/wav", "data_base64": base64.b64encode(audio).decode()}
        ],
    }
    return handle.http.post(f"/api/sessions/{SESSION}/messages", json=body, params={"wait": "1"})


def voice_file(handle: DaemonHandle) -> dict[str, Any]:
    (message,) = [m for m in handle.transcript(SESSION) if m["role"] == "user" and m.get("files")]
    (file,) = message["files"]
    return dict(file)


def test_an_audio_file_over_the_api_is_heard_shown_and_counted(
    start_daemon: Callable[..., DaemonHandle],
    scripted: ScriptedOpenAIThread,
    speech: FakeSpeechThread,
    capsys: pytest.CaptureFixture[str],
) -> None:
    audio = spoken("remind me to call the plumber")
    speech.expect(audio, "Remind me to call the plumber.", language="english")
    scripted.enqueue(Reply(text="I will."))
    handle = start_daemon(**sections(speech))
    answer = send_audio(handle, audio)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "I will."
    (request,) = scripted.requests
    said = str(request["messages"])
    assert "[transcribed speech from the attached voice note note.wav" in said
    assert "Remind me to call the plumber." in said

    file = voice_file(handle)
    assert file["kind"] == "audio"
    heard = file["transcript"]
    assert heard["text"] == "Remind me to call the plumber." and heard["language"] == "english"
    assert heard["model"] == STT_MODEL and heard["seconds"] > 0.5
    seconds = heard["seconds"]

    print_session(handle.http.get(f"/api/sessions/{SESSION}").json())
    shown = capsys.readouterr().out
    assert "[voice note note.wav, transcribed speech, english] Remind me to call the plumber." in shown

    browser = httpx.Client(base_url=handle.base_url, timeout=30)
    assert browser.post("/ui/login", data={"token": handle.token}).status_code == 303
    page = browser.get(f"/ui/sessions/{quote(SESSION)}").text
    assert "voice note note.wav" in page and "Remind me to call the plumber." in page

    metrics = handle.http.get("/metrics").text
    assert f'netclaw_speech_seconds_count{{direction="transcription",model="{STT_MODEL}"}} 1.0' in metrics
    assert 'netclaw_speech_audio_seconds_total{direction="transcription"}' in metrics
    assert f'netclaw_cost_total{{model="{STT_MODEL}"}}' in metrics

    (usage,) = handle.http.get("/api/usage", params={"by": "session"}).json()
    assert usage["speech_seconds"] == pytest.approx(seconds, abs=0.01)
    assert usage["cost"] == pytest.approx(seconds / 60 * 0.6, abs=1e-6)  # the model had no price
    by_model = {r["key"]: r for r in handle.http.get("/api/usage", params={"by": "model"}).json()}
    assert by_model[STT_MODEL]["speech_seconds"] == pytest.approx(seconds, abs=0.01)


def test_the_transcript_survives_snapshots_and_a_restart(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread, speech: FakeSpeechThread
) -> None:
    """Snapshots after every turn (interval 1): the next daemon reads the transcript from
    the snapshot's rows, and the note is never heard again."""
    audio = spoken("the meeting moved to thursday")
    speech.expect(audio, "The meeting moved to Thursday.")
    config = {**sections(speech), "session": {"snapshot_interval": 1}}
    first = start_daemon(**config)
    assert send_audio(first, audio).status_code == 200
    assert first.send(SESSION, "and one more", wait=True).status_code == 200  # snapshots after the note
    first.stop()
    second = start_daemon(**config)
    assert voice_file(second)["transcript"]["text"] == "The meeting moved to Thursday."
    assert len(speech.transcriptions(audio)) == 1


def test_a_note_over_the_limit_is_not_sent_and_the_turn_says_why(
    start_daemon: Callable[..., DaemonHandle], scripted: ScriptedOpenAIThread, speech: FakeSpeechThread
) -> None:
    audio = spoken("this note is much too long for the configured limit of one second")
    scripted.enqueue(Reply(text="I could not hear it."))
    handle = start_daemon(**sections(speech, max_audio_s=1))
    assert send_audio(handle, audio, "listen").json()["reply"] == "I could not hear it."
    heard = voice_file(handle)["transcript"]
    assert "text" not in heard and "speech.max_audio_s" in heard["error"]
    assert speech.requests == []
    assert "it could not be transcribed" in str(scripted.requests[0]["messages"])
